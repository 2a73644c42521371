import { describe, expect, test } from "bun:test";
import {
  cacheCraftSelection,
  cacheCraftShares,
  candidatePositions,
  epicSelection,
  epicShares,
  focusedChunks,
  PROPHET_SCORES,
  prophetSelection,
  RECOMPUTE_POLICIES,
  type ProphetScores,
} from "../../src/kv/recomputeSelection.ts";

/** Small deterministic PRNG (mulberry32). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sizesOnly = (sizes: number[], cfos: number[]) => sizes.map((tokenCount, i) => ({ tokenCount, cfo: cfos[i]! }));
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

test("RECOMPUTE_POLICIES lists every policy", () => {
  expect([...RECOMPUTE_POLICIES].sort()).toEqual(["cachecraft", "epic", "full", "none", "prefix", "prophet"]);
});

describe("cacheCraftShares (eq. 14 counts, α fitted to the budget)", () => {
  test("shares proportional to CFO·|C| when nothing caps (α = 1 gives ⌈CFO·|C|⌉ exactly here)", () => {
    // CFO·|C| = [5, 5, 0] and the budget is their sum: α = 1, N_i = ⌈0.5·10⌉, ⌈0.25·20⌉, 0.
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 10)).toEqual([5, 5, 0]);
    // Any α the CFOs were computed with cancels: same shares for CFOs scaled by 7.
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [3.5, 1.75, 0]), 10)).toEqual([5, 5, 0]);
    // Budget 6 → α = 0.6 → [3, 3, 0].
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 6)).toEqual([3, 3, 0]);
  });

  test("a chunk is capped at |C| and its excess goes to the others", () => {
    // Weights [5, 5]: at budget 25 chunk 0 would get 12.5 > 10 → capped, chunk 1 gets 15.
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 25)).toEqual([10, 15, 0]);
    // Weights [9, 1, 1] (CFO 0.9, 0.1, 0.1 of 10 tokens): budget 15 → chunk 0 caps at 10, 5 left → [10, 2.5, 2.5] → rounded.
    expect(cacheCraftShares(sizesOnly([10, 10, 10], [0.9, 0.1, 0.1]), 15)).toEqual([10, 3, 2]);
  });

  test("leftover beyond the CFO>0 chunks spreads over CFO-0 chunks by size; budget ≥ total takes all", () => {
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 35)).toEqual([10, 20, 5]);
    expect(cacheCraftShares(sizesOnly([10, 20, 10, 30], [0.5, 0.25, 0, 0]), 38)).toEqual([10, 20, 2, 6]);
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 40)).toEqual([10, 20, 10]);
    expect(cacheCraftShares(sizesOnly([10, 20, 10], [0.5, 0.25, 0]), 1000)).toEqual([10, 20, 10]);
  });

  test("all CFO 0: uniform by size", () => {
    expect(cacheCraftShares(sizesOnly([10, 30], [0, 0]), 8)).toEqual([2, 6]);
    expect(cacheCraftShares(sizesOnly([10, 30, 0], [0, 0, 0]), 20)).toEqual([5, 15, 0]);
  });

  test("largest-remainder rounding: exact total, lower index first on equal remainders", () => {
    expect(cacheCraftShares(sizesOnly([3, 3, 3], [1, 1, 1]), 4)).toEqual([2, 1, 1]);
    expect(cacheCraftShares(sizesOnly([3, 3, 3], [1, 1, 1]), 5)).toEqual([2, 2, 1]);
    // Real shares [0.6, 2.4]: remainders .6 > .4 → [1, 2].
    expect(cacheCraftShares(sizesOnly([10, 10], [0.1, 0.4]), 3)).toEqual([1, 2]);
  });

  test("budget edge cases: 0, fractional (floored), no chunks, empty chunks", () => {
    expect(cacheCraftShares(sizesOnly([10, 20], [0.5, 0.5]), 0)).toEqual([0, 0]);
    expect(cacheCraftShares(sizesOnly([10, 10], [0.5, 0.5]), 4.9)).toEqual([2, 2]);
    expect(cacheCraftShares([], 10)).toEqual([]);
    expect(cacheCraftShares(sizesOnly([0, 4], [1, 1]), 2)).toEqual([0, 2]);
  });

  test("random: sums to min(budget, total), within caps, monotone in CFO·|C| for uncapped chunks", () => {
    const rand = random(7);
    for (let trial = 0; trial < 500; trial++) {
      const n = 1 + Math.floor(rand() * 8);
      const sizes = Array.from({ length: n }, () => Math.floor(rand() * 40));
      const cfos = Array.from({ length: n }, () => (rand() < 0.3 ? 0 : rand() * 2));
      const total = sum(sizes);
      const budget = Math.floor(rand() * (total + 10));
      const shares = cacheCraftShares(sizesOnly(sizes, cfos), budget);
      expect(sum(shares)).toBe(Math.min(budget, total));
      shares.forEach((s, i) => {
        expect(Number.isInteger(s)).toBe(true);
        expect(s).toBeGreaterThanOrEqual(0);
        expect(s).toBeLessThanOrEqual(sizes[i]!);
      });
      // CFO-0 chunks only get tokens once every CFO>0 chunk is full.
      const weightedFull = shares.every((s, i) => cfos[i]! === 0 || sizes[i] === 0 || s === sizes[i]);
      if (!weightedFull) shares.forEach((s, i) => cfos[i]! === 0 && expect(s).toBe(0));
      // Larger weight, not capped → not fewer tokens than a smaller weight (up to rounding by 1).
      for (let i = 0; i < n; i++) {
        for (let j = 0; j < n; j++) {
          const wi = cfos[i]! * sizes[i]!;
          const wj = cfos[j]! * sizes[j]!;
          if (wi > wj && wj > 0 && shares[i]! < sizes[i]!) expect(shares[i]!).toBeGreaterThanOrEqual(shares[j]! - 1);
        }
      }
    }
  });

  test("rejects bad input", () => {
    expect(() => cacheCraftShares(sizesOnly([10], [-0.1]), 5)).toThrow(RangeError);
    expect(() => cacheCraftShares(sizesOnly([10], [Number.NaN]), 5)).toThrow(RangeError);
    expect(() => cacheCraftShares(sizesOnly([1.5], [0.1]), 5)).toThrow(RangeError);
    expect(() => cacheCraftShares(sizesOnly([10], [0.1]), -1)).toThrow(RangeError);
    expect(() => cacheCraftShares(sizesOnly([10], [0.1]), Number.NaN)).toThrow(RangeError);
  });
});

describe("cacheCraftSelection (eq. 14 tokens)", () => {
  test("per chunk, the top N_i tokens by tokenInter, sorted ascending", () => {
    const chunks = [
      { tokenCount: 6, cfo: 0.5, tokenInter: Float32Array.of(0.1, 0.9, 0.3, 0.8, 0.0, 0.7) },
      { tokenCount: 4, cfo: 0.25, tokenInter: Float32Array.of(0.5, 0.1, 0.6, 0.2) },
      { tokenCount: 3, cfo: 0, tokenInter: Float32Array.of(1, 1, 1) },
    ];
    // Weights [3, 1, 0], budget 4 → [3, 1, 0].
    const selection = cacheCraftSelection(chunks, 4);
    expect(selection.map((s) => Array.from(s))).toEqual([[1, 3, 5], [2], []]);
    expect(selection.every((s) => s instanceof Uint32Array)).toBe(true);
  });

  test("ties go to the lower index; a full share takes every token", () => {
    const chunks = [
      { tokenCount: 5, cfo: 1, tokenInter: Float32Array.of(0.2, 0.5, 0.2, 0.5, 0.2) },
      { tokenCount: 2, cfo: 1, tokenInter: Float32Array.of(0, 0) },
    ];
    // Weights [5, 2], budget 7 → everything; budget 4 → real [2.86, 1.14] → [3, 1].
    expect(cacheCraftSelection(chunks, 7).map((s) => Array.from(s))).toEqual([[0, 1, 2, 3, 4], [0, 1]]);
    expect(cacheCraftSelection(chunks, 4).map((s) => Array.from(s))).toEqual([[0, 1, 3], [0]]);
  });

  test("tokenInter must match tokenCount", () => {
    expect(() => cacheCraftSelection([{ tokenCount: 3, cfo: 1, tokenInter: Float32Array.of(1, 2) }], 1)).toThrow(RangeError);
  });
});

/** Brute force: f64 sums in layer-then-query order, rounded to f32, sorted (score desc, position asc). */
function prophetReference(layers: Float32Array[], queries: number, len: number, candidates: { start: number; end: number }[], budget: number): number[] {
  const positions = [...new Set(candidates.flatMap(({ start, end }) => Array.from({ length: end - start }, (_, i) => start + i)))];
  const scored = positions.map((t) => {
    let s = 0;
    for (const layer of layers) for (let q = 0; q < queries; q++) s += layer[q * len + t]!;
    return { t, s: Math.fround(s) };
  });
  scored.sort((a, b) => b.s - a.s || a.t - b.t);
  return scored
    .slice(0, Math.floor(budget))
    .map(({ t }) => t)
    .sort((a, b) => a - b);
}

describe("prophetSelection (ProphetKV Algorithm 1)", () => {
  test("hand case: column sums over queries, fused over layers, top budget among candidates only", () => {
    // 2 queries × 6 positions, 2 layers. Candidates [1, 3) and [4, 6): positions 1, 2, 4, 5.
    const l0 = Float32Array.from([0.5, 0.1, 0.2, 0.0, 0.1, 0.1, /* q1 */ 0.6, 0.0, 0.1, 0.1, 0.1, 0.1]);
    const l1 = Float32Array.from([0.4, 0.3, 0.0, 0.2, 0.0, 0.1, /* q1 */ 0.5, 0.0, 0.2, 0.1, 0.1, 0.1]);
    // ᾱ: t0 2.0 (not a candidate), t1 0.4, t2 0.5, t3 0.4 (not a candidate), t4 0.3, t5 0.4.
    const candidates = [{ start: 1, end: 3 }, { start: 4, end: 6 }];
    expect(Array.from(prophetSelection([l0, l1], 2, 6, candidates, 1))).toEqual([2]);
    // Budget 2: t2, then t1 and t5 tie at 0.4 → the lower position.
    expect(Array.from(prophetSelection([l0, l1], 2, 6, candidates, 2))).toEqual([1, 2]);
    expect(Array.from(prophetSelection([l0, l1], 2, 6, candidates, 3))).toEqual([1, 2, 5]);
    expect(Array.from(prophetSelection([l0, l1], 2, 6, candidates, 10))).toEqual([1, 2, 4, 5]);
    expect(Array.from(prophetSelection([l0, l1], 2, 6, candidates, 0))).toEqual([]);
    expect(Array.from(prophetSelection([l0, l1], 2, 6, [], 3))).toEqual([]);
    // Overlapping candidate ranges count positions once.
    expect(Array.from(prophetSelection([l0, l1], 2, 6, [{ start: 1, end: 5 }, { start: 2, end: 6 }], 10))).toEqual([1, 2, 3, 4, 5]);
  });

  test("spanDecay carries a token's score on to the tokens after it, within its chunk only", () => {
    // One query, one layer, 8 positions; chunks [0, 4) and [4, 8). The question looks at t1 only (and a little at t6).
    const mass = Float32Array.from([0, 1, 0, 0, 0.1, 0, 0.3, 0]);
    const chunks = [{ start: 0, end: 4 }, { start: 4, end: 8 }];
    expect(Array.from(prophetSelection([mass], 1, 8, chunks, 3))).toEqual([1, 4, 6]); // the paper: no spans
    // d = 0.8: t2 0.8, t3 0.64; t4 starts a new chunk (0.1, nothing carried over), t6 0.3, t7 0.24.
    expect(Array.from(prophetSelection([mass], 1, 8, chunks, 3, 0.8))).toEqual([1, 2, 3]);
    expect(Array.from(prophetSelection([mass], 1, 8, chunks, 5, 0.8))).toEqual([1, 2, 3, 6, 7]);
    expect(() => prophetSelection([mass], 1, 8, chunks, 3, 1)).toThrow(RangeError);
    expect(() => prophetSelection([mass], 1, 8, chunks, 3, -0.1)).toThrow(RangeError);
  });

  test("equals the brute-force reference on random inputs, never leaves the candidates", () => {
    const rand = random(11);
    for (let trial = 0; trial < 200; trial++) {
      const layers = 1 + Math.floor(rand() * 4);
      const queries = 1 + Math.floor(rand() * 5);
      const len = 1 + Math.floor(rand() * 60);
      const mass = Array.from({ length: layers }, () => {
        const m = new Float32Array(queries * len);
        for (let q = 0; q < queries; q++) {
          // Quantized softmax-like rows (many ties) or continuous ones.
          let total = 0;
          for (let t = 0; t < len; t++) total += m[q * len + t] = rand() < 0.5 ? Math.floor(rand() * 4) : rand();
          for (let t = 0; t < len; t++) m[q * len + t] = total > 0 ? m[q * len + t]! / total : 0;
        }
        return m;
      });
      const candidates = Array.from({ length: Math.floor(rand() * 4) }, () => {
        const a = Math.floor(rand() * (len + 1));
        const b = Math.floor(rand() * (len + 1));
        return { start: Math.min(a, b), end: Math.max(a, b) };
      });
      const budget = Math.floor(rand() * (len + 2));
      const got = Array.from(prophetSelection(mass, queries, len, candidates, budget));
      expect(got).toEqual(prophetReference(mass, queries, len, candidates, budget));
      const allowed = new Set(Array.from(candidatePositions(candidates, len)));
      for (const t of got) expect(allowed.has(t)).toBe(true);
    }
  });

  test("rejects bad shapes and ranges", () => {
    expect(() => prophetSelection([new Float32Array(5)], 2, 3, [], 1)).toThrow(RangeError);
    expect(() => prophetSelection([new Float32Array(6)], 2, 3, [{ start: 2, end: 4 }], 1)).toThrow(RangeError);
    expect(() => prophetSelection([new Float32Array(6)], 2, 3, [{ start: 2, end: 1 }], 1)).toThrow(RangeError);
    expect(() => prophetSelection([new Float32Array(6)], 2, 3, [{ start: 0, end: 3 }], -1)).toThrow(RangeError);
  });
});

/**
 * Cache-Craft Algorithm 1 transcribed line by line (1-based arrays), with the documented handling
 * of all-equal layers (no set; breaks the window) and of never stabilising (all, null).
 */
function algorithm1(inter: number[][], w: number): { focused: number[]; cutoffLayer: number | null } {
  const L = inter.length;
  const k = L > 0 ? inter[0]!.length : 0;
  const all = Array.from({ length: k }, (_, i) => i);
  if (k < 3) return { focused: all, cutoffLayer: null };
  const Fall: (string | null)[] = [];
  const cinter = new Array<number>(k + 1).fill(0);
  for (let l = 1; l <= L; l++) {
    for (let i = 1; i <= k; i++) cinter[i]! += inter[l - 1]![i - 1]!;
    const sorted = all.map((i) => i + 1).sort((a, b) => cinter[b]! - cinter[a]! || a - b); // chunk ids, 1-based
    const diff = [0];
    for (let i = 1; i <= k - 1; i++) diff[i] = cinter[sorted[i - 1]!]! - cinter[sorted[i]!]!;
    let total = 0;
    for (let i = 1; i <= k - 1; i++) total += diff[i]!;
    let F: string | null = null;
    if (total > 0) {
      const p = diff.map((d) => d / total);
      const h = [0];
      let acc = 0;
      for (let i = 1; i <= k - 1; i++) {
        acc += p[i]! > 0 ? -p[i]! * Math.log(p[i]!) : 0;
        h[i] = acc;
      }
      // argmax of h_{i+1} − h_i, first on ties; equal gaps give equal jumps, which the differences
      // of the cumulative sums only reproduce up to rounding.
      const jumps = Array.from({ length: k - 1 }, (_, i) => (i >= 1 ? h[i + 1]! - h[i]! : -Infinity));
      const best = Math.max(...jumps);
      const iStar = jumps.findIndex((j) => j >= best - 1e-12);
      F = sorted
        .slice(0, iStar)
        .map((c) => c - 1)
        .sort((a, b) => a - b)
        .join(",");
    }
    Fall.push(F);
    if (l >= w && F !== null && Fall.slice(l - w, l).every((f) => f === F)) {
      return { focused: F.split(",").map(Number), cutoffLayer: l - 1 };
    }
  }
  return { focused: all, cutoffLayer: null };
}

describe("focusedChunks (Cache-Craft Algorithm 1)", () => {
  const v = [5, 4.5, 0.5, 0.25];

  test("hand case: the clear pair {0, 1} stabilises at the expected layer", () => {
    // Layer 0 all zero (degenerate), layer 1 → F = {3}, layer 2 → {0}, layers 3.. → {0, 1}:
    // at layer 3 cinter = [10, 9, 1, 3.5], sorted gaps [1, 5.5, 2.5], p = [.111, .611, .278];
    // jumps −p·ln p: i=1 → 0.301, i=2 → 0.356 → i* = 2 → the top 2.
    const layers = [[0, 0, 0, 0], [0, 0, 0, 3], v, v, v, v, v, v];
    expect(focusedChunks(layers, 1)).toEqual({ focused: [3], cutoffLayer: 1 });
    expect(focusedChunks(layers, 2)).toEqual({ focused: [0, 1], cutoffLayer: 4 });
    expect(focusedChunks(layers, 3)).toEqual({ focused: [0, 1], cutoffLayer: 5 });
    expect(focusedChunks(layers, 4)).toEqual({ focused: [0, 1], cutoffLayer: 6 });
    expect(focusedChunks(layers, 6)).toEqual({ focused: [0, 1, 2, 3], cutoffLayer: null }); // not enough layers
    // Scale-invariant scores from layer 1 on: stable from layer 1, confirmed at layer w.
    expect(focusedChunks([[0, 0, 0, 0], v, v, v, v], 3)).toEqual({ focused: [0, 1], cutoffLayer: 3 });
  });

  test("degenerate cases: k < 3, all equal, no layers, never stable → all focused, never stop", () => {
    expect(focusedChunks([[1, 2], [3, 4]], 1)).toEqual({ focused: [0, 1], cutoffLayer: null });
    expect(focusedChunks([[1], [3]], 1)).toEqual({ focused: [0], cutoffLayer: null });
    expect(focusedChunks([[]], 1)).toEqual({ focused: [], cutoffLayer: null });
    expect(focusedChunks([], 2)).toEqual({ focused: [], cutoffLayer: null });
    expect(focusedChunks([[1, 1, 1], [2, 2, 2], [0, 0, 0]], 1)).toEqual({ focused: [0, 1, 2], cutoffLayer: null });
    // Alternating leaders never give the same set twice in a row.
    const flip = [[4, 0, 1, 0.5], [0, 8, 1, 0.5], [16, 0, 1, 0.5], [0, 32, 1, 0.5]];
    expect(focusedChunks(flip, 2)).toEqual({ focused: [0, 1, 2, 3], cutoffLayer: null });
  });

  test("an all-equal layer breaks a stable run", () => {
    // k = 3 has a single jump (i* = 1): F is the leader. Layer 1 makes every cumulative score 3.
    expect(focusedChunks([[3, 1, 0], [3, 1, 0]], 2)).toEqual({ focused: [0], cutoffLayer: 1 });
    const layers = [[3, 1, 0], [0, 2, 3], [3, 1, 0], [3, 1, 0]];
    expect(focusedChunks(layers, 2)).toEqual({ focused: [0], cutoffLayer: 3 });
  });

  test("equals a line-by-line transcription on random scores", () => {
    const rand = random(3);
    for (let trial = 0; trial < 300; trial++) {
      const k = Math.floor(rand() * 9);
      const L = Math.floor(rand() * 12);
      const focus = new Set(Array.from({ length: k }, (_, i) => i).filter(() => rand() < 0.4));
      const layers = Array.from({ length: L }, () => Array.from({ length: k }, (_, i) => (rand() < 0.1 ? 0 : (focus.has(i) ? 1 : 0.2) * Math.floor(rand() * 5))));
      const w = 1 + Math.floor(rand() * 4);
      expect(focusedChunks(layers, w)).toEqual(algorithm1(layers, w));
    }
  });

  test("rejects bad input", () => {
    expect(() => focusedChunks([[1, 2, 3]], 0)).toThrow(RangeError);
    expect(() => focusedChunks([[1, 2, 3], [1, 2]], 1)).toThrow(RangeError);
    expect(() => focusedChunks([[1, Number.NaN, 3]], 1)).toThrow(RangeError);
  });
});

describe("epicShares / epicSelection (EPIC's LegoLink: the first k tokens of every reused chunk)", () => {
  test("the budget spread evenly, the leftover one each to the earliest chunks", () => {
    expect(epicShares([10, 10, 10], 6)).toEqual([2, 2, 2]);
    expect(epicShares([10, 10, 10], 7)).toEqual([3, 2, 2]);
    expect(epicShares([10, 10, 10], 8)).toEqual([3, 3, 2]);
    expect(epicShares([10, 10, 10], 8.9)).toEqual([3, 3, 2]);
  });

  test("a chunk shorter than its share is taken whole and the rest is spread over the longer ones", () => {
    expect(epicShares([1, 10, 10], 9)).toEqual([1, 4, 4]);
    expect(epicShares([1, 10, 10], 10)).toEqual([1, 5, 4]);
    expect(epicShares([10, 2, 3, 10], 20)).toEqual([8, 2, 3, 7]);
  });

  test("edges: no budget, a budget past every token, no chunks, empty chunks", () => {
    expect(epicShares([5, 7], 0)).toEqual([0, 0]);
    expect(epicShares([5, 7], 100)).toEqual([5, 7]);
    expect(epicShares([], 4)).toEqual([]);
    expect(epicShares([0, 6], 3)).toEqual([0, 3]);
  });

  test("random chunks: the counts sum to the budget, fit their chunk, and differ by at most one where not whole", () => {
    const next = random(31);
    for (let trial = 0; trial < 500; trial++) {
      const sizes = Array.from({ length: 1 + Math.floor(next() * 8) }, () => Math.floor(next() * 30));
      const budget = Math.floor(next() * (sum(sizes) + 10));
      const shares = epicShares(sizes, budget);
      expect(sum(shares)).toBe(Math.min(budget, sum(sizes)));
      shares.forEach((k, i) => {
        expect(k).toBeGreaterThanOrEqual(0);
        expect(k).toBeLessThanOrEqual(sizes[i]!);
        // A chunk not recomputed whole gets at least as much as any other, less one.
        if (k < sizes[i]!) for (const other of shares) expect(other).toBeLessThanOrEqual(k + 1);
      });
    }
  });

  test("the selection is each chunk's first k local indices", () => {
    expect(epicSelection([4, 6, 2], 7).map((chunk) => Array.from(chunk))).toEqual([[0, 1, 2], [0, 1], [0, 1]]);
    expect(epicSelection([4, 6], 0).map((chunk) => Array.from(chunk))).toEqual([[], []]);
  });

  test("bad input is refused with the problem named", () => {
    expect(() => epicShares([3, -1], 2)).toThrow(/chunk 1 size must be a non-negative integer/);
    expect(() => epicShares([3, 1.5], 2)).toThrow(/chunk 1 size/);
    expect(() => epicShares([3], -1)).toThrow(/budgetTokens must be >= 0/);
    expect(() => epicShares([3], Number.NaN)).toThrow(/budgetTokens/);
  });
});

describe("prophetSelection with the measured shift (ProphetScores)", () => {
  // One layer, one query row over 8 positions; reused chunks [1, 4) and [4, 7).
  const mass = Float32Array.from([0, 0.5, 0.1, 0.05, 0.2, 0.1, 0.01, 0]);
  const shift = Float32Array.from([0, 0, 3, 1, 0.1, 0, 9, 0]);
  const chunks = [{ start: 1, end: 4 }, { start: 4, end: 7 }];
  const pick = (scores: ProphetScores, budget = 2) => Array.from(prophetSelection([mass], 1, 8, chunks, budget, 0, { scores, shift }));

  test("each scores picks its own tokens", () => {
    expect(pick("attention")).toEqual([1, 4]); // the question's attention alone (the paper)
    expect(pick("shift")).toEqual([2, 6]); // the stalest tokens: d/(1+d) = 0.75 and 0.9
    expect(pick("product")).toEqual([2, 3]); // attention × d/(1+d): 0.075, 0.025 (position 1 has no shift, 6 little attention)
    // Ranks (attention, shift): 1 → (0, 4), 2 → (2, 1), 4 → (1, 3): sums 4, 3, 4; the tie goes to the lower position.
    expect(pick("rank-sum")).toEqual([1, 2]);
    // The 2·budget stalest are 6, 2, 3, 4; among them attention picks 4 and 2.
    expect(pick("shift-gated")).toEqual([2, 4]);
    expect(Array.from(prophetSelection([mass], 1, 8, chunks, 2))).toEqual(pick("attention"));
  });

  test("every scores is listed, and each takes the whole candidate set when the budget covers it", () => {
    expect([...PROPHET_SCORES].sort()).toEqual(["attention", "product", "rank-sum", "shift", "shift-gated"]);
    for (const scores of PROPHET_SCORES) expect(pick(scores, 6)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  test("the span decay shapes the attention before it is fused", () => {
    // Without decay the products are 0.075 (2), 0.025 (3), 0.018 (4), 0.009 (6). With decay 0.8 the
    // attention of 6 becomes 0.01 + 0.8·(0.1 + 0.8·0.2) = 0.218, its product 0.196, ahead of 4's 0.018.
    expect(pick("product", 3)).toEqual([2, 3, 4]);
    expect(Array.from(prophetSelection([mass], 1, 8, chunks, 3, 0.8, { scores: "product", shift }))).toEqual([2, 3, 6]);
  });

  test("a missing or bad shift is refused", () => {
    expect(() => prophetSelection([mass], 1, 8, chunks, 2, 0, { scores: "product", shift: new Float32Array(4) })).toThrow(/shift at position 4/);
    expect(() => prophetSelection([mass], 1, 8, chunks, 2, 0, { scores: "shift", shift: Float32Array.from([0, 0, Number.NaN, 0, 0, 0, 0, 0]) })).toThrow(/shift at position 2/);
    expect(() => prophetSelection([mass], 1, 8, chunks, 2, 0, { scores: "rank-sum", shift: Float32Array.from([0, 0, -1, 0, 0, 0, 0, 0]) })).toThrow(RangeError);
  });
});
