/**
 * KV-cache managed generation through the HTTP API (a real server on an
 * ephemeral port, the real CPU runner, the tiny model): chat `documents` and
 * completion `segments` become chunks whose KV is cached and reused at any
 * position; usage.ctxr reports what happened; policy `full` and ratio 1.0 give
 * the same greedy text as a plain prompt; sparse decode (kv_budget) answers; a
 * disk tier (--kv-dir) survives a restart; bad options get a 400 naming them; the epic policy
 * and prophet's shift scores work end to end.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { tempFolder } from "../helpers/cli.ts";
import { tinyKvEngines, type OpenedEngine } from "../helpers/tinyKvEngines.ts";
import type { Client } from "./serverKit.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";

setDefaultTimeout(120_000);

const engines = tinyKvEngines();
const open = engines.open;
const kvDir = tempFolder("ctxr-kv-http-");

afterAll(() => kvDir.cleanup());

describe("KV-managed generation over HTTP", () => {
  let api: Client;
  let first: OpenedEngine;
  beforeAll(async () => {
    first = await open();
    api = first.api;
  });

  test("documents are chunks: a first request computes them, the reordered request reuses them", async () => {
    const first = await api.post("/v1/chat/completions", chat(DOCS));
    expect(first.status).toBe(200);
    const u1 = first.body.usage.ctxr;
    expect(u1.prompt_tokens_computed).toBe(first.body.usage.prompt_tokens);
    expect(u1.ttft_ms).toBeGreaterThan(0);
    expect(first.body.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });

    const second = await api.post("/v1/chat/completions", chat([DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!], { ctxr: { policy: "cachecraft", recompute_ratio: 0.25 } }));
    expect(second.status).toBe(200);
    const u2 = second.body.usage.ctxr;
    expect(u2.policy).toBe("cachecraft");
    expect(u2.prompt_tokens_prefix_reused).toBeGreaterThan(0); // the head
    expect(u2.prompt_tokens_chunk_reused + u2.prompt_tokens_recomputed).toBeGreaterThan(0);
    expect(u2.prompt_tokens_recomputed).toBe(Math.ceil(0.25 * (u2.prompt_tokens_chunk_reused + u2.prompt_tokens_recomputed)));
    expect(u2.prompt_tokens_prefix_reused + u2.prompt_tokens_chunk_reused + u2.prompt_tokens_recomputed + u2.prompt_tokens_computed).toBe(second.body.usage.prompt_tokens);
    expect(u2.tier_hits.device).toBe(5);
    // The field OpenAI, vLLM and SGLang clients read: the exact-prefix hits.
    expect(second.body.usage.prompt_tokens_details).toEqual({ cached_tokens: u2.prompt_tokens_prefix_reused });
  });

  test("policy epic (EPIC's LegoLink) is accepted and recomputes the ratio's budget, the first tokens of each reused chunk", async () => {
    const { api: fresh } = await open();
    await fresh.post("/v1/chat/completions", chat(DOCS));
    const reordered = await fresh.post("/v1/chat/completions", chat([DOCS[3]!, DOCS[1]!, DOCS[0]!, DOCS[2]!], { ctxr: { policy: "epic", recompute_ratio: 0.25 } }));
    expect(reordered.status).toBe(200);
    const u = reordered.body.usage.ctxr;
    expect(u.policy).toBe("epic");
    const reused = u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed;
    expect(reused).toBeGreaterThan(50);
    expect(u.prompt_tokens_recomputed).toBe(Math.ceil(0.25 * reused));
    expect(u.prompt_tokens_prefix_reused + reused + u.prompt_tokens_computed).toBe(reordered.body.usage.prompt_tokens);
    // At ratio 1 it recomputes every reused token: the same text as full prefill.
    const order = [DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!];
    const all = await fresh.post("/v1/chat/completions", chat(order, { ctxr: { policy: "epic", recompute_ratio: 1 } }));
    const full = await fresh.post("/v1/chat/completions", chat(order, { ctxr: { policy: "full" } }));
    expect(all.body.usage.ctxr.prompt_tokens_chunk_reused).toBe(0);
    expect(all.body.usage.ctxr.prompt_tokens_recomputed).toBeGreaterThan(50);
    expect(all.body.choices[0].message.content).toBe(full.body.choices[0].message.content);
  });

  test("prophet with shift scores: the stored variants get their measured shift, and the reused request recomputes the ratio's budget", async () => {
    const { api: fresh, engine } = await open({ prophetScores: "product" });
    await fresh.post("/v1/chat/completions", chat(DOCS));
    await engine.scheduler.background.idle(); // the shift is measured in the engine's idle time
    const variants = engine.chunkCache.index.all();
    expect(variants.length).toBeGreaterThan(0);
    for (const variant of variants) expect(variant.meta.tokenShift?.length).toBe(variant.meta.tokenInter.length);
    const reordered = await fresh.post("/v1/chat/completions", chat([DOCS[1]!, DOCS[2]!, DOCS[3]!, DOCS[0]!], { ctxr: { recompute_ratio: 0.2 } }));
    const u = reordered.body.usage.ctxr;
    expect(u.policy).toBe("prophet");
    expect(u.prompt_tokens_recomputed).toBe(Math.ceil(0.2 * (u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed)));
    // Without a scoring budget nothing measures it (the reuse then counts its chunks as unscored).
    const { api: plain, engine: plainEngine } = await open({ prophetScores: "attention", reuseScoringBudget: 0 });
    await plain.post("/v1/chat/completions", chat(DOCS));
    await plainEngine.scheduler.background.idle();
    expect(plainEngine.chunkCache.index.all().every((variant) => variant.meta.tokenShift === undefined)).toBe(true);
  });

  test("policy full and recompute ratio 1.0 give the same greedy text as full prefill", async () => {
    const order = [DOCS[1]!, DOCS[3]!, DOCS[0]!, DOCS[2]!];
    const full = await api.post("/v1/chat/completions", chat(order, { ctxr: { policy: "full" } }));
    const exact = await api.post("/v1/chat/completions", chat(order, { ctxr: { policy: "prophet", recompute_ratio: 1 } }));
    expect(full.body.usage.ctxr.prompt_tokens_computed).toBe(full.body.usage.prompt_tokens);
    expect(exact.body.usage.ctxr.prompt_tokens_chunk_reused).toBe(0);
    expect(exact.body.choices[0].message.content).toBe(full.body.choices[0].message.content);
  });

  test("documents prompts and the prefix cache are one exact-prefix mechanism: a repeat starts from the cached blocks, approximate KV is never cached", async () => {
    const { api: fresh, engine } = await open();
    const order = [DOCS[3]!, DOCS[1]!, DOCS[2]!, DOCS[0]!];
    const first = await fresh.post("/v1/chat/completions", chat(order));
    const variants = engine.chunkCache.stats.variants;
    expect(variants).toBeGreaterThan(0);
    // The same prompt again: its blocks come from the prefix cache (all but the last partial
    // block), no chunk variant is placed or stored a second time, the answer is the same.
    const again = await fresh.post("/v1/chat/completions", chat(order));
    const u = again.body.usage.ctxr;
    expect(u.prompt_tokens_prefix_reused).toBe(Math.floor((again.body.usage.prompt_tokens - 1) / 16) * 16);
    expect(u.tier_hits).toEqual({ device: 0, host: 0, disk: 0 });
    expect(u.prompt_tokens_chunk_reused).toBe(0);
    expect(engine.chunkCache.stats.variants).toBe(variants);
    expect(again.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
    expect(again.body.usage.prompt_tokens_details).toEqual({ cached_tokens: u.prompt_tokens_prefix_reused });
    // Reordered with no recompute, the chunks are reused approximately: those blocks are not
    // cached under exact names, so the same request again reuses the chunks, not blocks.
    const reordered = chat([DOCS[0]!, DOCS[2]!, DOCS[1]!, DOCS[3]!], { ctxr: { policy: "none" } });
    const approx = (await fresh.post("/v1/chat/completions", reordered)).body.usage.ctxr;
    const repeat = (await fresh.post("/v1/chat/completions", reordered)).body.usage.ctxr;
    expect(approx.prompt_tokens_chunk_reused).toBeGreaterThan(50);
    expect(repeat.prompt_tokens_chunk_reused).toBe(approx.prompt_tokens_chunk_reused);
    expect(repeat.prompt_tokens_prefix_reused).toBe(approx.prompt_tokens_prefix_reused);
  });

  test("completion segments: chunks, then the question; streaming usage carries ctxr", async () => {
    const segments = ["First chunk of text about kilns.", "Second chunk about glaze recipes.", "Question: what is fired?"];
    await api.post("/v1/completions", { segments, max_tokens: 3, temperature: 0 });
    const response = await fetch(`${first.server.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ segments: [segments[1], segments[0], segments[2]], max_tokens: 3, temperature: 0, stream: true, stream_options: { include_usage: true } }),
    });
    const events = (await response.text()).split("\n\n").filter((b) => b.startsWith("data: {")).map((b) => JSON.parse(b.slice(6)));
    const usage = events.at(-1).usage;
    expect(usage.ctxr.prompt_tokens_chunk_reused + usage.ctxr.prompt_tokens_recomputed).toBeGreaterThan(0);
    expect(usage.prompt_tokens_details.cached_tokens).toBe(usage.ctxr.prompt_tokens_prefix_reused);
    // New segments sent twice in one order: the second time everything but the question is an exact prefix.
    const fresh = ["A chunk about bell founding in the old town.", "Another about the tower's clock.", "Question: who rang it?"];
    const once = await api.post("/v1/completions", { segments: fresh, max_tokens: 3, temperature: 0 });
    const again = await api.post("/v1/completions", { segments: fresh, max_tokens: 3, temperature: 0 });
    expect(once.body.usage.prompt_tokens_details.cached_tokens).toBe(once.body.usage.ctxr.prompt_tokens_prefix_reused);
    expect(again.body.usage.prompt_tokens_details.cached_tokens).toBe(again.body.usage.prompt_tokens - again.body.usage.ctxr.prompt_tokens_computed);
    expect(again.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(once.body.usage.prompt_tokens_details.cached_tokens + 40);
  });

  test("sparse decode: kv_budget answers and reports its steps; kv_budget 1 equals dense", async () => {
    const long = Array.from({ length: 12 }, (_, i) => ({ id: `p${i}`, text: `Paragraph ${i}: ${"the quick brown fox jumps over the lazy dog ".repeat(4)}` }));
    const sparse = await api.post("/v1/chat/completions", chat(long, { max_tokens: 8, ctxr: { kv_budget: 0.05 } }));
    expect(sparse.status).toBe(200);
    expect(sparse.body.usage.completion_tokens).toBe(8);
    expect(sparse.body.usage.ctxr.sparse_decode_steps).toBeGreaterThan(0);
    const dense = await api.post("/v1/chat/completions", chat(long, { max_tokens: 8 }));
    const one = await api.post("/v1/chat/completions", chat(long, { max_tokens: 8, ctxr: { kv_budget: 1 } }));
    expect(one.body.choices[0].message.content).toBe(dense.body.choices[0].message.content);
  });

  test("cached chunk KV never refuses work: a long generation after documents requests gets the blocks the cache held", async () => {
    // 64 blocks of 16 tokens; the chunk cache may keep 16 of them on the device.
    const small = await open({ kvBlocks: 64, kvDeviceBlocks: 16 });
    for (const order of [DOCS, [...DOCS].reverse()]) expect((await small.api.post("/v1/chat/completions", chat(order))).status).toBe(200);
    // Once the idle-time scoring of the new variants is done, nothing runs: every block in use is
    // cached KV (chunk variants on the device, exact prompt blocks in the prefix cache).
    await small.engine.scheduler.background.idle();
    const cached = small.engine.scheduler.stats;
    expect(cached.kvBlocksUsed).toBeGreaterThan(8);
    expect(cached.kvBlocksUsed).toBe(cached.kvBlocksPrefixCached + small.engine.chunkCache.stats.deviceBlocks);
    // /metrics shows the same split, so a client can check that no request still holds blocks.
    const metrics = (await small.api.get("/metrics")).text;
    const gauge = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(metrics)?.[1]);
    expect(gauge("ctxr_kv_device_blocks")).toBe(small.engine.chunkCache.stats.deviceBlocks);
    expect(gauge("ctxr_generation_kv_blocks_used")).toBe(gauge("ctxr_prefix_cache_blocks") + gauge("ctxr_kv_device_blocks"));
    // Prompt + 1,000 tokens need 63 of the 64 blocks: only with the cache's blocks given back.
    const long = await small.api.post("/v1/completions", { prompt: "x", max_tokens: 1000, ignore_eos: true, temperature: 0 });
    expect(long.body.error?.message).toBeUndefined();
    expect(long.status).toBe(200);
    expect(long.body.usage.completion_tokens).toBe(1000);
    expect(small.engine.chunkCache.stats.deviceBlocks).toBeLessThanOrEqual(1);
  });

  test("concurrent requests with the same new documents compute them once (delay hit)", async () => {
    const fresh = [
      { text: "A brand new document about lighthouses and their keepers on the northern coast." },
      { text: "Another new document: fog horns, lamp oil, and the long winter nights." },
    ];
    const answers = await Promise.all([0, 1, 2].map(() => api.post("/v1/chat/completions", chat(fresh))));
    for (const a of answers) expect(a.status).toBe(200);
    // One request computes the documents; the others wait for them and compute only their question.
    const computed = answers.map((a) => a.body.usage.ctxr.prompt_tokens_computed).sort((x, y) => x - y);
    expect(computed[0]).toBe(computed[1]!);
    expect(computed[2]).toBeGreaterThan(computed[1]! + 100);
    expect(answers.filter((a) => a.body.usage.ctxr.prompt_tokens_prefix_reused > 100).length).toBe(2);
  });

  test("bad options and documents are refused with 400 naming the field", async () => {
    const bad = [
      [chat(DOCS, { ctxr: { policy: "magic" } }), "ctxr.policy"],
      [chat(DOCS, { ctxr: { recompute_ratio: 2 } }), "ctxr.recompute_ratio"],
      [chat(DOCS, { ctxr: { kv_budget: 0 } }), "ctxr.kv_budget"],
      [chat([{ text: "" }]), "documents"],
    ] as const;
    for (const [body, field] of bad) {
      const answer = await api.post("/v1/chat/completions", body);
      expect(answer.status).toBe(400);
      expect(JSON.stringify(answer.body)).toContain(field);
    }
    const both = await api.post("/v1/completions", { prompt: "x", segments: ["a", "b"] });
    expect(both.status).toBe(400);
    expect(JSON.stringify(both.body)).toContain("segments");
  });
});

describe("disk tier over a restart", () => {
  test("chunk caches written to --kv-dir are reused by the next server", async () => {
    const first = await open({ kvDir: kvDir.path, kvDeviceBlocks: 0, kvHostBytes: 0 });
    const a = await first.api.post("/v1/chat/completions", chat(DOCS));
    expect(a.status).toBe(200);
    expect(first.engine.chunkCache.stats.diskVariants).toBeGreaterThan(0);
    const second = await open({ kvDir: kvDir.path });
    const b = await second.api.post("/v1/chat/completions", chat(DOCS));
    // From disk, or from memory when the queued request's prefetch got there first.
    expect(b.body.usage.ctxr.tier_hits.disk + b.body.usage.ctxr.tier_hits.host).toBe(5);
    expect(b.body.usage.ctxr.prompt_tokens_computed).toBeLessThan(a.body.usage.ctxr.prompt_tokens_computed / 4);
    expect(b.body.choices[0].message.content).toBe(a.body.choices[0].message.content);
  });
});
