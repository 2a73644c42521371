import { describe, expect, test } from "bun:test";
import {
  condensedIndex,
  type EncodedContexts,
  tsKernels,
  wasmKernels,
} from "../../src/kernels/index.ts";
import { firstDifference, Random, randomContexts, sizeFor } from "./helpers.ts";

const wasm = wasmKernels();
const both = [tsKernels, wasm];

/** Contexts from block-number lists. */
function encode(contexts: number[][], blockCount?: number): EncodedContexts {
  const offsets = new Int32Array(contexts.length + 1);
  contexts.forEach((c, i) => (offsets[i + 1] = offsets[i]! + c.length));
  const flat = Int32Array.from(contexts.flat());
  return { flat, offsets, blockCount: blockCount ?? Math.max(-1, ...flat) + 1 };
}

/** Straight from the definition, with Maps: an independent reference. */
function definitionDistance(ci: number[], cj: number[], alpha: number): number {
  const posJ = new Map(cj.map((b, p) => [b, p]));
  let shared = 0;
  let posSum = 0;
  ci.forEach((b, p) => {
    const q = posJ.get(b);
    if (q !== undefined) {
      shared++;
      posSum += Math.abs(p - q);
    }
  });
  if (shared === 0) return 1;
  return 1 - shared / Math.max(ci.length, cj.length) + alpha * (posSum / shared);
}

function contextLists(ctx: EncodedContexts): number[][] {
  const lists: number[][] = [];
  for (let i = 0; i + 1 < ctx.offsets.length; i++) lists.push(Array.from(ctx.flat.subarray(ctx.offsets[i], ctx.offsets[i + 1])));
  return lists;
}

describe("context distance: known answers", () => {
  // The ContextPilot paper's example: A{3,5,1,7} B{2,6,3,5} C{3,5,8,9} D{2,6,4,0}.
  const paper = encode([[3, 5, 1, 7], [2, 6, 3, 5], [3, 5, 8, 9], [2, 6, 4, 0]]);
  const [A, B, C, D] = [0, 1, 2, 3];

  for (const k of both) {
    test(`${k.name}: paper example`, () => {
      const d = k.contextDistances(paper, 0.001);
      const at = (i: number, j: number) => d[condensedIndex(4, i, j)]!;
      // A-B share {3,5} at positions (0,1) vs (2,3): 1 - 2/4 + 0.001 * (2+2)/2
      expect(at(A, B)).toBe(1 - 2 / 4 + 0.001 * (4 / 2));
      expect(at(A, B)).toBeCloseTo(0.502, 15);
      // B-D share {2,6} at the same positions: 1 - 2/4 + 0
      expect(at(B, D)).toBe(0.5);
      expect(at(B, D)).toBeLessThan(at(A, B));
      expect(at(A, C)).toBe(0.5);
      expect(at(A, D)).toBe(1);
      expect(at(C, D)).toBe(1);
      expect(at(B, C)).toBe(at(A, B));
      expect(Array.from(d)).toEqual([0.502, 0.5, 1, 0.502, 0.5, 1]);
    });

    test(`${k.name}: hand-computed distances`, () => {
      // [1,2,3] vs [3,2,1,4]: S = {1,2,3}, |S|/max = 3/4, positions |0-2|+|1-1|+|2-0| = 4
      const ctx = encode([[1, 2, 3], [3, 2, 1, 4], [], [9], [9]], 10);
      const d = k.contextDistances(ctx, 0.5);
      expect(d[condensedIndex(5, 0, 1)]).toBe(1 - 3 / 4 + 0.5 * (4 / 3));
      expect(d[condensedIndex(5, 0, 2)]).toBe(1); // empty context: no overlap
      expect(d[condensedIndex(5, 2, 3)]).toBe(1);
      expect(d[condensedIndex(5, 3, 4)]).toBe(0); // identical
      expect(d[condensedIndex(5, 1, 3)]).toBe(1);
      expect(d.length).toBe(10);
    });

    test(`${k.name}: default alpha is 0.001`, () => {
      expect(k.contextDistances(paper)[0]).toBe(1 - 2 / 4 + 0.001 * 2);
    });

    test(`${k.name}: pairs, including reversed and i == j`, () => {
      const d = k.contextDistancesForPairs(paper, Uint32Array.of(0, 1, 1, 0, 3, 1, 2, 2, 0, 3), 0.001);
      expect(Array.from(d)).toEqual([0.502, 0.502, 0.5, 0, 1]);
      const empty = encode([[], [1]], 2);
      expect(Array.from(k.contextDistancesForPairs(empty, Uint32Array.of(0, 0, 1, 1)))).toEqual([1, 0]);
      expect(k.contextDistancesForPairs(paper, new Uint32Array(0)).length).toBe(0);
    });

    test(`${k.name}: rejects bad input`, () => {
      expect(() => k.contextDistances(encode([[1, 2, 1]]))).toThrow(/block 1 twice/);
      expect(() => k.contextDistances(encode([[1, 5]], 5))).toThrow(/outside 0..4/);
      expect(() => k.contextDistances(encode([[-1]], 5))).toThrow(/outside/);
      expect(() => k.contextDistances({ flat: Int32Array.of(1, 2), offsets: Int32Array.of(0, 1), blockCount: 3 })).toThrow(/must equal flat.length/);
      expect(() => k.contextDistances({ flat: Int32Array.of(1, 2), offsets: Int32Array.of(0, 2, 1, 2), blockCount: 3 })).toThrow(/non-decreasing/);
      expect(() => k.contextDistances(paper, NaN)).toThrow(/alpha/);
      expect(() => k.contextDistancesForPairs(paper, Uint32Array.of(0, 4))).toThrow(/only 4 contexts/);
      expect(() => k.contextDistancesForPairs(paper, Uint32Array.of(0))).toThrow(/even length/);
      expect(() => k.contextDistanceRows(paper, 0.001, 0, 2, new Float64Array(5))).toThrow(/whole condensed matrix/);
      expect(() => k.contextDistanceRows(paper, 0.001, 3, 2, new Float64Array(6))).toThrow(/rowStart/);
      expect(() => k.contextDistanceRows(paper, 0.001, 0, 5, new Float64Array(6))).toThrow(/rowEnd/);
    });
  }
});

describe("context distance: WASM == TS == definition on random contexts", () => {
  test("full matrix", () => {
    const rng = new Random(1);
    for (let it = 0; it < 300; it++) {
      const n = sizeFor(it, rng, 120);
      const blockCount = rng.int(1, rng.pick([4, 30, 500]));
      const ctx = randomContexts(rng, n, blockCount, rng.pick([3, 15, 40]));
      const alpha = rng.pick([0, 0.001, 0.1, 1, 1 / 3, -0.25]);
      const ts = tsKernels.contextDistances(ctx, alpha);
      const w = wasm.contextDistances(ctx, alpha);
      expect(ts.length).toBe(n < 2 ? 0 : (n * (n - 1)) / 2);
      const diff = firstDifference(ts, w);
      if (diff) throw new Error(`iteration ${it} (n ${n}, alpha ${alpha}): ${diff}`);
      // spot-check against the definition
      const lists = contextLists(ctx);
      for (let s = 0; s < Math.min(20, ts.length); s++) {
        const i = rng.int(0, n - 2);
        const j = rng.int(i + 1, n - 1);
        expect(ts[condensedIndex(n, i, j)]).toBe(definitionDistance(lists[i]!, lists[j]!, alpha));
      }
    }
  });

  test("row ranges fill exactly their part of the matrix", () => {
    const rng = new Random(2);
    for (let it = 0; it < 150; it++) {
      const n = sizeFor(it, rng, 60);
      const ctx = randomContexts(rng, n, rng.int(1, 80), 12);
      const full = tsKernels.contextDistances(ctx, 0.01);
      for (const k of both) {
        const out = new Float64Array(full.length).fill(-7);
        let start = 0;
        while (start < n) {
          const end = Math.min(n, start + rng.int(0, 5));
          const before = out.slice();
          k.contextDistanceRows(ctx, 0.01, start, end, out);
          // untouched outside the rows
          const from = n * start - (start * (start + 1)) / 2;
          const to = n * Math.min(end, n) - (Math.min(end, n) * (Math.min(end, n) + 1)) / 2;
          for (let t = 0; t < out.length; t++) if (t < from || t >= to) expect(out[t]).toBe(before[t]!);
          start = end; // a zero-row step is allowed and changes nothing
        }
        const diff = firstDifference(full, out);
        if (diff) throw new Error(`${k.name} iteration ${it}: ${diff}`);
      }
    }
  });

  test("pairs agree with the condensed matrix", () => {
    const rng = new Random(3);
    for (let it = 0; it < 150; it++) {
      const n = Math.max(1, sizeFor(it, rng, 50));
      const ctx = randomContexts(rng, n, rng.int(1, 60), 10);
      const full = tsKernels.contextDistances(ctx, 0.2);
      const count = rng.int(0, 60);
      const pairs = new Uint32Array(2 * count);
      // runs of equal i exercise the WASM side's reuse of the scattered context
      for (let t = 0; t < count; t++) {
        pairs[2 * t] = t > 0 && rng.next() < 0.5 ? pairs[2 * t - 2]! : rng.int(0, n - 1);
        pairs[2 * t + 1] = rng.int(0, n - 1);
      }
      const ts = tsKernels.contextDistancesForPairs(ctx, pairs, 0.2);
      const w = wasm.contextDistancesForPairs(ctx, pairs, 0.2);
      const diff = firstDifference(ts, w);
      if (diff) throw new Error(`iteration ${it}: ${diff}`);
      for (let t = 0; t < count; t++) {
        const [i, j] = [pairs[2 * t]!, pairs[2 * t + 1]!];
        const self = ctx.offsets[i + 1]! > ctx.offsets[i]! ? 0 : 1;
        expect(ts[t]).toBe(i === j ? self : full[condensedIndex(n, i, j)]!);
      }
    }
  });

  test("larger batch (n = 700, Zipf blocks)", () => {
    const rng = new Random(4);
    const ctx = randomContexts(rng, 700, 300, 20);
    const diff = firstDifference(tsKernels.contextDistances(ctx), wasm.contextDistances(ctx));
    expect(diff).toBeNull();
  });
});
