import { describe, expect, test } from "bun:test";
import { type IndexKernels, tsKernels, wasmKernels } from "../../src/kernels/index.ts";
import { firstDifference, Random, randomScores, sizeFor } from "./helpers.ts";

const wasm = wasmKernels();
const both: IndexKernels[] = [tsKernels, wasm];
const f32 = (...v: number[]) => Float32Array.from(v);
const list = (v: Uint32Array) => Array.from(v);

/** Reference order: a plain sort of [score, index] pairs. */
function sortedOrder(scores: Float32Array): number[] {
  return Array.from(scores, (s, i) => [s, i] as const)
    .sort((x, y) => (x[0] === y[0] ? x[1] - y[1] : y[0] - x[0]))
    .map(([, i]) => i);
}

describe("top-k / top-p: known answers", () => {
  for (const k of both) {
    test(`${k.name}: top-k with ties (lower index first)`, () => {
      const s = f32(0.5, 0.9, 0.5, 0.1, 0.9, 0.5);
      expect(list(k.topK(s, 3))).toEqual([1, 4, 0]);
      expect(list(k.topK(s, 4))).toEqual([1, 4, 0, 2]);
      expect(list(k.topK(s, 100))).toEqual([1, 4, 0, 2, 5, 3]);
      expect(list(k.topK(s, 0))).toEqual([]);
      expect(list(k.topK(new Float32Array(0), 5))).toEqual([]);
      expect(list(k.topK(f32(-0, 0, -1, -Infinity, Infinity), 5))).toEqual([4, 0, 1, 2, 3]);
      expect(list(k.topK(f32(3, 3, 3, 3), 2))).toEqual([0, 1]);
    });

    test(`${k.name}: top-k rows`, () => {
      const s = f32(1, 2, 3, /**/ 3, 2, 1, /**/ 5, 5, 0);
      expect(list(k.topKRows(s, 3, 2))).toEqual([2, 1, 0, 1, 0, 1]);
      expect(list(k.topKRows(s, 3, 5))).toEqual([2, 1, 0, 0, 1, 2, 0, 1, 2]);
      expect(list(k.topKRows(s, 9, 1))).toEqual([6]);
      expect(list(k.topKRows(new Float32Array(0), 4, 2))).toEqual([]);
    });

    test(`${k.name}: top-p`, () => {
      const s = f32(1, 4, 2, 3, 0); // total 10, exact in f32 and f64
      expect(list(k.topP(s, 0.4))).toEqual([1]);
      expect(list(k.topP(s, 0.5))).toEqual([1, 3]);
      expect(list(k.topP(s, 0.7))).toEqual([1, 3]);
      expect(list(k.topP(s, 0.75))).toEqual([1, 3, 2]);
      expect(list(k.topP(s, 1))).toEqual([1, 3, 2, 0]); // positive scores only
      expect(list(k.topP(s, 5))).toEqual([1, 3, 2, 0]);
      expect(list(k.topP(s, 0))).toEqual([]);
      expect(list(k.topP(s, -1))).toEqual([]);
      expect(list(k.topP(f32(0, 0, 0), 0.5))).toEqual([]);
      expect(list(k.topP(f32(0, 0, 0), 1))).toEqual([]);
      expect(list(k.topP(f32(2, 2, 2, 2), 0.5))).toEqual([0, 1]);
      expect(list(k.topP(new Float32Array(0), 0.5))).toEqual([]);
    });

    test(`${k.name}: top-p rows`, () => {
      const r = k.topPRows(f32(1, 3, 0, 0, /**/ 0, 0, 0, 0, /**/ 1, 1, 1, 1), 4, 0.6);
      // row 0: total 4, target 2.4 -> [1]; row 1: all zero -> []; row 2: target 2.4 -> 3 ones
      expect(list(r.indices)).toEqual([1, 0, 1, 2]);
      expect(list(r.offsets)).toEqual([0, 1, 1, 4]);
    });

    test(`${k.name}: rejects bad input`, () => {
      expect(() => k.topK(f32(1, NaN), 1)).toThrow(/scores\[1\] is NaN/);
      expect(() => k.topK(f32(1, 2), -1)).toThrow(/k must be/);
      expect(() => k.topK(f32(1, 2), 1.5)).toThrow(/k must be/);
      expect(() => k.topKRows(f32(1, 2, 3), 2, 1)).toThrow(/multiple of rowLength/);
      expect(() => k.topKRows(f32(1, 2), 0, 1)).toThrow(/rowLength/);
      expect(() => k.topKRows(f32(1, 2, 3, NaN), 2, 1)).toThrow(/row 1, column 1/);
      expect(() => k.topP(f32(1, -0.5), 0.5)).toThrow(/scores\[1\] is -0.5/);
      expect(() => k.topP(f32(1, Infinity), 0.5)).toThrow(/finite/);
      expect(() => k.topP(f32(NaN), 0.5)).toThrow(/finite/);
      expect(() => k.topP(f32(1), NaN)).toThrow(/p must be/);
      expect(() => k.topK(new Float64Array(2) as unknown as Float32Array, 1)).toThrow(/Float32Array/);
    });
  }
});

describe("top-k / top-p: WASM == TS == reference", () => {
  test("top-k, random rows with and without ties", () => {
    const rng = new Random(31);
    for (let it = 0; it < 400; it++) {
      const rowLength = Math.max(1, sizeFor(it, rng, 3000));
      const rows = rng.int(0, 4);
      const scores = randomScores(rng, rows * rowLength, rng.pick([0, 1, 3, 1000]), rng.next() < 0.3);
      const k = rng.pick([0, 1, 2, 5, 31, 32, 33, 100, rowLength, rowLength + 3, rng.int(0, rowLength)]);
      const ts = tsKernels.topKRows(scores, rowLength, k);
      const w = wasm.topKRows(scores, rowLength, k);
      const diff = firstDifference(ts, w);
      if (diff) throw new Error(`iteration ${it} (rowLength ${rowLength}, k ${k}): ${diff}`);
      const kk = Math.min(k, rowLength);
      for (let r = 0; r < rows; r++) {
        const expected = sortedOrder(scores.subarray(r * rowLength, (r + 1) * rowLength)).slice(0, kk);
        expect(list(ts.subarray(r * kk, (r + 1) * kk))).toEqual(expected);
      }
    }
  });

  test("top-p, random rows with and without ties", () => {
    const rng = new Random(32);
    for (let it = 0; it < 400; it++) {
      const rowLength = Math.max(1, sizeFor(it, rng, 3000));
      const rows = rng.int(0, 4);
      const scores = randomScores(rng, rows * rowLength, rng.pick([0, 1, 3, 1000]));
      if (rng.next() < 0.2) for (let t = 0; t < scores.length; t++) scores[t] = scores[t]! ** 8; // peaked
      const p = rng.pick([0, 0.1, 0.5, 0.9, 0.99, 0.999999, 1, 1.5, rng.next()]);
      const ts = tsKernels.topPRows(scores, rowLength, p);
      const w = wasm.topPRows(scores, rowLength, p);
      const diff = firstDifference(ts.indices, w.indices) ?? firstDifference(ts.offsets, w.offsets);
      if (diff) throw new Error(`iteration ${it} (rowLength ${rowLength}, p ${p}): ${diff}`);
      for (let r = 0; r < rows; r++) {
        const row = scores.subarray(r * rowLength, (r + 1) * rowLength);
        const got = list(ts.indices.subarray(ts.offsets[r], ts.offsets[r + 1]));
        const order = sortedOrder(row);
        expect(got).toEqual(order.slice(0, got.length)); // a prefix of the order
        const total = row.reduce((s, v) => s + v, 0);
        const sum = got.reduce((s, i) => s + row[i]!, 0);
        if (p >= 1) expect(got.length).toBe(row.filter((v) => v > 0).length);
        else if (!(p * total > 0)) expect(got.length).toBe(0);
        else {
          // reaches the target (up to rounding) and is the shortest prefix that does
          expect(sum).toBeGreaterThanOrEqual(p * total * (1 - 1e-12));
          expect(sum - row[got.at(-1)!]!).toBeLessThan(p * total);
        }
      }
    }
  });

  test("large rows (selection paths)", () => {
    const rng = new Random(33);
    const scores = randomScores(rng, 200_000, 50_000);
    for (const k of [1, 7, 32, 33, 500, 20_000]) {
      expect(firstDifference(tsKernels.topK(scores, k), wasm.topK(scores, k))).toBeNull();
    }
    for (const p of [0.001, 0.3, 0.9, 1]) {
      expect(firstDifference(tsKernels.topP(scores, p), wasm.topP(scores, p))).toBeNull();
    }
  });
});
