/**
 * Pairwise context distance (ContextPilot eq. 1), plain TypeScript reference.
 * The WASM twin (wasm/src/distance.rs) uses an inverted index instead of this per-pair scan;
 * both give bit-identical values because |S| and the position sum are exact integers and the
 * final formula runs in the same operation order.
 */
import type { EncodedContexts } from "./kernelTypes.ts";

/** d for shared-block count `shared`, position-difference sum `posSum` and both lengths. */
export function contextDistance(shared: number, posSum: number, lengthI: number, lengthJ: number, alpha: number): number {
  if (shared === 0) return 1;
  const longest = lengthI < lengthJ ? lengthJ : lengthI;
  return 1 - shared / longest + alpha * (posSum / shared);
}

/** Rows rowStart..rowEnd-1 of the condensed matrix, written consecutively from out[outOffset]. */
export function contextDistanceRowsTs(
  contexts: EncodedContexts,
  alpha: number,
  rowStart: number,
  rowEnd: number,
  out: Float64Array,
  outOffset: number,
): void {
  const { flat, offsets, blockCount } = contexts;
  const n = offsets.length - 1;
  const posPlusOne = new Int32Array(blockCount);
  let o = outOffset;
  for (let i = rowStart; i < rowEnd; i++) {
    const startI = offsets[i]!;
    const endI = offsets[i + 1]!;
    for (let k = startI; k < endI; k++) posPlusOne[flat[k]!] = k - startI + 1;
    for (let j = i + 1; j < n; j++) {
      const startJ = offsets[j]!;
      const endJ = offsets[j + 1]!;
      let shared = 0;
      let posSum = 0;
      for (let q = startJ; q < endJ; q++) {
        const pp = posPlusOne[flat[q]!]!;
        if (pp !== 0) {
          shared++;
          posSum += Math.abs(pp - 1 - (q - startJ));
        }
      }
      out[o++] = contextDistance(shared, posSum, endI - startI, endJ - startJ, alpha);
    }
    for (let k = startI; k < endI; k++) posPlusOne[flat[k]!] = 0;
  }
}

/** Distances of pairs (i0, j0, i1, j1, ...). */
export function contextDistancePairsTs(contexts: EncodedContexts, pairs: Uint32Array, alpha: number): Float64Array {
  const { flat, offsets, blockCount } = contexts;
  const posPlusOne = new Int32Array(blockCount);
  const out = new Float64Array(pairs.length / 2);
  for (let t = 0; t < out.length; t++) {
    const i = pairs[2 * t]!;
    const j = pairs[2 * t + 1]!;
    const startI = offsets[i]!;
    const endI = offsets[i + 1]!;
    const startJ = offsets[j]!;
    const endJ = offsets[j + 1]!;
    for (let k = startI; k < endI; k++) posPlusOne[flat[k]!] = k - startI + 1;
    let shared = 0;
    let posSum = 0;
    for (let q = startJ; q < endJ; q++) {
      const pp = posPlusOne[flat[q]!]!;
      if (pp !== 0) {
        shared++;
        posSum += Math.abs(pp - 1 - (q - startJ));
      }
    }
    for (let k = startI; k < endI; k++) posPlusOne[flat[k]!] = 0;
    out[t] = contextDistance(shared, posSum, endI - startI, endJ - startJ, alpha);
  }
  return out;
}
