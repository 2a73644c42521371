/**
 * Fuzz: ~2,000 random malformed bodies through the real server. Every answer
 * is a JSON 4xx, the server stays up, failed requests change no state, and a
 * valid request still works afterwards.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { integer, jsonPaths, pick, randomString, type Random } from "../helpers/fuzzRandom.ts";
import { seededRandom } from "../helpers/randomContexts.ts";
import { startTestServer, type TestServer } from "./serverKit.ts";

const ROUNDS = 2000;
const IN_FLIGHT = 16;

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ server: { limits: { maxBodyBytes: 64 * 1024, maxContexts: 64, maxBlocks: 64 } } });
});
afterAll(async () => {
  await server.close();
});

const ALPHABET = 'abc xyz{}[]":,\\\u00e9\u4e2d\u0000\n\ud83d\ude00';
const randomText = (random: Random, max = 12) => randomString(random, ALPHABET, max);

function randomJson(random: Random, depth = 0): unknown {
  const kind = integer(random, depth > 3 ? 6 : 9);
  switch (kind) {
    case 0:
      return null;
    case 1:
      return random() < 0.5;
    case 2:
      return pick(random, [0, -1, 1.5, 1e308, -1e308, 2 ** 53, 2 ** 63, 1e-300, 42]);
    case 3:
      return randomText(random);
    case 4:
      return integer(random, 1000);
    case 5:
      return "";
    case 6:
      return Array.from({ length: integer(random, 5) }, () => randomJson(random, depth + 1));
    default: {
      const keys = ["contexts", "blocks", "request_ids", "conversation_id", "templates", "method", "alpha", "x", "__proto__", "constructor", randomText(random, 6)];
      const out: Record<string, unknown> = {};
      for (let i = integer(random, 4); i > 0; i--) out[pick(random, keys)] = randomJson(random, depth + 1);
      return out;
    }
  }
}

/** Values invalid wherever a block, a context, an id or an option is expected. */
const POISON: unknown[] = [null, true, false, 1.5, -0.5, 1e400, -1e400, 2 ** 60, "", [], {}, [[]], { id: null }, { tokens: 5 }, { id: 1, tokens: -3 }, { id: 1, tokens: 1e12 }, { id: 1, extra: 1 }, { text: 7 }, "x".repeat(1025), [null]];

function validBody(random: Random, route: string): Record<string, unknown> {
  const block = () => (random() < 0.7 ? integer(random, 50) : random() < 0.5 ? `d${integer(random, 50)}` : { id: integer(random, 50), text: "t", tokens: 3 });
  const context = () => {
    const seen = new Set<string>();
    const out: unknown[] = [];
    for (let i = 1 + integer(random, 6); i > 0; i--) {
      const b = block();
      const key = JSON.stringify(typeof b === "object" ? b.id : b);
      if (!seen.has(key)) (seen.add(key), out.push(b));
    }
    return out;
  };
  switch (route) {
    case "/v1/reorder":
      return { contexts: Array.from({ length: 1 + integer(random, 3) }, context), conversation_id: "conv" };
    case "/v1/schedule":
      return { contexts: Array.from({ length: 1 + integer(random, 3) }, context), method: "trie" };
    case "/v1/dedup":
      return { conversation_id: "conv", blocks: context() };
    default:
      return { request_ids: ["ctxr-0000", "chatcmpl-x"] };
  }
}

/** A valid body with one value replaced by something invalid at a random path (or a key added). */
function mutatedBody(random: Random, route: string): unknown {
  const body = validBody(random, route);
  const paths = jsonPaths(body);
  const candidates = paths.filter((p) => p.length > 0 && !(p.length === 1 && route === "/v1/evict" && p[0] === "request_ids") && !(p[p.length - 1] === "method"));
  const path = pick(random, candidates);
  const parent = path.slice(0, -1).reduce<any>((v, k) => v[k], body);
  const last = path[path.length - 1]!;
  const inBlock = (route === "/v1/dedup" && path.length >= 2) || path.length >= 3;
  if (random() < 0.15 && parent !== null && typeof parent === "object" && !Array.isArray(parent)) {
    parent[`unknown_${integer(random, 9)}`] = 1; // strict objects: an unknown key
  } else if (inBlock && typeof last === "string") {
    // Inside a block object: a wrong value for id/text/tokens.
    parent[last] = pick(random, last === "text" ? [null, 5, [], {}] : last === "tokens" ? [0, -1, 1.5, 1e12, "3", null] : [null, "", 1.5, [], {}, true]);
  } else {
    let poison = pick(random, POISON);
    // A request id may be any non-empty string up to 1024 characters, and an id-only
    // object is a valid block; keep the poison invalid where it lands.
    if (route === "/v1/evict" && typeof poison === "string" && poison.length > 0 && poison.length <= 1024) poison = null;
    // An empty dedup turn is valid.
    if (route === "/v1/dedup" && path.length === 1 && last === "blocks" && Array.isArray(poison) && poison.length === 0) poison = null;
    parent[last] = poison;
  }
  return body;
}

function deeplyNested(random: Random): string {
  const depth = 1000 + integer(random, 50_000);
  return random() < 0.5 ? "[".repeat(depth) + "]".repeat(depth) : `{"contexts":${"[".repeat(depth)}1${"]".repeat(depth)}}`;
}

function malformedRequest(random: Random): { route: string; body: string | Uint8Array | ReadableStream<Uint8Array>; contentType: string | null } {
  const route = pick(random, ["/v1/reorder", "/v1/schedule", "/v1/dedup", "/v1/evict"]);
  const kind = integer(random, 10);
  const json = "application/json";
  switch (kind) {
    case 0:
    case 1: {
      // A random JSON value (never a valid body: it lacks the required fields or has wrong ones).
      let value = randomJson(random);
      if (value !== null && typeof value === "object" && !Array.isArray(value)) (value as Record<string, unknown>).x = 1;
      return { route, body: JSON.stringify(value) ?? "null", contentType: json };
    }
    case 2:
    case 3:
    case 4:
      return { route, body: JSON.stringify(mutatedBody(random, route)), contentType: json };
    case 5: {
      const text = JSON.stringify(validBody(random, route));
      return { route, body: text.slice(0, integer(random, text.length)), contentType: json };
    }
    case 6: {
      const bytes = new Uint8Array(integer(random, 200) + 1);
      for (let i = 0; i < bytes.length; i++) bytes[i] = integer(random, 256);
      bytes[0] = pick(random, [0x00, 0xff, 0x7b, 0x5b, 0x22]);
      if (bytes[0] === 0x7b || bytes[0] === 0x5b) bytes[bytes.length - 1] = 0x00; // never valid JSON
      return { route, body: bytes, contentType: json };
    }
    case 7:
      return { route, body: deeplyNested(random), contentType: json };
    case 8: {
      // Huge numbers and long digit strings.
      const number = pick(random, ["1e999", "-1e999", "9".repeat(400), "123456789012345678901234567890", "0x10", "NaN", "Infinity", "1.", "-"]);
      return { route, body: `{"contexts":[[${number}]],"blocks":[${number}],"request_ids":[${number}],"conversation_id":"c"}`, contentType: json };
    }
    default: {
      // A valid body under a wrong or missing content type, or a body over the size limit.
      if (random() < 0.3) return { route, body: JSON.stringify({ contexts: [[{ text: "y".repeat(70 * 1024) }]] }), contentType: json };
      return { route, body: JSON.stringify(validBody(random, route)), contentType: pick(random, ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "application/xml", null]) };
    }
  }
}

const stateFields = ["contexts", "nodes", "index_tokens", "distinct_blocks", "conversations", "reordered_contexts", "prompt_tokens", "prefix_hit_tokens", "dedup_blocks", "duplicate_blocks", "evicted_contexts"];
const stateOf = (stats: Record<string, unknown>) => Object.fromEntries(stateFields.map((f) => [f, stats[f]]));

test(`${ROUNDS} random malformed bodies: all answered 4xx JSON, no state change, server alive and consistent`, async () => {
  // Some state first, so that a corrupting request would show.
  const seeded = await server.post("/v1/reorder", { contexts: [[1, 2, 3], [2, 3, 4]], conversation_id: "conv" });
  expect(seeded.status).toBe(200);
  await server.post("/v1/dedup", { conversation_id: "conv", blocks: [7, 8] });
  const before = stateOf((await server.get("/v1/stats")).body);

  const random = seededRandom(20240601);
  const requests = Array.from({ length: ROUNDS }, () => malformedRequest(random));
  const statuses = new Map<number, number>();
  const unexpected: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < requests.length) {
      const { route, body, contentType } = requests[next++]!;
      const response = await fetch(server.url + route, { method: "POST", body, headers: contentType === null ? {} : { "content-type": contentType } });
      const text = await response.text();
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      let parsed: { error?: { message?: unknown; field?: unknown } } | null = null;
      try {
        parsed = JSON.parse(text);
      } catch {}
      const ok = response.status >= 400 && response.status < 500 && typeof parsed?.error?.message === "string" && typeof parsed?.error?.field === "string";
      if (!ok && unexpected.length < 10) unexpected.push(`${response.status} ${route} ${String(typeof body === "string" ? body.slice(0, 200) : "<bytes>")} -> ${text.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));

  expect(unexpected).toEqual([]);
  expect([...statuses.keys()].every((s) => s === 400 || s === 413 || s === 415)).toBe(true);
  expect(statuses.get(400)!).toBeGreaterThan(ROUNDS / 2);
  expect((await server.get("/healthz")).status).toBe(200);
  expect(stateOf((await server.get("/v1/stats")).body)).toEqual(before);
  expect((await server.get("/metrics")).text).not.toMatch(/status="5\d\d"/);

  // Still consistent: the earlier contexts are reused and a valid request works.
  const valid = await server.post("/v1/reorder", { contexts: [[4, 3, 2, 9]] });
  expect(valid.status).toBe(200);
  expect(valid.body.results[0].prefix_blocks).toBe(3);
  const dedup = await server.post("/v1/dedup", { conversation_id: "conv", blocks: [8, 1] });
  expect(dedup.body.duplicates).toEqual([8, 1]);
  const ids = (seeded.body.results as { request_id: string }[]).map((r) => r.request_id);
  expect((await server.post("/v1/evict", { request_ids: ids })).body).toEqual({ evicted: 2 });
});
