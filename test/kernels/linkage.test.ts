import { describe, expect, test } from "bun:test";
import {
  condensedIndex,
  type IndexKernels,
  LINKAGE_METHODS,
  type LinkageMethod,
  tsKernels,
  wasmKernels,
} from "../../src/kernels/index.ts";
import { firstDifference, Random, randomCondensed, randomContexts, sizeFor } from "./helpers.ts";

const wasm = wasmKernels();
const both: IndexKernels[] = [tsKernels, wasm];

/**
 * Naive O(n^3) agglomerative clustering straight from the definitions: each step merges the
 * closest pair of current clusters, the cluster distance recomputed from the original point
 * distances (mean, min or max over member pairs). Matches SciPy on inputs without ties.
 */
function naiveLinkage(d: Float64Array, n: number, method: LinkageMethod): number[][] {
  const clusters = new Map<number, number[]>();
  for (let i = 0; i < n; i++) clusters.set(i, [i]);
  const between = (a: number[], b: number[]): number => {
    const values = a.flatMap((p) => b.map((q) => d[condensedIndex(n, p, q)]!));
    if (method === "single") return Math.min(...values);
    if (method === "complete") return Math.max(...values);
    return values.reduce((s, v) => s + v, 0) / values.length;
  };
  const z: number[][] = [];
  for (let m = 0; m < n - 1; m++) {
    let best: [number, number, number] = [-1, -1, Infinity];
    const ids = [...clusters.keys()];
    for (const a of ids) for (const b of ids) {
      if (a < b) {
        const dist = between(clusters.get(a)!, clusters.get(b)!);
        if (dist < best[2]) best = [a, b, dist];
      }
    }
    const [a, b, dist] = best;
    const merged = [...clusters.get(a)!, ...clusters.get(b)!];
    clusters.delete(a);
    clusters.delete(b);
    clusters.set(n + m, merged);
    z.push([a, b, dist, merged.length]);
  }
  return z;
}

function rows(z: Float64Array): number[][] {
  const out: number[][] = [];
  for (let t = 0; t < z.length; t += 4) out.push(Array.from(z.subarray(t, t + 4)));
  return out;
}

/** Z is well formed: valid labels used once, a < b, sizes add up, distances non-decreasing. */
function checkWellFormed(z: Float64Array, n: number): void {
  expect(z.length).toBe(n < 2 ? 0 : 4 * (n - 1));
  const size = new Map<number, number>();
  for (let i = 0; i < n; i++) size.set(i, 1);
  let previous = -Infinity;
  rows(z).forEach(([a, b, dist, s], m) => {
    expect(a!).toBeLessThan(b!);
    expect(size.has(a!) && size.has(b!)).toBe(true);
    expect(s).toBe(size.get(a!)! + size.get(b!)!);
    expect(dist!).toBeGreaterThanOrEqual(previous);
    previous = dist!;
    size.delete(a!);
    size.delete(b!);
    size.set(n + m, s!);
  });
}

describe("linkage: known answers", () => {
  // Points on a line at 0, 1, 3, 7: d = |xi - xj|.
  const line = Float64Array.of(1, 3, 7, 2, 6, 4);
  for (const k of both) {
    test(`${k.name}: points 0, 1, 3, 7`, () => {
      expect(rows(k.linkage(line, 4, "single"))).toEqual([[0, 1, 1, 2], [2, 4, 2, 3], [3, 5, 4, 4]]);
      expect(rows(k.linkage(line, 4, "complete"))).toEqual([[0, 1, 1, 2], [2, 4, 3, 3], [3, 5, 7, 4]]);
      expect(rows(k.linkage(line, 4, "average"))).toEqual([[0, 1, 1, 2], [2, 4, 2.5, 3], [3, 5, (2 * 6.5 + 4) / 3, 4]]);
      expect(rows(k.linkage(line, 4))).toEqual(rows(k.linkage(line, 4, "average")));
    });

    test(`${k.name}: all distances equal (SciPy's nn_chain tie-breaking)`, () => {
      // chain 0 -> 1 (lowest at the minimum) -> back to 0: merge (0,1); then (1,2) in slot 2; ...
      expect(rows(k.linkage(new Float64Array(6).fill(1), 4, "average"))).toEqual([[0, 1, 1, 2], [2, 4, 1, 3], [3, 5, 1, 4]]);
    });

    test(`${k.name}: merges come out sorted by distance and relabelled`, () => {
      // Pairs (2,3) at 0.1 and (0,1) at 0.2 merge in that order whatever the chain visits first.
      const d = new Float64Array(6).fill(5);
      d[condensedIndex(4, 0, 1)] = 0.2;
      d[condensedIndex(4, 2, 3)] = 0.1;
      expect(rows(k.linkage(d, 4, "complete"))).toEqual([[2, 3, 0.1, 2], [0, 1, 0.2, 2], [4, 5, 5, 4]]);
    });

    test(`${k.name}: tiny inputs and bad input`, () => {
      expect(k.linkage(new Float64Array(0), 0).length).toBe(0);
      expect(k.linkage(new Float64Array(0), 1).length).toBe(0);
      expect(rows(k.linkage(Float64Array.of(0.3), 2))).toEqual([[0, 1, 0.3, 2]]);
      expect(() => k.linkage(new Float64Array(5), 4)).toThrow(/6 entries/);
      expect(() => k.linkage(Float64Array.of(1, NaN, 2), 3)).toThrow(/finite/);
      expect(() => k.linkage(Float64Array.of(1, Infinity, 2), 3)).toThrow(/finite/);
      expect(() => k.linkage(Float64Array.of(1, 1, 2), 3, "ward" as LinkageMethod)).toThrow(/method/);
    });
  }
});

describe("linkage: WASM == TS, and == the naive definition without ties", () => {
  test("random distances without ties vs the naive O(n^3) reference", () => {
    const rng = new Random(11);
    for (let it = 0; it < 120; it++) {
      const n = sizeFor(it, rng, 30);
      const d = randomCondensed(rng, n);
      const method = LINKAGE_METHODS[it % 3]!;
      const expected = naiveLinkage(d, n, method);
      for (const k of both) {
        const z = rows(k.linkage(d, n, method));
        expect(z.length).toBe(expected.length);
        z.forEach((row, m) => {
          const want = expected[m]!;
          expect([row[0], row[1], row[3]]).toEqual([want[0], want[1], want[3]]);
          if (method === "average") expect(row[2]!).toBeCloseTo(want[2]!, 12);
          else expect(row[2]).toBe(want[2]!);
        });
      }
    }
  });

  test("bit-identical on random and tie-heavy distances", () => {
    const rng = new Random(12);
    for (let it = 0; it < 400; it++) {
      const n = sizeFor(it, rng, 90);
      const d = randomCondensed(rng, n, rng.pick([0, 1, 2, 3, 10]));
      const method = LINKAGE_METHODS[it % 3]!;
      const copy = d.slice();
      const ts = tsKernels.linkage(d, n, method);
      const w = wasm.linkage(d, n, method);
      expect(firstDifference(d, copy)).toBeNull(); // input left alone
      checkWellFormed(ts, n);
      const diff = firstDifference(ts, w);
      if (diff) throw new Error(`iteration ${it} (n ${n}, ${method}): ${diff}`);
    }
  });

  test("bit-identical at n = 600", () => {
    const rng = new Random(13);
    for (const method of LINKAGE_METHODS) {
      const d = randomCondensed(rng, 600, method === "single" ? 50 : 0);
      expect(firstDifference(tsKernels.linkage(d, 600, method), wasm.linkage(d, 600, method))).toBeNull();
    }
  });

  test("contextLinkage == linkage(contextDistances), with progress", () => {
    const rng = new Random(14);
    for (let it = 0; it < 60; it++) {
      const n = sizeFor(it, rng, 70);
      const ctx = randomContexts(rng, n, rng.int(1, 100), 12);
      const method = LINKAGE_METHODS[it % 3]!;
      const expected = tsKernels.linkage(tsKernels.contextDistances(ctx, 0.01), n, method);
      for (const k of both) {
        const events: Array<[string, number, number]> = [];
        const z = k.contextLinkage(ctx, { alpha: 0.01, method, onProgress: (p, done, total) => events.push([p, done, total]) });
        expect(firstDifference(z, expected)).toBeNull();
        if (n >= 2) {
          expect(events[0]).toEqual(["distances", 0, (n * (n - 1)) / 2]);
          expect(events.at(-1)).toEqual(["linkage", n - 1, n - 1]);
          expect(events.find(([p, done, total]) => p === "distances" && done === total)).toBeDefined();
        }
      }
    }
  });
});
