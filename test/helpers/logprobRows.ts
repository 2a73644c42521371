/**
 * Log-probability rows (positions × vocabulary, row-major f32) and how far two sets of them are
 * apart: the measure of the llama.cpp oracle tests.
 */

/** Each row's log-softmax, in f64 within a row. */
export function logSoftmaxRows(logits: Float32Array, vocab: number): Float32Array {
  if (vocab <= 0 || logits.length % vocab !== 0) throw new Error(`${logits.length} logits are not whole rows of ${vocab}`);
  const out = new Float32Array(logits.length);
  for (let start = 0; start < logits.length; start += vocab) {
    let top = -Infinity;
    for (let v = 0; v < vocab; v++) top = Math.max(top, logits[start + v]!);
    let sum = 0;
    for (let v = 0; v < vocab; v++) sum += Math.exp(logits[start + v]! - top);
    const logSum = Math.log(sum);
    for (let v = 0; v < vocab; v++) out[start + v] = logits[start + v]! - top - logSum;
  }
  return out;
}

export interface RowsDifference {
  /** The largest |a − b| over every position and every vocabulary entry. */
  max: number;
  /** The mean |a − b| over the same. */
  mean: number;
  /** The position (row) of the largest. */
  worstRow: number;
}

/** |a − b| over all rows and the whole vocabulary; NaN anywhere reads as an infinite difference. */
export function rowsDifference(a: Float32Array, b: Float32Array, vocab: number): RowsDifference {
  if (a.length !== b.length) throw new Error(`rows differ in size: ${a.length} vs ${b.length}`);
  let max = 0;
  let sum = 0;
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    const difference = Number.isNaN(d) ? Infinity : d;
    sum += difference;
    if (difference > max) {
      max = difference;
      worst = i;
    }
  }
  return { max, mean: a.length === 0 ? 0 : sum / a.length, worstRow: Math.floor(worst / vocab) };
}

/** A fixed pseudo-random id sequence (xorshift32 from `seed`), ids in [0, vocab). */
export function pseudoRandomIds(count: number, vocab: number, seed = 1): number[] {
  let state = seed >>> 0 || 1;
  const ids: number[] = [];
  for (let i = 0; i < count; i++) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    ids.push(state % vocab);
  }
  return ids;
}
