/**
 * The affine fit of one 32-value sub-block that ggml's reference K-quantizers (Q4_K, Q5_K:
 * quantize_row_q{4,5}_K_ref and make_qkx2_quants in ggml-quants.c) use: x ≈ scale·q − min
 * with q in 0..levels, min ≥ 0, each value weighted by (rms of the sub-block + |x|).
 *
 * Search: levels over the range [min(x, 0), max x] as a first guess, then for each of
 * nstep + 1 trial inverse steps (levels + rmin + rdelta·k) / (max x − offset) the values
 * are rounded from the best offset so far, scale and offset refitted by weighted least
 * squares (offset clamped to ≤ 0), and the fit of least weighted squared error kept.
 *
 * The arithmetic is float32, step by step as the C code does it (Math.fround), and rounding
 * is to nearest, ties to even, as ggml's nearest_int, so that our bytes match ggml's.
 */

const f = Math.fround;

/** Round to nearest, ties to even (ggml's nearest_int on a float). */
export function nearestInt(value: number): number {
  const rounded = Math.round(value);
  return rounded - value === 0.5 && rounded % 2 !== 0 ? rounded - 1 : rounded;
}

export interface AffineFitSearch {
  /** Largest level (15 for Q4_K, 31 for Q5_K). */
  levels: number;
  rmin: number;
  rdelta: number;
  nstep: number;
}

export const Q4_K_SEARCH: AffineFitSearch = { levels: 15, rmin: -1, rdelta: 0.1, nstep: 20 };
export const Q5_K_SEARCH: AffineFitSearch = { levels: 31, rmin: -0.5, rdelta: 0.1, nstep: 15 };

/** The weights ggml gives a sub-block's values without an importance matrix. */
export function subBlockWeights(values: Float32Array, start: number, n: number, out: Float32Array): void {
  let sumSquares = 0;
  for (let i = 0; i < n; i++) sumSquares = f(sumSquares + f(values[start + i]! * values[start + i]!));
  const rms = f(Math.sqrt(f(sumSquares / n)));
  for (let i = 0; i < n; i++) out[i] = f(rms + Math.abs(values[start + i]!));
}

/**
 * Fits the n values at `start`; writes their levels to `levelsOut` (at `start`) and returns
 * [scale, min] (value ≈ scale·level − min).
 */
export function fitWeightedAffine(values: Float32Array, start: number, n: number, weights: Float32Array, search: AffineFitSearch, levelsOut: Uint8Array, trial: Uint8Array): [scale: number, min: number] {
  const { levels } = search;
  let lo = values[start]!;
  let hi = values[start]!;
  let sumW = weights[0]!;
  let sumX = f(sumW * lo);
  for (let i = 1; i < n; i++) {
    const x = values[start + i]!;
    if (x < lo) lo = x;
    if (x > hi) hi = x;
    sumW = f(sumW + weights[i]!);
    sumX = f(sumX + f(weights[i]! * x));
  }
  if (lo > 0) lo = 0;
  if (hi === lo) {
    levelsOut.fill(0, start, start + n);
    return [0, -lo];
  }
  let inverse = f(levels / f(hi - lo));
  let scale = f(1 / inverse);
  let min = lo;
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const x = values[start + i]!;
    const level = Math.max(0, Math.min(levels, nearestInt(f(inverse * f(x - lo)))));
    levelsOut[start + i] = level;
    const diff = f(f(f(scale * level) + lo) - x);
    bestError = f(bestError + f(weights[i]! * f(diff * diff)));
  }
  for (let step = 0; step <= search.nstep; step++) {
    // As ggml: each trial is placed against the best offset so far (min), not the data's least value.
    inverse = f(f(f(search.rmin + f(f(search.rdelta) * step)) + levels) / f(hi - min));
    let sumL = 0;
    let sumLL = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const x = values[start + i]!;
      const level = Math.max(0, Math.min(levels, nearestInt(f(inverse * f(x - min)))));
      trial[i] = level;
      const w = weights[i]!;
      sumL = f(sumL + f(w * level));
      sumLL = f(sumLL + f(f(w * level) * level));
      sumXL = f(sumXL + f(f(w * level) * x));
    }
    const det = f(f(sumW * sumLL) - f(sumL * sumL));
    if (!(det > 0)) continue;
    let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / det);
    let thisMin = f(f(f(sumLL * sumX) - f(sumL * sumXL)) / det);
    if (thisMin > 0) {
      thisMin = 0;
      thisScale = f(sumXL / sumLL);
    }
    let error = 0;
    for (let i = 0; i < n; i++) {
      const diff = f(f(f(thisScale * trial[i]!) + thisMin) - values[start + i]!);
      error = f(error + f(weights[i]! * f(diff * diff)));
    }
    if (error < bestError) {
      for (let i = 0; i < n; i++) levelsOut[start + i] = trial[i]!;
      bestError = error;
      scale = thisScale;
      min = thisMin;
    }
  }
  return [scale, -min];
}
