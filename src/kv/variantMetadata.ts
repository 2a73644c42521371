/**
 * A newly computed chunk's variant metadata (CCI, inter-attention per prefix
 * chunk, per-token inter scores) from the attention statistics of the FORWARD
 * that computed it (chunk-mass mode: per query row, its mass on every chunk).
 */
import type { ForwardResult } from "../runner/runnerProtocol.ts";
import { buildVariantMetadata } from "./reuseScores.ts";

export interface ComputedVariantMeta {
  cci: number;
  interByPrefix: Record<string, number>;
  tokenInter: number[];
}

/**
 * @param stats       the FORWARD's result (stats of its single sequence)
 * @param statIndices the sequence index of each query row, in row order
 * @param segment     which segment (chunk index in `bounds`)
 * @param bounds      chunk bounds of the prompt (segments, then the question)
 * @param hashes      the segments' chunk hashes
 */
export function variantMetadataFromStats(
  stats: ForwardResult,
  statIndices: readonly number[],
  segment: number,
  bounds: ArrayLike<number>,
  hashes: readonly string[],
): ComputedVariantMeta {
  const layers = stats.stats?.[0];
  if (layers === undefined || layers.length === 0) throw new Error("variantMetadataFromStats: the FORWARD returned no statistics");
  const nChunks = layers[0]!.nChunks;
  const start = bounds[segment]!;
  const end = bounds[segment + 1]!;
  const rows: number[] = [];
  statIndices.forEach((index, row) => {
    if (index >= start && index < end) rows.push(row);
  });
  if (rows.length !== end - start) throw new Error(`variantMetadataFromStats: segment ${segment} has ${end - start} tokens but ${rows.length} statistics rows`);
  const perLayer = layers.map((layer) => {
    const out = new Float32Array(rows.length * nChunks);
    rows.forEach((row, t) => out.set(layer.mass.subarray(row * nChunks, (row + 1) * nChunks), t * nChunks));
    return out;
  });
  const prefix = hashes.slice(0, segment);
  const prefixSizes = prefix.map((_, j) => bounds[j + 1]! - bounds[j]!);
  const meta = buildVariantMetadata(perLayer, nChunks, prefix, prefixSizes);
  return { cci: meta.cci, interByPrefix: meta.interByPrefix, tokenInter: Array.from(meta.tokenInter) };
}
