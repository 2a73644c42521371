/**
 * Context shift (src/kv/contextShift.ts): the deviation measure and the shift-based
 * contextualisation on hand-made values; on the real CPU runner, a chunk right after the head
 * shifts by nothing, one after another chunk by something, the measurement leaves the request's
 * KV alone, and managedPrefill stores the shift with every new variant.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { KvBlockPool, KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange, type KvData } from "../../src/runner/runnerProtocol.ts";
import { ChunkCache } from "../../src/kv/chunkCache.ts";
import { kvDeviation, measureContextShift, shiftContextualization } from "../../src/kv/contextShift.ts";
import { managedPrefill } from "../../src/kv/managedPrefill.ts";
import { promptTokens, segmentTokens } from "../../src/kv/segmentedPrompt.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(60_000);

function kv(values: number[][], width: number): KvData {
  // One layer; token t's K and V both = values[t] (width entries).
  const flat = Float32Array.from(values.flat());
  expect(flat.length).toBe(values.length * width);
  return { positions: Int32Array.from(values.map((_, t) => t)), layers: [{ k: flat, v: flat.slice() }] };
}

describe("kvDeviation and shiftContextualization", () => {
  test("relative squared distance per token; identical tokens deviate 0", () => {
    const full = kv([[1, 0], [0, 2], [3, 4]], 2);
    const stale = kv([[1, 0], [0, 1], [0, 0]], 2);
    expect(Array.from(kvDeviation(full, stale, 2))).toEqual([0, 0.25, 1]);
    expect(() => kvDeviation(full, kv([[1, 0]], 2), 2)).toThrow(RangeError);
  });

  test("mean of d/(1+d): 0 for no tokens or no shift, approaching 1 for large shifts", () => {
    expect(shiftContextualization(new Float32Array(0))).toBe(0);
    expect(shiftContextualization(Float32Array.from([0, 0]))).toBe(0);
    expect(shiftContextualization(Float32Array.from([1, 0]))).toBeCloseTo(0.25, 7);
    expect(shiftContextualization(Float32Array.from([3]))).toBeCloseTo(0.75, 7);
  });
});

describe("on the real runner", () => {
  let runner: RunnerProcess;
  let pool: KvBlockPool;
  let model: { path: string; cleanup(): void };
  const HEAD = [256, 72, 101, 97, 100];
  const A = Array.from("alpha=123;beta=456;", (c) => c.charCodeAt(0));
  const B = Array.from("gamma=789;delta=012;", (c) => c.charCodeAt(0));

  beforeAll(async () => {
    model = tinyModelFolder({ layers: 3, seed: 5 });
    runner = await RunnerProcess.start({ executable: buildRunner(), model: model.path, blocks: 64, blockSize: 16, threads: 2 });
    pool = new KvBlockPool(runner, 16, runner.info.free_blocks);
  });

  afterAll(async () => {
    await runner?.shutdown();
    model?.cleanup();
  });

  test("a chunk right after the head shifts by ~0, after another chunk by more; the request's KV is untouched", async () => {
    const ids = [...HEAD, ...A, ...B];
    const table = new KvBlockTable(16);
    const scratch = new KvBlockTable(16);
    await pool.grow([{ table, entries: ids.length }, { table: scratch, entries: HEAD.length + Math.max(A.length, B.length) }]);
    await runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [] }] });
    const before = await runner.export({ table: table.blocks, start: 0, count: ids.length });
    const shiftA = await measureContextShift(runner, table.blocks, HEAD.length, HEAD.length, A, scratch.blocks);
    const shiftB = await measureContextShift(runner, table.blocks, HEAD.length, HEAD.length + A.length, B, scratch.blocks);
    expect(shiftA.length).toBe(A.length);
    expect(Math.max(...shiftA)).toBeLessThan(1e-8);
    expect(shiftB.length).toBe(B.length);
    expect(Math.max(...shiftB)).toBeGreaterThan(1e-4);
    const after = await runner.export({ table: table.blocks, start: 0, count: ids.length });
    expect(Math.max(...kvDeviation(before, after, runner.info.kv_heads * runner.info.head_dim))).toBe(0);
    await pool.release([table, scratch]);
  });

  test("managedPrefill stores each new variant with its shift (zeros right after the head) and frees its scratch blocks", async () => {
    const cache = new ChunkCache(runner, { hostBytes: 0 });
    cache.attachPool(pool);
    const prompt = segmentTokens(HEAD, [A, B], [63]);
    const table = new KvBlockTable(16);
    await pool.grow([{ table, entries: promptTokens(prompt).length }]);
    const free = pool.free;
    const tableBlocks = table.blocks.length;
    const result = await managedPrefill(runner, cache, prompt, table.blocks, { policy: "cachecraft", recomputeRatio: 0.2 });
    await result.storeBack();
    await pool.release([table]);
    const [a] = cache.index.variantsOf(prompt.segments[1]!.hash);
    const [b] = cache.index.variantsOf(prompt.segments[2]!.hash);
    expect(Array.from(a!.meta.tokenShift!)).toEqual(A.map(() => 0));
    expect(b!.meta.tokenShift!.length).toBe(B.length);
    expect(Math.max(...b!.meta.tokenShift!)).toBeGreaterThan(1e-4);
    // Only the stored variants' device copies stay allocated.
    expect(cache.stats.deviceBlocks).toBeGreaterThan(0);
    expect(free + tableBlocks - pool.free).toBe(cache.stats.deviceBlocks);
    await cache.reclaim(Number.MAX_SAFE_INTEGER);
  });

  test("prophet on the paper's attention scores, and measureShift false, store no shift (cachecraft then falls back to the attention scores)", async () => {
    const prompt = segmentTokens(HEAD, [B, A], [63]);
    for (const options of [
      { policy: "prophet" as const, recomputeRatio: 0.2, prophetScores: "attention" as const },
      { policy: "none" as const, recomputeRatio: 0.2 },
      { policy: "cachecraft" as const, recomputeRatio: 0.2, measureShift: false },
    ]) {
      const cache = new ChunkCache(runner, { hostBytes: 0 });
      cache.attachPool(pool);
      const table = new KvBlockTable(16);
      await pool.grow([{ table, entries: promptTokens(prompt).length }]);
      const result = await managedPrefill(runner, cache, prompt, table.blocks, options);
      await result.storeBack();
      await pool.release([table]);
      for (const segment of prompt.segments.slice(1)) {
        const [variant] = cache.index.variantsOf(segment.hash);
        expect(variant).toBeDefined();
        expect(variant!.meta.tokenShift).toBeUndefined();
      }
      await cache.reclaim(Number.MAX_SAFE_INTEGER);
    }
  });
});
