import { describe, expect, test } from "bun:test";
import { type IndexKernels, tsKernels, wasmKernels } from "../../src/kernels/index.ts";
import { firstDifference, permutation, Random, sizeFor } from "./helpers.ts";

const wasm = wasmKernels();
const both: IndexKernels[] = [tsKernels, wasm];
const i32 = (...v: number[]) => Int32Array.from(v);

/** O(m^2) reference: pairs ordered differently in a and b. */
function naiveKendall(a: Int32Array, b: Int32Array): number {
  const m = a.length;
  if (m < 2) return 0;
  const posB = new Map(Array.from(b, (item, p) => [item, p]));
  let discordant = 0;
  for (let p = 0; p < m; p++) for (let q = p + 1; q < m; q++) if (posB.get(a[p]!)! > posB.get(a[q]!)!) discordant++;
  return discordant / ((m * (m - 1)) / 2);
}

describe("Kendall tau: known answers", () => {
  for (const k of both) {
    test(`${k.name}: small permutations`, () => {
      expect(k.kendallTauDistance(i32(1, 2, 3, 4), i32(1, 2, 3, 4))).toBe(0);
      expect(k.kendallTauDistance(i32(1, 2, 3, 4), i32(4, 3, 2, 1))).toBe(1);
      expect(k.kendallTauDistance(i32(1, 2, 3, 4), i32(2, 1, 3, 4))).toBe(1 / 6);
      expect(k.kendallTauDistance(i32(1, 2, 3), i32(2, 3, 1))).toBe(2 / 3);
      expect(k.kendallTauDistance(i32(10, -5, 7), i32(-5, 7, 10))).toBe(2 / 3);
      expect(k.kendallTauDistance(i32(), i32())).toBe(0);
      expect(k.kendallTauDistance(i32(42), i32(42))).toBe(0);
      expect(k.kendallTauDistance(i32(-2147483648, 2147483647), i32(2147483647, -2147483648))).toBe(1);
    });

    test(`${k.name}: batched segments, empty ones included`, () => {
      const a = i32(1, 2, 3, 4, 9, 5, 6, 7);
      const b = i32(4, 3, 2, 1, 9, 5, 7, 6);
      expect(Array.from(k.kendallTauDistances(a, b, i32(0, 4, 4, 5, 8)))).toEqual([1, 0, 0, 1 / 3]);
      expect(k.kendallTauDistances(i32(), i32(), i32(0)).length).toBe(0);
    });

    test(`${k.name}: rejects orders of different items`, () => {
      expect(() => k.kendallTauDistance(i32(1, 2, 3), i32(1, 2, 4))).toThrow(/segment 0.*same distinct items/);
      expect(() => k.kendallTauDistance(i32(1, 1, 2), i32(1, 2, 1))).toThrow(/same distinct items/);
      expect(() => k.kendallTauDistance(i32(1, 2), i32(1, 2, 3))).toThrow(/same length/);
      expect(() => k.kendallTauDistances(i32(1, 2, 3, 4), i32(1, 2, 4, 3), i32(0, 1, 2, 4))).not.toThrow();
      expect(() => k.kendallTauDistances(i32(1, 2, 3, 4), i32(2, 1, 3, 4), i32(0, 1, 2, 4))).toThrow(/segment 0/);
      expect(() => k.kendallTauDistances(i32(1, 2, 3, 4), i32(1, 3, 2, 4), i32(0, 2, 4))).toThrow(/segment 0/);
      expect(() => k.kendallTauDistances(i32(1, 2, 3, 4), i32(1, 2, 4, 5), i32(0, 2, 4))).toThrow(/segment 1/);
      expect(() => k.kendallTauDistances(i32(1, 2), i32(1, 2), i32(0, 1))).toThrow(/offsets/);
      expect(() => k.kendallTauDistances(i32(1, 2), i32(1, 2), i32(0, 2, 1, 2))).toThrow(/non-decreasing/);
    });
  }
});

describe("Kendall tau: WASM == TS == O(m^2) reference", () => {
  test("random batches", () => {
    const rng = new Random(21);
    for (let it = 0; it < 300; it++) {
      const segments = sizeFor(it, rng, 12);
      const a: number[] = [];
      const b: number[] = [];
      const offsets = [0];
      for (let s = 0; s < segments; s++) {
        const m = rng.int(0, rng.pick([3, 10, 60]));
        // items: a random set of int32 values (negative ones too)
        const items = new Set<number>();
        while (items.size < m) items.add(rng.int(-1000, 1000) * rng.pick([1, 7, 2000000]));
        const order = rng.shuffle([...items]);
        const other = rng.next() < 0.3 ? [...order] : rng.shuffle([...order]);
        if (rng.next() < 0.3 && m > 1) [other[0], other[1]] = [other[1]!, other[0]!];
        a.push(...order);
        b.push(...other);
        offsets.push(a.length);
      }
      const [A, B, O] = [Int32Array.from(a), Int32Array.from(b), Int32Array.from(offsets)];
      const ts = tsKernels.kendallTauDistances(A, B, O);
      const w = wasm.kendallTauDistances(A, B, O);
      const diff = firstDifference(ts, w);
      if (diff) throw new Error(`iteration ${it}: ${diff}`);
      for (let s = 0; s < segments; s++) {
        expect(ts[s]).toBe(naiveKendall(A.subarray(O[s], O[s + 1]), B.subarray(O[s], O[s + 1])));
      }
    }
  });

  test("long permutations", () => {
    const rng = new Random(22);
    for (const m of [1000, 4097, 20000]) {
      const a = permutation(rng, m);
      const b = permutation(rng, m);
      const ts = tsKernels.kendallTauDistance(a, b);
      expect(wasm.kendallTauDistance(a, b)).toBe(ts);
      if (m <= 4097) expect(ts).toBe(naiveKendall(a, b));
      expect(Math.abs(ts - 0.5)).toBeLessThan(0.05);
    }
  });
});
