/**
 * Measuring a stored variant's shift after the fact (src/kv/variantShiftScoring.ts), on the real
 * CPU runner: a variant a prophet request stored (its shift deferred) gets the same shift the
 * synchronous measurement gives, from the device tier or the host tier; an evicted one is "gone",
 * one on disk only is "not-resident", and the scratch blocks go back.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { KvBlockPool, KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { ChunkCache } from "../../src/kv/chunkCache.ts";
import { DiskKvTier } from "../../src/kv/diskKvTier.ts";
import { managedPrefill, type ManagedPrefillOptions } from "../../src/kv/managedPrefill.ts";
import { promptTokens, segmentTokens, type SegmentedPrompt } from "../../src/kv/segmentedPrompt.ts";
import { scoreVariantShift, type ShiftScoringRequest } from "../../src/kv/variantShiftScoring.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(60_000);

const HEAD = [256, 72, 101, 97, 100];
const A = Array.from("alpha=123;beta=456;", (c) => c.charCodeAt(0));
const B = Array.from("gamma=789;delta=012;", (c) => c.charCodeAt(0));

let runner: RunnerProcess;
let pool: KvBlockPool;
let model: { path: string; cleanup(): void };
const disk = tempFolder("ctxr-shift-scoring-");

beforeAll(async () => {
  model = tinyModelFolder({ layers: 3, seed: 5 });
  runner = await RunnerProcess.start({ executable: buildRunner(), model: model.path, blocks: 64, blockSize: 16, threads: 2 });
  pool = new KvBlockPool(runner, 16, runner.info.free_blocks);
});

afterAll(async () => {
  await runner?.shutdown();
  model?.cleanup();
  disk.cleanup();
});

/** Runs a prompt through managedPrefill and its store-back; returns the deferred scoring requests (defer false: measured synchronously). */
async function prefill(cache: ChunkCache, prompt: SegmentedPrompt, options: ManagedPrefillOptions, defer = true): Promise<ShiftScoringRequest[]> {
  const deferred: ShiftScoringRequest[] = [];
  const table = new KvBlockTable(16);
  await pool.grow([{ table, entries: promptTokens(prompt).length }]);
  const result = await managedPrefill(runner, cache, prompt, table.blocks, { ...options, ...(defer ? { deferShift: (r: ShiftScoringRequest) => deferred.push(r) } : {}) });
  await result.storeBack();
  await pool.release([table]);
  return deferred;
}

function newCache(options: ConstructorParameters<typeof ChunkCache>[1] = { hostBytes: 0 }): ChunkCache {
  const cache = new ChunkCache(runner, options);
  cache.attachPool(pool);
  return cache;
}

describe("scoreVariantShift", () => {
  test("a prophet-stored variant gets, off the request path, the shift the synchronous measurement gives", async () => {
    const prompt = segmentTokens(HEAD, [A, B], [63]);
    const reference = newCache();
    await prefill(reference, prompt, { policy: "cachecraft", recomputeRatio: 0.2, measureShift: true }, false);
    const expected = reference.index.variantsOf(prompt.segments[2]!.hash)[0]!.meta.tokenShift!;
    expect(Math.max(...expected)).toBeGreaterThan(1e-4);
    await reference.reclaim(Number.MAX_SAFE_INTEGER);

    const cache = newCache();
    const deferred = await prefill(cache, prompt, { policy: "prophet", recomputeRatio: 0.2, measureShift: true });
    // The chunk right after the head has its zeros at once; only B waits.
    expect(Array.from(cache.index.variantsOf(prompt.segments[1]!.hash)[0]!.meta.tokenShift!)).toEqual(A.map(() => 0));
    expect(deferred.map((r) => r.tokens)).toEqual([B]);
    expect(deferred[0]!.head).toEqual(HEAD);
    const variant = cache.index.get(deferred[0]!.variantId)!;
    expect(variant.meta.tokenShift).toBeUndefined();
    expect(cache.tierOf(variant.id)).toBe("device");
    const free = pool.free;
    expect(await scoreVariantShift(runner, cache, deferred[0]!)).toBe("scored");
    expect(pool.free).toBe(free);
    const measured = variant.meta.tokenShift!;
    expect(measured.length).toBe(B.length);
    for (let t = 0; t < B.length; t++) expect(Math.abs(measured[t]! - expected[t]!)).toBeLessThan(1e-5 + 1e-3 * expected[t]!);
    await cache.reclaim(Number.MAX_SAFE_INTEGER);
  });

  test("from the host tier too; an evicted variant is gone", async () => {
    const prompt = segmentTokens(HEAD, [B, A], [63]);
    const cache = newCache({ hostBytes: 2 ** 24 });
    const [request] = await prefill(cache, prompt, { policy: "none", recomputeRatio: 0, measureShift: true });
    await cache.reclaim(Number.MAX_SAFE_INTEGER);
    expect(cache.tierOf(request!.variantId)).toBe("host");
    expect(await scoreVariantShift(runner, cache, request!)).toBe("scored");
    expect(Math.max(...cache.index.get(request!.variantId)!.meta.tokenShift!)).toBeGreaterThan(1e-4);
    expect(await scoreVariantShift(runner, cache, { ...request!, variantId: "no-such-variant" })).toBe("gone");
  });

  test("a variant on disk only is not read back to be scored", async () => {
    const prompt = segmentTokens(HEAD, [A, B], [63]);
    const tier = new DiskKvTier({ dir: disk.path, capacityBytes: 2 ** 26, modelIdentity: "test", layers: runner.info.layers, kvWidth: runner.info.kv_heads * runner.info.head_dim, pageSize: 16 });
    const cache = newCache({ hostBytes: 0, disk: tier });
    const [request] = await prefill(cache, prompt, { policy: "prophet", recomputeRatio: 0.2, measureShift: true });
    await cache.reclaim(Number.MAX_SAFE_INTEGER);
    expect(cache.tierOf(request!.variantId)).toBe("disk");
    expect(await scoreVariantShift(runner, cache, request!)).toBe("not-resident");
    expect(cache.index.get(request!.variantId)!.meta.tokenShift).toBeUndefined();
  });
});
