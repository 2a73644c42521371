/**
 * What the managed-prefill tests share (test/kv/managedPrefill*.test.ts): a runner with a block
 * pool and a chunk cache, a segmented prompt of fixed chunks in any order, a plain full prefill's
 * logits to compare with, and one managed prefill with its store-back.
 */
import { expect } from "bun:test";
import { ChunkCache } from "../../src/kv/chunkCache.ts";
import { KvBlockPool, KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { managedPrefill, type ManagedPrefillOptions } from "../../src/kv/managedPrefill.ts";
import { promptTokens, segmentTokens, type SegmentedPrompt } from "../../src/kv/segmentedPrompt.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";

export interface ManagedSetup {
  runner: RunnerProcess;
  pool: KvBlockPool;
  cache: ChunkCache;
}

/** A runner on `model` (a folder or a .gguf) with 256 blocks of 16, its pool and a chunk cache; pushed to `runners` to shut down. */
export async function startManaged(executable: string, model: string, runners: RunnerProcess[], cacheOptions: ConstructorParameters<typeof ChunkCache>[1] = {}): Promise<ManagedSetup> {
  const runner = await RunnerProcess.start({ executable, model, blocks: 256, blockSize: 16, threads: 2 });
  runners.push(runner);
  const pool = new KvBlockPool(runner, 16, runner.info.free_blocks);
  const cache = new ChunkCache(runner, cacheOptions);
  cache.attachPool(pool);
  return { runner, pool, cache };
}

/** Deterministic pseudo-random byte tokens (the tiny model's vocabulary starts with the 256 bytes). */
export function byteTokens(seed: number, n: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) >>> 0;
    return 32 + ((x >>> 16) % 90);
  });
}

export const HEAD = byteTokens(1, 12);
export const CHUNKS = [byteTokens(2, 40), byteTokens(3, 33), byteTokens(4, 48), byteTokens(5, 21), byteTokens(6, 37)];
export const QUESTION = byteTokens(9, 9);
/** The head, CHUNKS in `order`, the question. */
export const chunkedPrompt = (order: number[]): SegmentedPrompt => segmentTokens(HEAD, order.map((i) => CHUNKS[i]!), QUESTION);

/** The last position's logits of a plain full prefill of `p` (its blocks released after). */
export async function fullPrefillLogits(runner: RunnerProcess, pool: KvBlockPool, p: SegmentedPrompt): Promise<Float32Array> {
  const ids = promptTokens(p);
  const table = new KvBlockTable(16);
  await pool.grow([{ table, entries: ids.length }]);
  const result = await runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [ids.length - 1] }] });
  await pool.release([table]);
  return result.logits[0]!;
}

/** One managed prefill of `p`, stored back, its blocks released. */
export async function runManaged(s: ManagedSetup, p: SegmentedPrompt, options: ManagedPrefillOptions) {
  const table = new KvBlockTable(16);
  await s.pool.grow([{ table, entries: promptTokens(p).length }]);
  const result = await managedPrefill(s.runner, s.cache, p, table.blocks, options);
  await result.storeBack();
  await s.pool.release([table]);
  return result;
}

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}
