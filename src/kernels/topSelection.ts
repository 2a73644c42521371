/**
 * Top-k and top-p selection over f32 scores, plain TypeScript reference (full sort per row).
 * The order: higher score first, equal scores (-0 == +0) by lower index first. See
 * IndexKernels.topP for the exact top-p rule; the WASM twin (wasm/src/select.rs) selects
 * incrementally but yields the same indices.
 */
import type { TopPRows } from "./kernelTypes.ts";

function rowOrder(scores: Float32Array, start: number, length: number, onlyPositive: boolean): number[] {
  const idx: number[] = [];
  for (let j = 0; j < length; j++) if (!onlyPositive || scores[start + j]! > 0) idx.push(j);
  idx.sort((a, b) => {
    const sa = scores[start + a]!;
    const sb = scores[start + b]!;
    return sa > sb ? -1 : sa < sb ? 1 : a - b;
  });
  return idx;
}

/** rows * k indices (k <= rowLength), or { bad: flat index of a NaN score }. */
export function topKRowsTs(scores: Float32Array, rows: number, rowLength: number, k: number): Uint32Array | { bad: number } {
  for (let t = 0; t < scores.length; t++) if (Number.isNaN(scores[t]!)) return { bad: t };
  const out = new Uint32Array(rows * k);
  for (let r = 0; r < rows; r++) {
    const order = rowOrder(scores, r * rowLength, rowLength, false);
    for (let t = 0; t < k; t++) out[r * k + t] = order[t]!;
  }
  return out;
}

/** Top-p of each row, or { bad: flat index of a NaN, infinite or negative score }. */
export function topPRowsTs(scores: Float32Array, rows: number, rowLength: number, p: number): TopPRows | { bad: number } {
  for (let t = 0; t < scores.length; t++) {
    const v = scores[t]!;
    if (!(v >= 0 && v < Infinity)) return { bad: t };
  }
  const selected: number[] = [];
  const offsets = new Uint32Array(rows + 1);
  for (let r = 0; r < rows; r++) {
    const start = r * rowLength;
    let total = 0;
    for (let j = 0; j < rowLength; j++) total += scores[start + j]!;
    const target = p * total;
    if (p >= 1 || target > 0) {
      const order = rowOrder(scores, start, rowLength, true);
      let count = order.length;
      if (p < 1) {
        let sum = 0;
        for (let t = 0; t < order.length; t++) {
          sum += scores[start + order[t]!]!;
          if (sum >= target) {
            count = t + 1;
            break;
          }
        }
      }
      for (let t = 0; t < count; t++) selected.push(order[t]!);
    }
    offsets[r + 1] = selected.length;
  }
  return { indices: Uint32Array.from(selected), offsets };
}
