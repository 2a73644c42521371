/**
 * One FORWARD's result from the results of its parts, when one sequence's new tokens were run as
 * several FORWARDs in index order (slidingPrefillWindow.ts): logits rows in order; statistics rows
 * concatenated in query order, each part's rows as wide as its own `len` (or chunk count), which
 * is as far as its tokens see (causal attention: what lies beyond has mass 0), padded with zeros
 * to the widest; chunk × chunk sums added. Early-stop results do not merge (the stop is decided
 * across all tokens at once).
 */
import type { AttentionStats, ForwardResult } from "../runner/runnerProtocol.ts";

export function mergeForwardParts(parts: readonly ForwardResult[]): ForwardResult {
  if (parts.length === 1) return parts[0]!;
  if (parts.length === 0) throw new RangeError("mergeForwardParts: no parts");
  if (parts.some((part) => part.earlyStop !== undefined)) throw new RangeError("mergeForwardParts: early-stop results cannot be merged");
  const logits = concat(parts.map((part) => part.logits[0]!));
  const withStats = parts.filter((part) => part.stats !== undefined);
  if (withStats.length === 0) return { logits: [logits] };
  if (withStats.length !== parts.length) throw new RangeError("mergeForwardParts: some parts have statistics and some do not");
  const layers = parts[0]!.stats![0]!.length;
  const stats: AttentionStats[] = [];
  for (let layer = 0; layer < layers; layer++) stats.push(mergeLayer(parts.map((part) => part.stats![0]![layer]!)));
  return { logits: [logits], stats: [stats] };
}

function mergeLayer(parts: readonly AttentionStats[]): AttentionStats {
  const perChunk = parts[0]!.perChunk;
  const len = Math.max(...parts.map((p) => p.len));
  const nChunks = Math.max(...parts.map((p) => p.nChunks));
  const width = perChunk ? nChunks : len;
  const queries = parts.reduce((sum, p) => sum + p.queries, 0);
  const mass = new Float32Array(queries * width);
  const chunks = new Float32Array(nChunks * nChunks);
  let row = 0;
  for (const part of parts) {
    const partWidth = perChunk ? part.nChunks : part.len;
    for (let q = 0; q < part.queries; q++, row++) mass.set(part.mass.subarray(q * partWidth, (q + 1) * partWidth), row * width);
    for (let a = 0; a < part.nChunks; a++) for (let b = 0; b < part.nChunks; b++) chunks[a * nChunks + b]! += part.chunks[a * part.nChunks + b]!;
  }
  return { mass, queries, len, perChunk, chunks, nChunks };
}

function concat(arrays: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(arrays.reduce((sum, a) => sum + a.length, 0));
  let at = 0;
  for (const a of arrays) {
    out.set(a, at);
    at += a.length;
  }
  return out;
}
