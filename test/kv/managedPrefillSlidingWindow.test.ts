/**
 * KV-managed prefill on a model with two KV cache groups (a Gemma 3-shaped random file from
 * llama.cpp's gguf-py, window 32, chunks longer than it): the sliding group holds only a window
 * plus one FORWARD part (slidingPrefillWindow.ts; a span of 24 entries here, so a prompt runs as
 * many parts and windows are written back from cached chunks and saved entries), reused chunks
 * are placed in both groups and recomputed tokens write both. Reuse at the positions the chunks
 * were computed at (an exact prefix, relocation delta 0) and reuse in another order with every
 * reused token recomputed both give a plain full prefill's logits; reuse in another order without
 * recompute gives other, finite logits (the chunks' context changed). No FORWARD ever sees more
 * sliding blocks than ceil(window / block) + 1 + ceil(span / block).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChunkCache } from "../../src/kv/chunkCache.ts";
import { KvBlockPool, KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { managedPrefill, type ManagedPrefillOptions } from "../../src/kv/managedPrefill.ts";
import { promptTokens, segmentTokens, type SegmentedPrompt } from "../../src/kv/segmentedPrompt.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { maxAbsDiff } from "../helpers/managedPrefillKit.ts";

setDefaultTimeout(240_000);

const BLOCK = 16;
const WINDOW = 32;
const SPAN = 24;
const SHAPE = { layers: 6, hidden: 128, heads: 2, kvHeads: 1, headDim: 64, ffn: 256 };

function tokens(seed: number, n: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) >>> 0;
    return 4 + ((x >>> 16) % 200);
  });
}

const HEAD = tokens(1, 10);
const CHUNKS = [tokens(2, 40), tokens(3, 45), tokens(4, 36), tokens(5, 50)];
/** A chunk only the last test's second prompt has (computed there, between reused ones). */
const NEW_CHUNK = tokens(6, 44);
const QUESTION = tokens(9, 9);
const prompt = (order: number[]): SegmentedPrompt => segmentTokens(HEAD, order.map((i) => CHUNKS[i]!), QUESTION);

interface Setup {
  runner: RunnerProcess;
  pool: KvBlockPool;
  slidingPool: KvBlockPool;
  cache: ChunkCache;
  /** The most sliding blocks a FORWARD of a managed prefill saw. */
  mostSliding: number;
}

let dir = "";
let model = "";
const runners: RunnerProcess[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "ctxr-managed-sliding-"));
  model = writeRandomGguf("gemma3", join(dir, "gemma3.gguf"), { ...SHAPE, extraArgs: ["--sliding-window", "32"] });
});

afterAll(async () => {
  for (const runner of runners) await runner.shutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function setup(): Promise<Setup> {
  const runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: 128, blockSize: BLOCK, threads: 2, kvDtype: "f32" });
  runners.push(runner);
  expect(runner.info.kv_groups?.length).toBe(2);
  const pool = new KvBlockPool(runner, BLOCK, runner.info.free_blocks);
  const slidingPool = new KvBlockPool(runner, BLOCK, runner.info.kv_groups![1]!.num_blocks, runner.info.kv_groups![1]!.free_blocks, 1);
  const cache = new ChunkCache(runner);
  cache.attachPool(pool);
  const setup: Setup = { runner, pool, slidingPool, cache, mostSliding: 0 };
  const forward = runner.forward.bind(runner);
  runner.forward = (request) => {
    for (const sequence of request.sequences) setup.mostSliding = Math.max(setup.mostSliding, sequence.slidingTable!.filter((b) => b !== NO_BLOCK).length);
    return forward(request);
  };
  return setup;
}

/** The same model with one KV group (`--kv-groups 1`: every layer keeps every position), the reference of the parts. */
async function oneGroupSetup(): Promise<{ runner: RunnerProcess; pool: KvBlockPool; cache: ChunkCache }> {
  const runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: 128, blockSize: BLOCK, threads: 2, kvDtype: "f32", extraArgs: ["--kv-groups", "1"] });
  runners.push(runner);
  expect(runner.info.kv_groups).toBeUndefined();
  const pool = new KvBlockPool(runner, BLOCK, runner.info.free_blocks);
  const cache = new ChunkCache(runner);
  cache.attachPool(pool);
  return { runner, pool, cache };
}

async function managedOneGroup(s: { runner: RunnerProcess; pool: KvBlockPool; cache: ChunkCache }, p: SegmentedPrompt, options: ManagedPrefillOptions) {
  const table = new KvBlockTable(BLOCK);
  await s.pool.grow([{ table, entries: promptTokens(p).length }]);
  const result = await managedPrefill(s.runner, s.cache, p, table.blocks, options);
  await result.storeBack();
  await s.pool.release([table]);
  return result;
}

/** Both tables of a sequence of `entries`, and a release of them. */
async function tables(s: Setup, entries: number) {
  const table = new KvBlockTable(BLOCK);
  const sliding = new KvBlockTable(BLOCK);
  await s.pool.grow([{ table, entries }]);
  await s.slidingPool.grow([{ table: sliding, entries }]);
  return { table, sliding, release: async () => (await s.pool.release([table]), await s.slidingPool.release([sliding])) };
}

async function fullPrefillLogits(s: Setup, p: SegmentedPrompt): Promise<Float32Array> {
  const ids = promptTokens(p);
  const t = await tables(s, ids.length);
  const result = await s.runner.forward({ sequences: [{ table: t.table.blocks, slidingTable: t.sliding.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [ids.length - 1] }] });
  await t.release();
  return result.logits[0]!;
}

/** A managed prefill whose sliding table starts empty and is kept to the window by the prefill. */
async function managed(s: Setup, p: SegmentedPrompt, options: ManagedPrefillOptions, span = SPAN) {
  const table = new KvBlockTable(BLOCK);
  const sliding = new KvBlockTable(BLOCK);
  await s.pool.grow([{ table, entries: promptTokens(p).length }]);
  const blocks = {
    alloc: async (count: number) => {
      const spare = new KvBlockTable(BLOCK);
      await s.slidingPool.grow([{ table: spare, entries: count * BLOCK }]);
      return spare.blocks;
    },
    free: async (ids: readonly number[]) => {
      const spare = new KvBlockTable(BLOCK);
      spare.blocks.push(...ids);
      await s.slidingPool.release([spare]);
    },
  };
  s.mostSliding = 0;
  const result = await managedPrefill(s.runner, s.cache, p, table.blocks, { ...options, sliding: { table: sliding.blocks, blocks, window: WINDOW, span } });
  await result.storeBack();
  expect(s.mostSliding).toBeGreaterThan(0);
  expect(s.mostSliding).toBeLessThanOrEqual(Math.ceil(WINDOW / BLOCK) + 1 + Math.ceil(span / BLOCK));
  await s.pool.release([table]);
  await s.slidingPool.release([sliding]);
  expect(s.slidingPool.used).toBe(0);
  return result;
}

describe("managedPrefill with two KV groups (sliding-window layers)", () => {
  test("reused at the positions they were computed at (delta 0), the chunks give a full prefill's logits", async () => {
    const s = await setup();
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s, p);
    expect(s.mostSliding).toBe(Math.ceil(promptTokens(p).length / BLOCK)); // the reference holds everything
    const first = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(first.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    const firstError = maxAbsDiff(first.logits, reference);
    expect(firstError).toBeLessThanOrEqual(1e-4);
    // Stored in the host tier (the device tier is off with two groups), every layer of every token.
    expect(s.cache.stats.hostVariants).toBe(4);
    expect(s.cache.stats.deviceVariants).toBe(0);
    const second = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(second.usage.prompt_tokens_prefix_reused).toBe(promptTokens(p).length - QUESTION.length);
    expect(second.usage.prompt_tokens_computed).toBe(QUESTION.length);
    expect(second.usage.tier_hits.host).toBe(4);
    const secondError = maxAbsDiff(second.logits, reference);
    console.log(`delta 0: computed ${firstError.toExponential(2)}, reused ${secondError.toExponential(2)} max |logit difference| from a full prefill`);
    expect(secondError).toBeLessThanOrEqual(1e-4);
  });

  for (const policy of ["prophet", "cachecraft"] as const) {
    test(`${policy}: chunks reused in another order with every reused token recomputed (both groups written) give a full prefill's logits`, async () => {
      const s = await setup();
      await managed(s, prompt([0, 1, 2, 3]), { policy, recomputeRatio: 0.2 });
      const p = prompt([2, 0, 3, 1]);
      const reference = await fullPrefillLogits(s, p);
      const result = await managed(s, p, { policy, recomputeRatio: 1 });
      expect(result.usage.prompt_tokens_recomputed).toBe(CHUNKS.reduce((n, c) => n + c.length, 0));
      expect(result.usage.prompt_tokens_computed).toBe(QUESTION.length);
      const error = maxAbsDiff(result.logits, reference);
      console.log(`${policy} at ratio 1.0, another order: max |logit difference| from a full prefill ${error.toExponential(2)}`);
      expect(error).toBeLessThanOrEqual(1e-4);
    });
  }

  test("reused in another order without recompute: other logits than a full prefill (the chunks' context changed), all finite", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([3, 2, 1, 0]);
    const reference = await fullPrefillLogits(s, p);
    const result = await managed(s, p, { policy: "none", recomputeRatio: 0 });
    expect(result.usage.prompt_tokens_chunk_reused).toBe(CHUNKS.reduce((n, c) => n + c.length, 0));
    expect(result.logits.every(Number.isFinite)).toBe(true);
    const error = maxAbsDiff(result.logits, reference);
    console.log(`policy none, reversed order: max |logit difference| from a full prefill ${error.toExponential(2)}`);
    expect(error).toBeGreaterThan(1e-4);
  });

  test("run in parts of 24 entries through a window, a prefill gives what the keep-everything cache gives: stored metadata, prophet's and cachecraft's recompute sets and logits", async () => {
    const parts = await setup();
    const whole = await oneGroupSetup();
    const first = prompt([0, 1, 2, 3]);
    // Prophet on the paper's attention scores throughout: the measured shift that its default fuses
    // in is not taken on two-group models (attention stands in there), while the one-group cache
    // takes it (and cachecraft would then rank the two caches' chunks differently).
    await managed(parts, first, { policy: "prophet", recomputeRatio: 0.3, prophetScores: "attention" });
    await managedOneGroup(whole, first, { policy: "prophet", recomputeRatio: 0.3, prophetScores: "attention" });
    const metadata = (s: { cache: ChunkCache }) =>
      CHUNKS.map((_, i) => {
        const variant = s.cache.index.variantsOf(first.segments[i + 1]!.hash)[0]!;
        return { cci: variant.meta.cci, tokenInter: Array.from(variant.meta.tokenInter) };
      });
    const [a, b] = [metadata(parts), metadata(whole)];
    a.forEach((m, i) => {
      expect(Math.abs(m.cci - b[i]!.cci)).toBeLessThan(1e-5);
      m.tokenInter.forEach((x, t) => expect(Math.abs(x - b[i]!.tokenInter[t]!)).toBeLessThan(1e-5));
    });
    // A new chunk before the reused ones: ProphetKV computes it first (then stores it), and at ratio 1 recomputes
    // from the token right after it, whose window reads it again (written back from what was saved).
    const p = segmentTokens(HEAD, [NEW_CHUNK, CHUNKS[3]!, CHUNKS[1]!, CHUNKS[0]!, CHUNKS[2]!], QUESTION);
    for (const [policy, ratio] of [["prophet", 1], ["prophet", 0.3], ["cachecraft", 0.3]] as const) {
      const inParts = await managed(parts, p, { policy, recomputeRatio: ratio, prophetScores: "attention" });
      const inOne = await managedOneGroup(whole, p, { policy, recomputeRatio: ratio, prophetScores: "attention" });
      expect(inParts.recomputed.length).toBeGreaterThan(0);
      expect(inParts.usage.prompt_tokens_computed).toBe((ratio === 1 ? NEW_CHUNK.length : 0) + QUESTION.length);
      expect(Array.from(inParts.recomputed)).toEqual(Array.from(inOne.recomputed));
      const error = maxAbsDiff(inParts.logits, inOne.logits);
      console.log(`${policy} at ratio ${ratio}: window and parts of 24 vs the keep-everything cache, max |logit difference| ${error.toExponential(2)}`);
      expect(error).toBeLessThanOrEqual(1e-4);
    }
  });
});
