/**
 * Every stored variant scored (src/engine/reuseScoring.ts, backgroundWork.ts), through a real
 * server on an ephemeral port with the real CPU runner and the tiny model: a variant a prophet
 * request stored gets its shift once the engine is idle; a live request goes before a queue of
 * background jobs; --reuse-scoring-budget 0 leaves variants unscored and the fallback is counted in
 * usage.ctxr, /metrics and /v1/stats; --reuse-scoring sync measures in the request.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { sleep } from "../../src/runtime/sleep.ts";
import { tinyKvEngines } from "../helpers/tinyKvEngines.ts";
import type { Client } from "../server/serverKit.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";

setDefaultTimeout(120_000);

const engines = tinyKvEngines();
const open = engines.open;

/** The chunk variants (documents, not the head) the engine's cache holds, and how many have a shift. */
function chunkVariants(engine: GenerationEngine): { all: number; scored: number } {
  const variants = engine.chunkCache.index.all().filter((v) => v.prefix.length > 0);
  return { all: variants.length, scored: variants.filter((v) => v.meta.tokenShift !== undefined).length };
}

async function reuseScoring(api: Client): Promise<any> {
  const stats = await api.get("/v1/stats");
  expect(stats.status).toBe(200);
  return stats.body.engine.reuse_scoring;
}

function metricValue(text: string, sample: string): number {
  const line = text.split("\n").find((l) => l.startsWith(sample + " "));
  if (line === undefined) throw new Error(`no sample ${sample} in /metrics`);
  return Number(line.slice(sample.length + 1));
}

describe("every stored variant scored in the idle time", () => {
  test("a variant stored by a prophet request gets its shift once the engine is idle; a later request meets no unscored chunk", async () => {
    const { engine, api } = await open();
    const first = await api.post("/v1/chat/completions", chat(DOCS, { ctxr: { policy: "prophet" } }));
    expect(first.status).toBe(200);
    expect(first.body.usage.ctxr.chunks_unscored).toBe(0);
    const deadline = performance.now() + 20_000;
    while (chunkVariants(engine).scored < chunkVariants(engine).all && performance.now() < deadline) await sleep(20);
    const variants = chunkVariants(engine);
    expect(variants.all).toBe(DOCS.length);
    expect(variants.scored).toBe(DOCS.length);
    const scoring = await reuseScoring(api);
    expect(scoring.mode).toBe("idle");
    expect(scoring.budget).toBe(0.2);
    // The first document follows the head alone (its shift is zeros, at once): the other three were jobs.
    expect(scoring.jobs.shift_scoring).toMatchObject({ pending: 0, run: DOCS.length - 1, dropped: 0, failed: 0 });
    expect(scoring.jobs.shift_scoring.runner_seconds).toBeGreaterThan(0);
    expect(scoring.measurements.scored).toBe(DOCS.length - 1);
    const metrics = (await api.get("/metrics")).text;
    expect(metricValue(metrics, 'ctxr_background_jobs_run_total{kind="shift_scoring"}')).toBe(DOCS.length - 1);
    expect(metricValue(metrics, "ctxr_background_budget")).toBe(0.2);

    const reordered = await api.post("/v1/chat/completions", chat([DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!], { ctxr: { policy: "cachecraft" } }));
    expect(reordered.status).toBe(200);
    expect(reordered.body.usage.ctxr.prompt_tokens_chunk_reused + reordered.body.usage.ctxr.prompt_tokens_recomputed).toBeGreaterThan(0);
    expect(reordered.body.usage.ctxr.chunks_unscored).toBe(0);
    expect(metricValue((await api.get("/metrics")).text, 'ctxr_reuse_unscored_chunks_total{policy="cachecraft"}')).toBe(0);
  });

  test("a live request is served before a queue of background jobs (it waits at most one piece)", async () => {
    const { engine, api } = await open({ reuseScoringBudget: 1 });
    const PIECE_MS = 50;
    const JOBS = 40;
    let ran = 0;
    for (let i = 0; i < JOBS; i++) {
      // A stand-in for a runner piece of fixed length: what is tested is the order, not the work.
      engine.scheduler.enqueueBackground({ kind: "test_piece", run: async () => (await sleep(PIECE_MS), ran++, "done") });
    }
    await sleep(PIECE_MS / 2);
    const started = performance.now();
    const live = await api.post("/v1/chat/completions", { messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0 });
    const elapsed = performance.now() - started;
    expect(live.status).toBe(200);
    // Served long before the queue's 2 s: at most one piece ahead of it, the others behind.
    expect(ran).toBeLessThan(JOBS / 2);
    expect(elapsed).toBeLessThan((JOBS * PIECE_MS) / 2);
    const stats = (await reuseScoring(api)).jobs.test_piece;
    expect(stats.deferred).toBeGreaterThan(JOBS / 2);
    const deadline = performance.now() + 20_000;
    while (ran < JOBS && performance.now() < deadline) await sleep(20);
    expect(ran).toBe(JOBS);
    expect((await reuseScoring(api)).jobs.test_piece).toMatchObject({ pending: 0, run: JOBS });
  });

  test("a variant reused before it was scored is measured first: its job jumps a queue of older work", async () => {
    const { engine, api } = await open({ reuseScoringBudget: 1 });
    const PIECE_MS = 40;
    const OLDER = 40;
    let ran = 0;
    for (let i = 0; i < OLDER; i++) engine.scheduler.enqueueBackground({ kind: "test_piece", run: async () => (await sleep(PIECE_MS), ran++, "done") });
    // Stored by prophet: three measurements queued behind the older pieces.
    expect((await api.post("/v1/chat/completions", chat(DOCS, { ctxr: { policy: "prophet" } }))).status).toBe(200);
    const reordered = await api.post("/v1/chat/completions", chat([DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!], { ctxr: { policy: "cachecraft" } }));
    expect(reordered.status).toBe(200);
    const unscored = reordered.body.usage.ctxr.chunks_unscored;
    expect(unscored).toBeGreaterThan(0);
    const deadline = performance.now() + 20_000;
    while (chunkVariants(engine).scored < DOCS.length && performance.now() < deadline) await sleep(10);
    expect(chunkVariants(engine).scored).toBe(DOCS.length);
    // Scored after a few of the older pieces, not after all of them (FIFO would need 1.6 s of them first).
    expect(ran).toBeLessThan(OLDER / 2);
    expect((await reuseScoring(api)).reused_unscored_queued).toBe(unscored);
  });

  test("--reuse-scoring-budget 0: nothing is measured, and a reuse of the unscored variants is counted in usage.ctxr, /metrics and /v1/stats", async () => {
    const { engine, api } = await open({ reuseScoringBudget: 0 });
    expect((await api.post("/v1/chat/completions", chat(DOCS, { ctxr: { policy: "prophet" } }))).status).toBe(200);
    await sleep(300);
    expect(chunkVariants(engine)).toEqual({ all: DOCS.length, scored: 0 });
    const reordered = await api.post("/v1/chat/completions", chat([DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!], { ctxr: { policy: "cachecraft" } }));
    expect(reordered.status).toBe(200);
    const unscored = reordered.body.usage.ctxr.chunks_unscored;
    expect(unscored).toBe(DOCS.length);
    const again = await api.post("/v1/chat/completions", chat([DOCS[3]!, DOCS[1]!, DOCS[2]!, DOCS[0]!], { ctxr: { policy: "prophet" } }));
    expect(again.body.usage.ctxr.chunks_unscored).toBe(DOCS.length);
    const metrics = (await api.get("/metrics")).text;
    expect(metricValue(metrics, 'ctxr_reuse_unscored_chunks_total{policy="cachecraft"}')).toBe(unscored);
    expect(metricValue(metrics, 'ctxr_reuse_unscored_chunks_total{policy="prophet"}')).toBe(DOCS.length);
    expect(metricValue(metrics, "ctxr_background_budget")).toBe(0);
    const scoring = await reuseScoring(api);
    expect(scoring.budget).toBe(0);
    expect(scoring.jobs).toEqual({});
    expect(scoring.unscored_chunks).toEqual({ cachecraft: DOCS.length, prophet: DOCS.length });
  });

  test("--reuse-scoring sync: the storing request measures every variant's shift itself, whatever its policy", async () => {
    const { engine, api } = await open({ reuseScoring: "sync" });
    expect((await api.post("/v1/chat/completions", chat(DOCS, { ctxr: { policy: "none" } }))).status).toBe(200);
    expect(chunkVariants(engine)).toEqual({ all: DOCS.length, scored: DOCS.length });
    expect((await reuseScoring(api)).jobs).toEqual({});
  });
});
