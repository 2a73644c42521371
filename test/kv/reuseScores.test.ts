import { describe, expect, test } from "bun:test";
import {
  adjustedPrefixOverlap,
  buildInterByPrefix,
  buildTokenInter,
  buildVariantMetadata,
  cacheFixOverhead,
  chooseVariant,
  chunkContextualization,
  contextualization,
  localPrefixOverlap,
  orderPenalty,
  prefixOverlap,
  reuseScore,
  tokenScores,
  type VariantMetadata,
} from "../../src/kv/reuseScores.ts";

function meta(prefix: string[], interByPrefix: Record<string, number>, cci = 0.8): VariantMetadata {
  return { prefix, interByPrefix, cci, tokenInter: new Float32Array(0) };
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

describe("prefixOverlap (β, eq. 6)", () => {
  const m = meta(["A", "B", "C"], { A: 0.1, B: 0.3, C: 0.6 });

  test("inter mass of the shared prefix chunks over all old prefix chunks", () => {
    expect(prefixOverlap(m, ["B", "X", "C"])).toBeCloseTo(0.9, 12);
    expect(prefixOverlap(m, ["A"])).toBeCloseTo(0.1, 12);
    expect(prefixOverlap(m, ["C", "B", "A"])).toBe(1); // order-invariant
    expect(prefixOverlap(m, ["A", "B", "C", "D", "E"])).toBe(1); // new chunks do not lower it
    expect(prefixOverlap(m, [])).toBe(0);
    expect(prefixOverlap(m, ["X", "Y"])).toBe(0);
  });

  test("edge cases: empty old prefix and zero total give 1; missing inter counts 0; repeats count once", () => {
    expect(prefixOverlap(meta([], {}), ["A", "B"])).toBe(1);
    expect(prefixOverlap(meta([], {}), [])).toBe(1);
    expect(prefixOverlap(meta(["A", "B"], { A: 0, B: 0 }), ["X"])).toBe(1);
    expect(prefixOverlap(meta(["A", "B"], { B: 2 }), ["A"])).toBe(0);
    expect(prefixOverlap(meta(["A", "B"], { B: 2 }), ["B"])).toBe(1);
    // A repeated in the old prefix: interByPrefix holds the sum of its copies, counted once.
    expect(prefixOverlap(meta(["A", "B", "A"], { A: 0.5, B: 0.5 }), ["A", "A"])).toBe(0.5);
  });

  test("rejects negative or non-finite inter", () => {
    expect(() => prefixOverlap(meta(["A"], { A: -1 }), ["A"])).toThrow(RangeError);
    expect(() => prefixOverlap(meta(["A"], { A: Number.NaN }), ["A"])).toThrow(RangeError);
  });
});

describe("localPrefixOverlap (β of the shift scores)", () => {
  const m = meta(["H", "A", "B", "C"], { H: 0.1, A: 0.2, B: 0.3, C: 0.4 });

  test("only chunks in the common trailing run of both prefixes, and a common first chunk, are kept", () => {
    expect(localPrefixOverlap(m, ["H", "A", "B", "C"])).toBeCloseTo(1, 12);
    // Another chunk slipped in right before this one: only the head (the common first chunk) is kept.
    expect(localPrefixOverlap(m, ["H", "A", "B", "C", "X"])).toBeCloseTo(0.1, 12);
    expect(prefixOverlap(m, ["H", "A", "B", "C", "X"])).toBe(1); // eq. 6 sees nothing lost
    // Same last two neighbours, something changed further up: the trailing run B, C and the head.
    expect(localPrefixOverlap(m, ["H", "X", "B", "C"])).toBeCloseTo(0.8, 12);
    expect(localPrefixOverlap(m, ["H", "C", "B", "A"])).toBeCloseTo(0.1, 12);
    expect(localPrefixOverlap(m, ["X"])).toBe(0);
    expect(localPrefixOverlap(m, [])).toBe(0);
  });

  test("a chunk is not counted twice; a prefix that grew at the front keeps its trailing run", () => {
    expect(localPrefixOverlap(meta(["A"], { A: 1 }), ["A"])).toBe(1);
    expect(localPrefixOverlap(meta(["A", "B"], { A: 1, B: 1 }), ["X", "A", "B"])).toBe(1);
    expect(localPrefixOverlap(meta(["A", "B"], { A: 1, B: 3 }), ["A"])).toBeCloseTo(0.25, 12);
  });

  test("edge cases as eq. 6: empty old prefix or zero total give 1; bad inter rejected", () => {
    expect(localPrefixOverlap(meta([], {}), ["A"])).toBe(1);
    expect(localPrefixOverlap(meta(["A"], { A: 0 }), ["X"])).toBe(1);
    expect(() => localPrefixOverlap(meta(["A"], { A: -1 }), ["A"])).toThrow(RangeError);
  });

  test("reuseScore uses it (β′ = β) and the shift-based contextualisation only with shift scores and a measured shift", () => {
    const shifted: VariantMetadata = { ...meta(["A", "B"], { A: 0.5, B: 0.5 }, 0.9), tokenInter: Float32Array.from([0.9, 0.1]), tokenShift: Float32Array.from([1, 0]) };
    // Shift contextualisation: mean of d/(1+d) = (0.5 + 0) / 2.
    expect(contextualization(shifted, "shift")).toBeCloseTo(0.25, 7);
    expect(contextualization(shifted, "attention")).toBe(0.9);
    expect(Array.from(tokenScores(shifted, "shift"))).toEqual([1, 0]);
    expect(tokenScores(shifted, "attention")).toBe(shifted.tokenInter);
    const s = reuseScore(shifted, ["B", "A", "X"], 1, "shift");
    expect(s.beta).toBe(0);
    expect(s.betaPrime).toBe(0);
    expect(s.cfo).toBeCloseTo(0.25, 7);
    const a = reuseScore(shifted, ["B", "A", "X"], 1, "attention");
    expect(a.beta).toBe(1);
    expect(a.gamma).toBe(1);
    expect(a.cfo).toBeCloseTo(0.9, 7);
    // Without a measured shift, "shift" falls back to the paper's scores.
    const plain = meta(["A", "B"], { A: 0.5, B: 0.5 }, 0.9);
    expect(reuseScore(plain, ["B", "A", "X"], 1, "shift")).toEqual(reuseScore(plain, ["B", "A", "X"], 1, "attention"));
  });
});

describe("orderPenalty (γ, eq. 7)", () => {
  test("normalized Kendall-τ distance of the shared chunks' orders", () => {
    expect(orderPenalty(["A", "B", "C"], ["A", "B", "C"])).toBe(0);
    expect(orderPenalty(["A", "B", "C"], ["C", "B", "A"])).toBe(1); // 3 of 3 pairs discordant
    expect(orderPenalty(["A", "B", "C"], ["B", "A", "C"])).toBeCloseTo(1 / 3, 12);
    expect(orderPenalty(["A", "B", "C", "D"], ["B", "A", "D", "C"])).toBeCloseTo(2 / 6, 12);
    expect(orderPenalty(["A", "B"], ["B", "A"])).toBe(1);
  });

  test("only chunks in both prefixes count", () => {
    // Shared in old order [A, B, C], in new order [C, A, B]: (A,C) and (B,C) discordant.
    expect(orderPenalty(["A", "X", "B", "C"], ["Y", "C", "A", "Z", "B"])).toBeCloseTo(2 / 3, 12);
  });

  test("edge cases: fewer than 2 shared chunks give 0; repeats are placed at their first occurrence", () => {
    expect(orderPenalty([], [])).toBe(0);
    expect(orderPenalty(["A"], ["A"])).toBe(0);
    expect(orderPenalty(["A", "B"], ["B", "C"])).toBe(0);
    expect(orderPenalty(["A", "B"], ["C", "D"])).toBe(0);
    expect(orderPenalty(["A", "B", "A"], ["A", "B"])).toBe(0);
    expect(orderPenalty(["A", "B"], ["B", "A", "B"])).toBe(1);
  });
});

describe("β′ (eq. 8) and CFO (eq. 12)", () => {
  test("hand-computed values", () => {
    expect(adjustedPrefixOverlap(0.9, 1 / 3)).toBeCloseTo(0.6, 12);
    expect(adjustedPrefixOverlap(1, 0)).toBe(1);
    expect(adjustedPrefixOverlap(1, 1)).toBe(0);
    expect(cacheFixOverhead(2, 0.75, 0.6)).toBeCloseTo(0.6, 12);
    expect(cacheFixOverhead(1, 0.5, 1)).toBe(0);
    expect(cacheFixOverhead(0, 0.9, 0)).toBe(0);
    expect(cacheFixOverhead(3, 1, 0)).toBe(3); // not capped here
  });

  test("reuseScore combines eq. 6, 7, 8 and 12", () => {
    const m = meta(["A", "B", "C"], { A: 0.1, B: 0.3, C: 0.6 }, 0.75);
    // β = 0.9 (A missing), shared order [B, C] vs [C, B] → γ = 1 → β′ = 0 → CFO = α·CCI.
    const s1 = reuseScore(m, ["C", "B"], 2);
    expect(s1.beta).toBeCloseTo(0.9, 12);
    expect(s1.gamma).toBe(1);
    expect(s1.betaPrime).toBe(0);
    expect(s1.cfo).toBeCloseTo(1.5, 12);
    // [B, A, C]: β = 1, γ = 1/3, β′ = 2/3, CFO = 1·0.75·(1/3) = 0.25.
    const s2 = reuseScore(m, ["B", "A", "C"], 1);
    expect(s2.beta).toBe(1);
    expect(s2.gamma).toBeCloseTo(1 / 3, 12);
    expect(s2.betaPrime).toBeCloseTo(2 / 3, 12);
    expect(s2.cfo).toBeCloseTo(0.25, 12);
  });

  test("rejects out-of-range inputs", () => {
    expect(() => adjustedPrefixOverlap(1.5, 0)).toThrow(RangeError);
    expect(() => adjustedPrefixOverlap(0.5, -0.1)).toThrow(RangeError);
    expect(() => cacheFixOverhead(-1, 0.5, 0.5)).toThrow(RangeError);
    expect(() => cacheFixOverhead(1, Number.NaN, 0.5)).toThrow(RangeError);
    expect(() => cacheFixOverhead(Infinity, 0.5, 0.5)).toThrow(RangeError);
    expect(() => cacheFixOverhead(1, 0.5, 2)).toThrow(RangeError);
  });
});

describe("chunkContextualization (eq. 9–11)", () => {
  // Three chunks of sizes [2, 4, 2]; the cached chunk is 2. Only row 2 matters: other rows are
  // filled with junk to show they are ignored.
  const sizes = [2, 4, 2];
  const layer = (row2: number[]) => Float32Array.from([9, 9, 9, 9, 9, 9, ...row2]);

  test("hand-computed ā, b̄ and CCI from synthetic matrices", () => {
    // Layer 1: a = 0.5/(2·2) + 1.0/(2·4) = 0.25, b = 0.5/4 = 0.125.
    // Layer 2: a = 0.2/4 + 0.2/8 = 0.075, b = 1.6/4 = 0.4.
    const r = chunkContextualization([layer([0.5, 1.0, 0.5]), layer([0.2, 0.2, 1.6])], 3, 2, sizes);
    expect(r.a).toBeCloseTo(0.1625, 7);
    expect(r.b).toBeCloseTo(0.2625, 7);
    expect(r.cci).toBeCloseTo(sigmoid(0.1625 / 0.2625), 7);
  });

  test("one layer, a self-contextualized chunk has CCI near 0.5, a contextualized one near 1", () => {
    const self = chunkContextualization([layer([0.0, 0.01, 1.99])], 3, 2, sizes);
    const ctx = chunkContextualization([layer([1.0, 0.99, 0.01])], 3, 2, sizes);
    expect(self.cci).toBeGreaterThan(0.5);
    expect(self.cci).toBeLessThan(0.51);
    expect(ctx.cci).toBeGreaterThan(0.99);
  });

  test("edge cases: no prefix (chunk 0) → a = 0, CCI = 0.5; b̄ = 0 < ā → CCI = 1; empty chunk", () => {
    const m = Float32Array.from([2, 0, 0, 1, 3, 0, 0.5, 1, 0.5]);
    const first = chunkContextualization([m], 3, 0, sizes);
    expect(first).toEqual({ a: 0, b: 0.5, cci: 0.5 });
    const noIntra = chunkContextualization([layer([1, 1, 0])], 3, 2, sizes);
    expect(noIntra.b).toBe(0);
    expect(noIntra.cci).toBe(1);
    const empty = chunkContextualization([layer([0, 0, 0])], 3, 2, [2, 4, 0]);
    expect(empty).toEqual({ a: 0, b: 0, cci: 0.5 });
    // A zero-size prefix chunk contributes nothing.
    const zeroPrefix = chunkContextualization([layer([0, 1, 1])], 3, 2, [0, 4, 2]);
    expect(zeroPrefix.a).toBeCloseTo(1 / 8, 12);
  });

  test("rejects bad shapes", () => {
    expect(() => chunkContextualization([], 3, 2, sizes)).toThrow(RangeError);
    expect(() => chunkContextualization([new Float32Array(8)], 3, 2, sizes)).toThrow(RangeError);
    expect(() => chunkContextualization([layer([0, 0, 1])], 3, 3, sizes)).toThrow(RangeError);
    expect(() => chunkContextualization([layer([0, 0, 1])], 3, 2, [1, 2])).toThrow(RangeError);
    expect(() => chunkContextualization([layer([-1, 0, 1])], 3, 2, sizes)).toThrow(RangeError);
  });
});

describe("metadata builders from per-token chunk masses", () => {
  // 2 tokens × 4 chunks (prefix A, prefix B, the chunk itself, the question).
  const layers = [
    Float32Array.from([0.1, 0.2, 0.7, 0, /* t1 */ 0.3, 0.1, 0.6, 0]),
    Float32Array.from([0.3, 0.0, 0.7, 0, /* t1 */ 0.1, 0.3, 0.6, 0]),
  ];

  test("buildInterByPrefix: layer-averaged column sums per prefix chunk", () => {
    const inter = buildInterByPrefix(layers, 4, ["A", "B"]);
    expect(Object.keys(inter).sort()).toEqual(["A", "B"]);
    expect(inter.A).toBeCloseTo(0.4, 6); // (0.4 + 0.4) / 2
    expect(inter.B).toBeCloseTo(0.3, 6); // (0.3 + 0.3) / 2
    // A hash repeated in the prefix gets the sum of its columns.
    const repeated = buildInterByPrefix(layers, 4, ["A", "A"]);
    expect(repeated.A).toBeCloseTo(0.7, 6);
    expect(buildInterByPrefix(layers, 4, [])).toEqual({});
  });

  test("buildTokenInter: per token, layer-averaged mass on all prefix chunks", () => {
    const t = buildTokenInter(layers, 4, 2);
    expect(t.length).toBe(2);
    expect(t[0]).toBeCloseTo(0.3, 6); // (0.3 + 0.3) / 2
    expect(t[1]).toBeCloseTo(0.4, 6); // (0.4 + 0.4) / 2
    expect(Array.from(buildTokenInter(layers, 4, 0))).toEqual([0, 0]);
    expect(buildTokenInter(layers, 4, 1)[1]).toBeCloseTo(0.2, 6);
  });

  test("buildVariantMetadata agrees with chunkContextualization on the chunk-mass row", () => {
    const m = buildVariantMetadata(layers, 4, ["A", "B"], [3, 5]);
    expect(m.prefix).toEqual(["A", "B"]);
    expect(m.interByPrefix.A).toBeCloseTo(0.4, 6);
    expect(m.tokenInter[1]).toBeCloseTo(0.4, 6);
    // Row of the chunk (index 2) in each layer: column sums of its tokens.
    const matrices = layers.map((l) => {
      const mat = new Float32Array(9);
      for (let y = 0; y < 3; y++) mat[6 + y] = l[y]! + l[4 + y]!;
      return mat;
    });
    expect(m.cci).toBeCloseTo(chunkContextualization(matrices, 3, 2, [3, 5, 2]).cci, 6);
    // By hand: a_l = 0.4/(2·3) + 0.3/(2·5) = 0.09667 in both layers, b_l = 1.3/4 = 0.325.
    expect(m.cci).toBeCloseTo(sigmoid((0.4 / 6 + 0.3 / 10) / 0.325), 6);
  });

  test("rejects inconsistent shapes", () => {
    expect(() => buildInterByPrefix([], 4, ["A"])).toThrow(RangeError);
    expect(() => buildInterByPrefix([new Float32Array(7)], 4, ["A"])).toThrow(RangeError);
    expect(() => buildInterByPrefix([new Float32Array(8), new Float32Array(4)], 4, ["A"])).toThrow(RangeError);
    expect(() => buildInterByPrefix(layers, 4, ["A", "B", "C", "D"])).toThrow(RangeError);
    expect(() => buildTokenInter(layers, 4, 4)).toThrow(RangeError);
    expect(() => buildVariantMetadata(layers, 4, ["A", "B"], [3])).toThrow(RangeError);
  });
});

describe("chooseVariant", () => {
  const variant = (name: string, prefix: string[], inter: Record<string, number>, cci: number, lastUsedAt = 0) => ({
    name,
    meta: meta(prefix, inter, cci),
    lastUsedAt,
  });

  test("the lowest CFO wins, with its scores", () => {
    const vs = [
      variant("far", ["X", "Y"], { X: 1, Y: 1 }, 0.9), // β = 0 → CFO = 0.9α
      variant("near", ["A", "X"], { A: 3, X: 1 }, 0.9), // β = 0.75 → CFO = 0.225α
      variant("reordered", ["B", "A"], { A: 1, B: 1 }, 0.6), // β = 1, γ = 1 → CFO = 0.6α
    ];
    const chosen = chooseVariant(vs, ["A", "B"], 2)!;
    expect(chosen.variant.name).toBe("near");
    expect(chosen.beta).toBeCloseTo(0.75, 12);
    expect(chosen.gamma).toBe(0);
    expect(chosen.betaPrime).toBeCloseTo(0.75, 12);
    expect(chosen.cfo).toBeCloseTo(2 * 0.9 * 0.25, 12);
  });

  test("ties: higher β′, then more shared prefix chunks, then most recent, then first", () => {
    // All CFO 0 with α = 0; β′ decides.
    const byBeta = [variant("half", ["A", "X"], { A: 1, X: 1 }, 0.5), variant("full", ["A"], { A: 1 }, 0.5)];
    expect(chooseVariant(byBeta, ["A"], 0)!.variant.name).toBe("full");
    // Exact prefix and no prefix both have β′ = 1 and CFO 0: the exact one shares more chunks.
    const byShared = [variant("noPrefix", [], {}, 0.5, 10), variant("exact", ["A", "B"], { A: 1, B: 1 }, 0.9, 1)];
    expect(chooseVariant(byShared, ["A", "B"], 1)!.variant.name).toBe("exact");
    // Same everything: the most recent.
    const byRecency = [variant("old", ["A"], { A: 1 }, 0.5, 5), variant("new", ["A"], { A: 1 }, 0.5, 7), variant("older", ["A"], { A: 1 }, 0.5, 1)];
    expect(chooseVariant(byRecency, ["A"], 1)!.variant.name).toBe("new");
    // createdAt when there is no lastUsedAt; then the first in the list.
    const byCreated = [
      { name: "a", meta: meta(["A"], { A: 1 }, 0.5), createdAt: 1 },
      { name: "b", meta: meta(["A"], { A: 1 }, 0.5), createdAt: 3 },
      { name: "c", meta: meta(["A"], { A: 1 }, 0.5), createdAt: 3 },
    ];
    expect(chooseVariant(byCreated, ["A"], 1)!.variant.name).toBe("b");
  });

  test("no variants: null", () => {
    expect(chooseVariant([], ["A"], 1)).toBeNull();
  });
});
