/**
 * Kendall-tau distance (Cache-Craft's order penalty), plain TypeScript reference: discordant
 * pairs / (m(m-1)/2), 0 when m < 2, by merge-sort inversion counting in O(m log m).
 */

/** Count of pairs p < q with v[p] > v[q]; sorts v. */
export function countInversions(v: Int32Array): number {
  const m = v.length;
  let src: Int32Array = v;
  let dst: Int32Array = new Int32Array(m);
  let inversions = 0;
  for (let width = 1; width < m; width *= 2) {
    for (let lo = 0; lo < m; lo += 2 * width) {
      const mid = Math.min(lo + width, m);
      const hi = Math.min(lo + 2 * width, m);
      let p = lo;
      let q = mid;
      let o = lo;
      while (p < mid && q < hi) {
        if (src[q]! < src[p]!) {
          dst[o++] = src[q++]!;
          inversions += mid - p;
        } else {
          dst[o++] = src[p++]!;
        }
      }
      while (p < mid) dst[o++] = src[p++]!;
      while (q < hi) dst[o++] = src[q++]!;
    }
    [src, dst] = [dst, src];
  }
  return inversions;
}

/**
 * Kendall-tau distance of every segment; returns the index of the first segment whose a and b
 * are not orders of the same distinct items instead, as { bad }.
 */
export function kendallTauTs(a: Int32Array, b: Int32Array, offsets: Int32Array): Float64Array | { bad: number } {
  const segments = offsets.length - 1;
  const out = new Float64Array(segments);
  for (let s = 0; s < segments; s++) {
    const start = offsets[s]!;
    const m = offsets[s + 1]! - start;
    const sa = a.subarray(start, start + m);
    const sb = b.subarray(start, start + m);
    // Positions sorted by item, for both orders; matching them maps b's positions to a's.
    const byItemA = Array.from({ length: m }, (_, p) => p).sort((p, q) => sa[p]! - sa[q]!);
    const byItemB = Array.from({ length: m }, (_, p) => p).sort((p, q) => sb[p]! - sb[q]!);
    const rankInA = new Int32Array(m);
    for (let t = 0; t < m; t++) {
      const item = sa[byItemA[t]!]!;
      if (item !== sb[byItemB[t]!]! || (t > 0 && sa[byItemA[t - 1]!] === item)) return { bad: s };
      rankInA[byItemB[t]!] = byItemA[t]!;
    }
    out[s] = m < 2 ? 0 : countInversions(rankInA) / ((m * (m - 1)) / 2);
  }
  return out;
}
