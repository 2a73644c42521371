/** Every endpoint through the real server (Bun.serve on an ephemeral port, real fetch): status, shape, semantics. */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, runCli, tempFolder } from "../helpers/cli.ts";
import { startTestServer, type TestServer } from "./serverKit.ts";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ service: { blockTokens: 100 } });
});
afterAll(async () => {
  await server.close();
});
afterEach(async () => {
  expect((await server.post("/v1/reset")).status).toBe(200);
});

const PRIORITY = (labels: string) => `Please read the context in the following priority order: ${labels} and answer the question.`;

describe("GET /healthz", () => {
  test("answers {status: ok}", async () => {
    const answer = await server.get("/healthz");
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ status: "ok" });
    expect(answer.headers.get("content-type")).toContain("application/json");
  });
});

describe("POST /v1/reorder", () => {
  test("a first context keeps its order; an overlapping second one gets the first's blocks as its prefix", async () => {
    const first = await server.post("/v1/reorder", { contexts: [[1, 2, 3, 4]] });
    expect(first.status).toBe(200);
    expect(first.body.schedule).toEqual([0]);
    const r1 = first.body.results[0];
    expect(r1.blocks).toEqual([1, 2, 3, 4]);
    expect(r1.order).toEqual([0, 1, 2, 3]);
    expect(r1.prefix_blocks).toBe(0);
    expect(r1.prefix_tokens).toBe(0);
    expect(r1.request_id).toMatch(/^ctxr-[0-9a-f]{32}$/);
    expect(r1.annotation).toBe(PRIORITY("[Doc 1] > [Doc 2] > [Doc 3] > [Doc 4]"));

    const second = await server.post("/v1/reorder", { contexts: [[9, 2, 1, 7]] });
    const r2 = second.body.results[0];
    expect(r2.blocks).toEqual([1, 2, 9, 7]);
    expect(r2.order).toEqual([2, 1, 0, 3]);
    expect(r2.prefix_blocks).toBe(2);
    expect(r2.prefix_tokens).toBe(200);
    expect(r2.request_id).not.toBe(r1.request_id);
    expect((await server.get("/v1/stats")).body.contexts).toBe(2);
  });

  test("the annotation states the original relevance order, as in the issue's example", async () => {
    // The index holds b a d x; the request's relevance order is a b c d, so it is sent as
    // b a d c: a is [Doc 2], b [Doc 1], c [Doc 4], d [Doc 3].
    await server.post("/v1/reorder", { contexts: [["b", "a", "d", "x"]] });
    const answer = await server.post("/v1/reorder", { contexts: [["a", "b", "c", "d"]] });
    const r = answer.body.results[0];
    expect(r.blocks).toEqual(["b", "a", "d", "c"]);
    expect(r.prefix_blocks).toBe(3);
    expect(r.annotation).toBe("Please read the context in the following priority order: [Doc 2] > [Doc 1] > [Doc 4] > [Doc 3] and answer the question.");
  });

  test("a batch: results in request order, sharers reordered to share and scheduled back to back", async () => {
    const contexts = [
      [10, 11, 1],
      [20, 21, 22],
      [1, 12, 13, 11],
      [23, 20, 22],
    ];
    const answer = await server.post("/v1/reorder", { contexts });
    expect(answer.status).toBe(200);
    const { results, schedule } = answer.body as { results: { blocks: number[]; order: number[]; prefix_blocks: number }[]; schedule: number[] };
    expect([...schedule].sort()).toEqual([0, 1, 2, 3]);
    results.forEach((r, i) => {
      expect([...r.blocks].sort()).toEqual([...contexts[i]!].sort());
      expect(r.order.map((p) => contexts[i]![p])).toEqual(r.blocks);
    });
    expect(results[2]!.blocks.slice(0, 2)).toEqual(results[0]!.blocks.slice(0, 2));
    expect(new Set(results[0]!.blocks.slice(0, 2))).toEqual(new Set([1, 11]));
    expect(Math.abs(schedule.indexOf(0) - schedule.indexOf(2))).toBe(1);
    expect(Math.abs(schedule.indexOf(1) - schedule.indexOf(3))).toBe(1);
    expect(results[0]!.prefix_blocks + results[2]!.prefix_blocks).toBe(2);
  });

  test("text blocks: the same text (up to whitespace) is the same block; objects are echoed as sent; templates apply", async () => {
    await server.post("/v1/reorder", { contexts: [[{ text: "The  cat\nsat." }, { id: 5, tokens: 7 }]] });
    const answer = await server.post("/v1/reorder", {
      contexts: [[{ text: "Birds fly." }, { text: " The cat sat. " }]],
      templates: { doc: "<{n}>", separator: ", ", priority: "Order: {order}" },
    });
    expect(answer.status).toBe(200);
    expect(answer.body.results[0].blocks).toEqual([{ text: " The cat sat. " }, { text: "Birds fly." }]);
    expect(answer.body.results[0].prefix_blocks).toBe(1);
    expect(answer.body.results[0].annotation).toBe("Order: <2>, <1>");
  });

  test("1 and \"1\" are different blocks", async () => {
    await server.post("/v1/reorder", { contexts: [[1, 2]] });
    const answer = await server.post("/v1/reorder", { contexts: [["1", "2"]] });
    expect(answer.body.results[0].prefix_blocks).toBe(0);
  });

  test("with conversation_id, the reordered blocks are remembered for dedup", async () => {
    const reorder = await server.post("/v1/reorder", { contexts: [[7, 8, 9]], conversation_id: "chat-r" });
    expect(reorder.status).toBe(200);
    const dedup = await server.post("/v1/dedup", { conversation_id: "chat-r", blocks: [9, 100] });
    expect(dedup.body).toEqual({ blocks: ["Please refer to [Doc 3] in the previous conversation.", 100], duplicates: [9] });
  });
});

describe("POST /v1/schedule", () => {
  test("equals the offline build (`ctxr index build`) of the same contexts, and changes no state", async () => {
    const lines = readFileSync(join(REPO_ROOT, "samples/zipf_N2000_k15.jsonl"), "utf8").trim().split("\n").slice(0, 300);
    const contexts = lines.map((line) => JSON.parse(line) as number[]);
    const folder = tempFolder("ctxr-schedule-");
    try {
      writeFileSync(join(folder.path, "in.jsonl"), lines.join("\n") + "\n");
      const run = runCli(["index", "build", "--input", "in.jsonl", "--output", "out.jsonl", "--no-progress"], { cwd: folder.path });
      expect(run.code).toBe(0);
      const offline = readFileSync(join(folder.path, "out.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line) as { id: number; blocks: number[]; path: number[] });
      const offlineMethod = (JSON.parse(run.stdout.trim().split("\n").pop()!) as { method: string }).method;

      const answer = await server.post("/v1/schedule", { contexts });
      expect(answer.status).toBe(200);
      expect(answer.body.method).toBe(offlineMethod);
      expect(answer.body.schedule).toEqual(offline.map((c) => c.id));
      for (const c of offline) {
        expect(answer.body.results[c.id].blocks).toEqual(c.blocks);
        expect(answer.body.results[c.id].path).toEqual(c.path);
      }
    } finally {
      folder.cleanup();
    }
    expect((await server.get("/v1/stats")).body.contexts).toBe(0);
  });

  test("method, alpha and linkage are passed on", async () => {
    const contexts = [[1, 2, 3], [3, 2, 9], [7, 8], [8, 7, 1]];
    for (const method of ["trie", "cluster"]) {
      const answer = await server.post("/v1/schedule", { contexts, method, alpha: 0.01, linkage: "complete" });
      expect(answer.status).toBe(200);
      expect(answer.body.method).toBe(method);
      expect([...answer.body.schedule].sort()).toEqual([0, 1, 2, 3]);
    }
  });
});

describe("POST /v1/dedup", () => {
  test("blocks seen earlier in the conversation become a reference annotation; conversations are isolated", async () => {
    const first = await server.post("/v1/dedup", { conversation_id: "a", blocks: [1, 2, 3] });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ blocks: [1, 2, 3], duplicates: [] });

    const second = await server.post("/v1/dedup", { conversation_id: "a", blocks: [4, 2, 5, 1] });
    expect(second.body).toEqual({
      blocks: [4, "Please refer to [Doc 2] in the previous conversation.", 5, "Please refer to [Doc 1] in the previous conversation."],
      duplicates: [2, 1],
    });

    const other = await server.post("/v1/dedup", { conversation_id: "b", blocks: [2, 1] });
    expect(other.body).toEqual({ blocks: [2, 1], duplicates: [] });
    expect((await server.get("/v1/stats")).body.conversations).toBe(2);
  });

  test("text blocks, string ids and a custom template", async () => {
    await server.post("/v1/dedup", { conversation_id: "t", blocks: [{ text: "alpha  beta" }, "doc-1"] });
    const again = await server.post("/v1/dedup", { conversation_id: "t", blocks: ["doc-1", { text: "alpha beta " }, { text: "gamma" }], templates: { dedup: "(see {doc})" } });
    expect(again.body.blocks).toEqual(["(see [Doc 2])", "(see [Doc 1])", { text: "gamma" }]);
    expect(again.body.duplicates[0]).toBe("doc-1");
    expect(again.body.duplicates[1]).toMatch(/^text:[0-9a-f]{32}$/);
  });
});

describe("POST /v1/evict", () => {
  test("removes contexts by request id, in the forms engines report them, exactly once", async () => {
    const answer = await server.post("/v1/reorder", { contexts: [[1, 2], [3, 4], [5, 6], [7, 8]] });
    const ids = (answer.body.results as { request_id: string }[]).map((r) => r.request_id);
    expect((await server.get("/v1/stats")).body.contexts).toBe(4);

    expect((await server.post("/v1/evict", { request_ids: [`chatcmpl-${ids[0]}`] })).body).toEqual({ evicted: 1 });
    expect((await server.post("/v1/evict", { request_ids: [`cmpl-${ids[1]}-0-1a2b3c4d`] })).body).toEqual({ evicted: 1 });
    expect((await server.post("/v1/evict", { request_ids: [`${ids[2]}-0-deadbeef`, "ctxr-unknown", "chatcmpl-nothing-0-abcd"] })).body).toEqual({ evicted: 1 });
    expect((await server.post("/v1/evict", { request_ids: [ids[0], `chatcmpl-${ids[1]}`, ids[2]] })).body).toEqual({ evicted: 0 });
    const stats = (await server.get("/v1/stats")).body;
    expect(stats.contexts).toBe(1);
    expect(stats.evicted_contexts).toBe(3);
    expect((await server.post("/v1/evict", { request_ids: [ids[3], ids[3]] })).body).toEqual({ evicted: 1 });
    const empty = (await server.get("/v1/stats")).body;
    expect(empty.contexts).toBe(0);
    expect(empty.nodes).toBe(1);
    expect(empty.index_tokens).toBe(0);
    expect((await server.post("/v1/evict", { request_ids: [] })).body).toEqual({ evicted: 0 });
  });

  test("an evicted context's prefix is no longer offered", async () => {
    const first = await server.post("/v1/reorder", { contexts: [[1, 2, 3]] });
    await server.post("/v1/evict", { request_ids: [first.body.results[0].request_id] });
    const second = await server.post("/v1/reorder", { contexts: [[3, 2, 1]] });
    expect(second.body.results[0].prefix_blocks).toBe(0);
    expect(second.body.results[0].blocks).toEqual([3, 2, 1]);
  });
});

describe("GET /v1/stats and POST /v1/reset", () => {
  test("stats count contexts, tokens, hits and conversations; reset forgets everything", async () => {
    const server = await startTestServer({ service: { blockTokens: 100 } });
    try {
      await statsAndReset(server);
    } finally {
      await server.close();
    }
  });
});

async function statsAndReset(server: TestServer): Promise<void> {
  await server.post("/v1/reorder", { contexts: [[1, 2, 3]], conversation_id: "c1" });
  await server.post("/v1/reorder", { contexts: [[1, 2, 4]] });
  await server.post("/v1/dedup", { conversation_id: "c2", blocks: [1] });
  const stats = (await server.get("/v1/stats")).body;
  expect(stats).toMatchObject({
    contexts: 2,
    nodes: 4,
    index_tokens: 400,
    distinct_blocks: 4,
    conversations: 2,
    capacity_tokens: null,
    ttl_ms: null,
    prefix_hit_tokens: 200,
    persistent: false,
    recovery: null,
  });
  expect(stats.prompt_tokens).toBe(600);
  expect(stats.estimated_prefix_hit_ratio).toBeCloseTo(stats.prefix_hit_tokens / stats.prompt_tokens, 10);

  const reset = await server.post("/v1/reset");
  expect(reset.status).toBe(200);
  expect(reset.body).toEqual({ reset: true });
  const after = (await server.get("/v1/stats")).body;
  expect(after).toMatchObject({ contexts: 0, nodes: 1, index_tokens: 0, conversations: 0 });
  const again = await server.post("/v1/reorder", { contexts: [[1, 2, 3]] });
  expect(again.body.results[0].prefix_blocks).toBe(0);
  const dedup = await server.post("/v1/dedup", { conversation_id: "c2", blocks: [1] });
  expect(dedup.body.duplicates).toEqual([]);
  // Counters are cumulative (Prometheus counters): reset keeps them.
  expect((await server.get("/v1/stats")).body.reordered_contexts).toBe(3);
}

describe("GET /openapi.json", () => {
  test("an OpenAPI 3 document with every route, its request and response schemas and its error answers", async () => {
    const answer = await server.get("/openapi.json");
    expect(answer.status).toBe(200);
    const doc = JSON.parse(answer.text);
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info.title).toBe("ctxr");
    const paths = Object.keys(doc.paths).sort();
    expect(paths).toEqual(["/", "/health", "/healthz", "/metrics", "/openapi.json", "/ready", "/v1/dedup", "/v1/evict", "/v1/reorder", "/v1/reset", "/v1/schedule", "/v1/stats", "/v1/stats/history"]);
    for (const path of ["/v1/reorder", "/v1/schedule", "/v1/dedup", "/v1/evict"]) {
      const op = doc.paths[path].post;
      expect(op.requestBody.required).toBe(true);
      expect(op.requestBody.content["application/json"].schema).toBeDefined();
      for (const code of ["200", "400", "413", "415", "500"]) expect(op.responses[code]).toBeDefined();
      expect(op.responses["400"].content["application/json"].schema.$ref).toBe("#/components/schemas/Error");
      expect(op.security).toBeUndefined();
    }
    for (const path of ["/healthz", "/ready", "/metrics", "/v1/stats", "/openapi.json"]) expect(doc.paths[path].get.responses["200"]).toBeDefined();
    expect(doc.paths["/ready"].get.responses["503"].content["application/json"].schema.$ref).toBe("#/components/schemas/ReadyResponse");
    for (const name of ["Block", "ReorderRequest", "ReorderResponse", "ScheduleRequest", "DedupRequest", "EvictRequest", "StatsResponse", "Error", "AnnotationTemplates"]) {
      expect(doc.components.schemas[name]).toBeDefined();
    }
    // The limits are in the schemas.
    const contexts = doc.components.schemas.ReorderRequest.properties.contexts;
    expect(contexts.maxItems).toBe(1024);
    expect(contexts.items.maxItems).toBe(1024);
  });
});

describe("GET /metrics", () => {
  test("Prometheus text with request counts, latency histograms, index gauges and hit counters", async () => {
    await server.post("/v1/reorder", { contexts: [[1, 2, 3]] });
    await server.post("/v1/reorder", { contexts: [[1, 2, 4]] });
    await server.post("/v1/reorder", { contexts: "nope" });
    await server.get("/nowhere");
    const answer = await server.get("/metrics");
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toContain("text/plain; version=0.0.4");
    const text = answer.text;
    expect(text).toMatch(/^ctxr_http_requests_total\{route="\/v1\/reorder",method="POST",status="200"\} \d+$/m);
    expect(text).toMatch(/^ctxr_http_requests_total\{route="\/v1\/reorder",method="POST",status="400"\} \d+$/m);
    expect(text).toMatch(/^ctxr_http_requests_total\{route="unmatched",method="GET",status="404"\} \d+$/m);
    expect(text).toContain("# TYPE ctxr_http_request_duration_seconds histogram");
    expect(text).toMatch(/^ctxr_http_request_duration_seconds_bucket\{route="\/v1\/reorder",le="\+Inf"\} \d+$/m);
    expect(text).toMatch(/^ctxr_http_request_duration_seconds_count\{route="\/v1\/reorder"\} \d+$/m);
    expect(text).toMatch(/^ctxr_http_request_duration_seconds_sum\{route="\/v1\/reorder"\} [\d.e-]+$/m);
    expect(text).toContain("ctxr_index_contexts 2\n");
    expect(text).toContain("ctxr_index_nodes 4\n");
    expect(text).toContain("ctxr_index_tokens 400\n");
    expect(text).toContain("ctxr_conversations 0\n");
    expect(text).toContain("# TYPE ctxr_prefix_hit_tokens_total counter");
    expect(text).toMatch(/^ctxr_prefix_hit_tokens_total \d+$/m);
    expect(text).toMatch(/^ctxr_prompt_tokens_total \d+$/m);
    // Every line is a comment or "name{labels} value".
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(/^(# (HELP|TYPE) \w+ .+|[a-z_]+(\{[^}]*\})? [0-9.e+-]+|[a-z_]+(\{[^}]*\})? \+Inf)$/);
  });
});

describe("TTL", () => {
  test("a timer expires contexts unused for the TTL", async () => {
    const ttl = await startTestServer({ service: { ttlMs: 150 }, server: { expireEveryMs: 25 } });
    try {
      await ttl.post("/v1/reorder", { contexts: [[1, 2, 3]] });
      expect((await ttl.get("/v1/stats")).body.contexts).toBe(1);
      const deadline = Date.now() + 5000;
      while ((await ttl.get("/v1/stats")).body.contexts !== 0 && Date.now() < deadline) await Bun.sleep(25);
      const stats = (await ttl.get("/v1/stats")).body;
      expect(stats.contexts).toBe(0);
      expect(stats.evicted_contexts).toBe(1);
    } finally {
      await ttl.close();
    }
  });
});
