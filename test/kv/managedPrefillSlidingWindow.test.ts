/**
 * KV-managed prefill on a model with two KV cache groups (a Gemma 3-shaped random file from
 * llama.cpp's gguf-py, window 32, chunks longer than it): the sequence passes its sliding table,
 * reused chunks are placed in both groups and recomputed tokens write both. Reuse at the positions
 * the chunks were computed at (an exact prefix hit, relocation delta 0) and reuse in another order
 * with every reused token recomputed both give a plain full prefill's logits; reuse in another
 * order without recompute gives other, finite logits (the chunks' context changed).
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
import { buildRunner } from "../helpers/engineKit.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { maxAbsDiff } from "../helpers/managedPrefillKit.ts";

setDefaultTimeout(240_000);

const BLOCK = 16;
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
const QUESTION = tokens(9, 9);
const prompt = (order: number[]): SegmentedPrompt => segmentTokens(HEAD, order.map((i) => CHUNKS[i]!), QUESTION);

interface Setup {
  runner: RunnerProcess;
  pool: KvBlockPool;
  slidingPool: KvBlockPool;
  cache: ChunkCache;
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
  return { runner, pool, slidingPool, cache };
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

async function managed(s: Setup, p: SegmentedPrompt, options: ManagedPrefillOptions) {
  const t = await tables(s, promptTokens(p).length);
  const result = await managedPrefill(s.runner, s.cache, p, t.table.blocks, { ...options, slidingTable: t.sliding.blocks });
  await result.storeBack();
  await t.release();
  return result;
}

describe("managedPrefill with two KV groups (sliding-window layers)", () => {
  test("reused at the positions they were computed at (delta 0), the chunks give a full prefill's logits", async () => {
    const s = await setup();
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s, p);
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
});
