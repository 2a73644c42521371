/**
 * Measuring a stored chunk variant's context shift after the fact (off the request path): the
 * variant's own KV, as the cache holds it, against the same tokens computed right after the head
 * alone in a scratch table (contextShift.ts says why the shift matters). The scheduler runs it as
 * a background job (engine/backgroundWork.ts) when no live request needs the runner.
 */
import type { ChunkCache } from "./chunkCache.ts";
import { kvDeviation, type ContextShiftRunner } from "./contextShift.ts";

/** What a stored variant's scoring needs: its id, the head it was computed after, and its tokens. */
export interface ShiftScoringRequest {
  variantId: string;
  head: readonly number[];
  tokens: readonly number[];
}

/**
 * scored: the shift is in the variant's metadata (or was already); gone: the variant was evicted;
 * not-resident: it is on disk only (reading it back just to score it is not worth it); no-room:
 * no scratch blocks for it now (or a model with two KV groups).
 */
export type ShiftScoringOutcome = "scored" | "gone" | "not-resident" | "no-room";

/** What the measurement needs of the runner (RunnerProcess has it). */
export type ShiftScoringRunner = Pick<ContextShiftRunner, "info" | "forward" | "export">;

export async function scoreVariantShift(
  runner: ShiftScoringRunner,
  cache: ChunkCache,
  request: ShiftScoringRequest,
  /** Frees this many blocks of the pool if it can (evicting what nobody uses), before the scratch table is taken. */
  makeRoom: (blocks: number) => Promise<void> = async () => {},
  blockSize: number = runner.info.block_size,
): Promise<ShiftScoringOutcome> {
  const variant = cache.index.get(request.variantId);
  if (variant === undefined) return "gone";
  if (variant.meta.tokenShift !== undefined) return "scored";
  if (variant.tokenCount !== request.tokens.length) throw new RangeError(`scoreVariantShift: ${request.tokens.length} tokens for a variant of ${variant.tokenCount}`);
  const stored = await cache.residentKv(request.variantId);
  if (stored === null) return cache.index.has(request.variantId) ? "not-resident" : "gone";
  const headLength = request.head.length;
  const entries = headLength + request.tokens.length;
  await makeRoom(Math.ceil(entries / blockSize));
  const isolated = await cache.withScratch(entries, async (scratch) => {
    const ids = [...request.head, ...request.tokens];
    await runner.forward({ sequences: [{ table: scratch, tokens: ids, indices: Uint32Array.from(ids, (_, i) => i), logitRows: [] }] });
    return runner.export({ table: scratch, start: headLength, count: request.tokens.length });
  });
  if (isolated === null) return "no-room";
  const shift = Float32Array.from(kvDeviation(stored, isolated, runner.info.kv_heads * runner.info.head_dim));
  return cache.setTokenShift(request.variantId, shift) ? "scored" : "gone";
}
