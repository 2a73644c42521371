/**
 * Fuzz (issue 18): 2,000 seeded random hostile bodies to the proxy's
 * /v1/chat/completions and /v1/completions, in front of an upstream that
 * answers every request 200, so that any 5xx would be ctxr's own. Bodies are
 * valid-looking requests (with documents in message text, tool results, the
 * documents field, conversations) with one part replaced by nulls, wrong
 * types, huge numbers, deep nesting or random JSON, and random JSON values
 * and broken bytes. Every answer is a 200 from the upstream or a 4xx with a
 * JSON error; nothing logs an internal error; the server still works.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { integer, jsonPaths, pick, randomString, type Random } from "../helpers/fuzzRandom.ts";
import { seededRandom } from "../helpers/randomContexts.ts";
import { startProxy, type ProxyServer } from "../proxy/proxyKit.ts";
import { internalErrors, isErrorBody, parseJson, startOkUpstream, type OkUpstream } from "./clientInputKit.ts";

const ROUNDS = 2000;
const IN_FLIGHT = 16;

let upstream: OkUpstream;
let proxy: ProxyServer;
beforeAll(async () => {
  upstream = startOkUpstream();
  proxy = await startProxy({ upstreams: [upstream.url] }, { limits: { maxBodyBytes: 512 * 1024 } });
});
afterAll(async () => {
  await proxy?.close();
  await upstream?.stop();
});

const ALPHABET = 'ab <>/"{}[]:,\\\u00e9\u4e2d\u0000\n\ud83d\ude00\ud800';
const randomText = (random: Random, max = 12) => randomString(random, ALPHABET, max);

const nested = (random: Random, depth: number): unknown => {
  let value: unknown = random() < 0.5 ? "x" : null;
  for (let i = 0; i < depth; i++) value = random() < 0.5 ? [value] : { a: value };
  return value;
};

/** Values wrong wherever they land. */
function poison(random: Random): unknown {
  switch (integer(random, 12)) {
    case 0:
      return null;
    case 1:
      return pick(random, [true, false, 0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 1, 2 ** 64, 1e-320, -0]);
    case 2:
      return randomText(random, 40);
    case 3:
      return [];
    case 4:
      return {};
    case 5:
      return [null, 1, "x", [], {}];
    case 6:
      return nested(random, 1 + integer(random, 80));
    case 7:
      return { role: pick(random, [null, 1, "user", "tool", "assistant", ""]), content: pick(random, [null, 5, "x", [], [{ type: "text", text: null }], [{ type: "text" }]]) };
    case 8:
      return { id: pick(random, [null, {}, [], 1.5, "d"]), title: pick(random, [null, 1, "t"]), text: pick(random, [null, 1, [], "t", ""]) };
    case 9:
      return { conversation_id: pick(random, ["", "x".repeat(300), null, 1, "c1"]), reorder: pick(random, [null, "yes", 1, true]), dedup: pick(random, [0, false, "no"]), [randomText(random, 4)]: 1 };
    case 10:
      return randomJson(random);
    default:
      return "__proto__";
  }
}

function randomJson(random: Random, depth = 0): unknown {
  switch (integer(random, depth > 3 ? 5 : 7)) {
    case 0:
      return null;
    case 1:
      return random() < 0.5;
    case 2:
      return pick(random, [0, -1, 1.5, 1e308, 2 ** 63, 42]);
    case 3:
    case 4:
      return randomText(random);
    case 5:
      return Array.from({ length: integer(random, 4) }, () => randomJson(random, depth + 1));
    default: {
      const keys = ["messages", "prompt", "documents", "ctxr", "role", "content", "text", "type", "stream", "__proto__", "constructor", randomText(random, 5)];
      const out: Record<string, unknown> = {};
      for (let i = integer(random, 4); i > 0; i--) out[pick(random, keys)] = randomJson(random, depth + 1);
      return out;
    }
  }
}

const docText = (random: Random) => {
  const names = Array.from({ length: 1 + integer(random, 4) }, () => `d${integer(random, 6)}`);
  return random() < 0.5
    ? names.map((n) => `<document id="${n}">${n} says ${n}.</document>`).join("\n") + "\nQuestion?"
    : names.map((n, i) => `[${i + 1}] ${n} says ${n}.`).join("\n") + "\nQuestion?";
};

function validChat(random: Random): Record<string, unknown> {
  const messages: unknown[] = [{ role: "system", content: "Be brief." }];
  for (let turn = integer(random, 3); turn > 0; turn--) messages.push({ role: "user", content: docText(random) }, { role: "assistant", content: "ok" });
  if (random() < 0.3) messages.push({ role: "tool", tool_call_id: `t${integer(random, 3)}`, content: "tool output" });
  messages.push({ role: "user", content: random() < 0.5 ? docText(random) : [{ type: "text", text: docText(random) }, { type: "image_url", image_url: { url: "x" } }] });
  const body: Record<string, unknown> = { model: "m", messages };
  if (random() < 0.5) body.documents = [{ id: "a", text: "alpha" }, { id: 2, title: "B", text: "beta" }];
  if (random() < 0.5) body.ctxr = { conversation_id: `c${integer(random, 4)}`, ...(random() < 0.3 ? { dedup: false } : {}) };
  if (random() < 0.3) body.stream = random() < 0.5;
  return body;
}

function validCompletion(random: Random): Record<string, unknown> {
  const body: Record<string, unknown> = { model: "m", prompt: random() < 0.7 ? docText(random) : pick(random, [["a", "b"], [1, 2], [[1], [2]]]), max_tokens: 4 };
  if (random() < 0.4) body.ctxr = { conversation_id: `c${integer(random, 4)}` };
  return body;
}

/** A valid body with the value at a random path replaced by poison (or a key added). */
function mutated(random: Random, body: Record<string, unknown>): Record<string, unknown> {
  const paths = jsonPaths(body);
  for (let edits = 1 + integer(random, 2); edits > 0; edits--) {
    const path = pick(random, paths.filter((p) => p.length > 0));
    const parent = path.slice(0, -1).reduce<any>((v, k) => (v === null || typeof v !== "object" ? v : v[k]), body);
    if (parent === null || typeof parent !== "object") continue;
    const last = path[path.length - 1]!;
    if (random() < 0.15 && !Array.isArray(parent)) parent[pick(random, ["documents", "ctxr", "messages", "prompt", "role", "content", "text", randomText(random, 5)])] = poison(random);
    else parent[last] = poison(random);
  }
  return body;
}

function hostileRequest(random: Random): { path: string; body: string | Uint8Array } {
  const path = random() < 0.6 ? "/v1/chat/completions" : "/v1/completions";
  const valid = () => (path === "/v1/chat/completions" ? validChat(random) : validCompletion(random));
  switch (integer(random, 10)) {
    case 0:
      return { path, body: JSON.stringify(randomJson(random)) ?? "null" };
    case 1: {
      // A deep value somewhere: a little under, at, or far over the limit.
      const depth = pick(random, [10, 60, 62, 63, 64, 65, 200, 20_000]);
      const inner = random() < 0.5 ? "[".repeat(depth) + "]".repeat(depth) : '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
      const field = pick(random, ["messages", "documents", "ctxr", "prompt", "tools", "x"]);
      const base = JSON.stringify(valid());
      return { path, body: `{"${field}":${inner},${base.slice(1)}` };
    }
    case 2: {
      const text = JSON.stringify(valid());
      return { path, body: text.slice(0, integer(random, text.length)) };
    }
    case 3: {
      const bytes = new Uint8Array(1 + integer(random, 200));
      for (let i = 0; i < bytes.length; i++) bytes[i] = integer(random, 256);
      return { path, body: bytes };
    }
    case 4: {
      const number = pick(random, ["1e999", "-1e999", "9".repeat(400), "1e-999", "-0", "123456789012345678901234567890"]);
      return { path, body: `{"messages":[{"role":"user","content":${number}}],"prompt":[${number}],"documents":[{"id":${number},"text":"t"}],"max_tokens":${number}}` };
    }
    default:
      return { path, body: JSON.stringify(mutated(random, valid())) };
  }
}

test(`${ROUNDS} hostile bodies to the proxy: 200 from the upstream or a JSON 4xx, never a 5xx or an internal error`, async () => {
  const random = seededRandom(18_2024);
  const requests = Array.from({ length: ROUNDS }, () => hostileRequest(random));
  const statuses = new Map<number, number>();
  const unexpected: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < requests.length) {
      const { path, body } = requests[next++]!;
      const response = await fetch(proxy.url + path, { method: "POST", body, headers: { "content-type": "application/json" } });
      const text = await response.text();
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      const ok = response.status === 200 || (response.status >= 400 && response.status < 500 && isErrorBody(parseJson(text)));
      if (!ok && unexpected.length < 10) unexpected.push(`${response.status} ${path} ${typeof body === "string" ? body.slice(0, 300) : "<bytes>"} -> ${text.slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));

  expect(unexpected).toEqual([]);
  expect(internalErrors(proxy.logs)).toEqual([]);
  expect([...statuses.keys()].every((s) => s === 200 || s === 400 || s === 413)).toBe(true);
  // Both kinds of answer are well represented.
  expect(statuses.get(200)!).toBeGreaterThan(ROUNDS / 5);
  expect(statuses.get(400)!).toBeGreaterThan(ROUNDS / 5);
  expect(upstream.received).toBe(statuses.get(200)!);
  // Still serving.
  const after = await proxy.post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
  expect(after.status).toBe(200);
}, 30_000);
