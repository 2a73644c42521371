import { describe, expect, test } from "bun:test";
import { AdaptiveRecomputeRatios, type AgreementObservation } from "../../src/kv/adaptiveRecomputeRatio.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";

/** A synthetic agreement-vs-ratio curve: 1 − drop·e^(−r/scale), rising with the ratio. */
const curve = (drop: number, scale: number) => (ratio: number) => 1 - drop * Math.exp(-ratio / scale);
/** The smallest ratio whose mean agreement meets the target on that curve. */
const smallestMeeting = (drop: number, scale: number, target: number) => Math.max(0, scale * Math.log(drop / (1 - target)));

/** Gaussian noise from a seeded generator (Box–Muller). */
function gaussian(seed: number): () => number {
  const uniform = seededRandom(seed);
  return () => Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
}

/** Serves `count` requests at the controller's ratio and feeds each one's noisy agreement back; the ratios served. */
function run(ratios: AdaptiveRecomputeRatios, mean: (ratio: number) => number, count: number, noise: () => number, sigma: number): number[] {
  const served: number[] = [];
  for (let i = 0; i < count; i++) {
    const ratio = ratios.ratioFor("m", "prophet");
    served.push(ratio);
    const agreement = Math.min(1, Math.max(0, mean(ratio) + sigma * noise()));
    ratios.observe({ model: "m", policy: "prophet", ratio, agreement });
  }
  return served;
}

describe("AdaptiveRecomputeRatios", () => {
  for (const [name, drop, scale, target, sigma, seed] of [
    ["gentle curve, target 0.9", 0.5, 0.1, 0.9, 0.03, 1],
    ["steep curve, target 0.95", 0.8, 0.05, 0.95, 0.02, 7],
    ["slow curve, target 0.97", 0.3, 0.15, 0.97, 0.01, 42],
  ] as const) {
    test(`settles within 0.05 of the smallest ratio meeting the target (${name}), from 0.05 and from 0.6`, () => {
      const best = smallestMeeting(drop, scale, target);
      for (const initialRatio of [0.05, 0.6]) {
        const ratios = new AdaptiveRecomputeRatios({ target, minRatio: 0.05, maxRatio: 0.6, initialRatio });
        const served = run(ratios, curve(drop, scale), 4000, gaussian(seed), sigma);
        const settled = served.slice(2000);
        const median = [...settled].sort((a, b) => a - b)[settled.length >> 1]!;
        expect(Math.abs(median - best)).toBeLessThanOrEqual(0.05);
        // Noise moves it up now and then (by a step that fits the shortfall), never far.
        expect(settled.filter((ratio) => Math.abs(ratio - best) <= 0.05).length / settled.length).toBeGreaterThanOrEqual(0.98);
        for (const ratio of settled) expect(Math.abs(ratio - best)).toBeLessThanOrEqual(0.1);
        // Served quality holds: the mean agreement of the settled stretch meets the target.
        expect(settled.reduce((s, r) => s + curve(drop, scale)(r), 0) / settled.length).toBeGreaterThanOrEqual(target);
      }
    });
  }

  test("moves up by the window's shortfall: one stray failure among agreeing requests does not move it, two do", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.2 });
    const at = (agreement: number) => ratios.observe({ model: "m", policy: "p", ratio: ratios.ratioFor("m", "p"), agreement });
    for (let i = 0; i < 16; i++) at(1);
    expect(ratios.ratioFor("m", "p")).toBeCloseTo(0.19, 9);
    for (let i = 0; i < 14; i++) at(1);
    // A request agreeing on nothing: (14 + 0 + one prior sample at 0.92)/16 = 0.9325, above the target.
    expect(at(0)).toBeCloseTo(0.19, 9);
    // A second: 14/16 = 0.875, 0.025 short: up by max(0.02, 0.025 / 0.1 · 0.1) at once.
    expect(at(0)).toBeCloseTo(0.215, 9);
    // Right after the move the window is empty: a zero gives (0 + 15·0.92)/16 = 0.8625, up by 0.0375.
    expect(at(0)).toBeCloseTo(0.2525, 9);
    // Agreement collapsed (window 4: (0.1 + 3·0.92)/4 = 0.715, at least 1 − target short): a full step.
    const collapsed = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.2, window: 4 });
    collapsed.observe({ model: "m", policy: "p", ratio: 0.2, agreement: 0.1 });
    expect(collapsed.ratioFor("m", "p")).toBeCloseTo(0.3, 9);
  });

  test("rises at once on a drop in agreement, and keeps rising until the target is met again", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.2 });
    run(ratios, curve(0.5, 0.1), 2000, gaussian(3), 0.02);
    const before = ratios.ratioFor("m", "prophet");
    // The workload turns hard: at the current ratio agreement collapses.
    const hard = curve(0.9, 0.2);
    // The first collapsed sample already moves it up (by at least two down steps).
    const after = ratios.observe({ model: "m", policy: "prophet", ratio: before, agreement: hard(before) });
    expect(after).toBeGreaterThanOrEqual(before + 0.02 - 1e-9);
    // It then climbs to the new smallest ratio meeting the target within a few dozen samples, and stays near it.
    const best = smallestMeeting(0.9, 0.2, 0.9);
    const served = run(ratios, hard, 3000, gaussian(4), 0.02);
    expect(served.slice(0, 50).some((ratio) => ratio >= best - 0.05)).toBe(true);
    const settled = served.slice(1000);
    expect(Math.abs([...settled].sort((a, b) => a - b)[settled.length >> 1]! - best)).toBeLessThanOrEqual(0.05);
  });

  test("moves down only after a full window above target + margin, one step at a time", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.3, window: 4, margin: 0.02 });
    const at = (agreement: number, ratio = ratios.ratioFor("m", "p")): AgreementObservation => ({ model: "m", policy: "p", ratio, agreement });
    for (let i = 0; i < 3; i++) expect(ratios.observe(at(1))).toBe(0.3);
    expect(ratios.observe(at(1))).toBeCloseTo(0.29, 9);
    // Inside the hysteresis band (target ≤ mean < target + margin): no move either way.
    for (let i = 0; i < 8; i++) expect(ratios.observe(at(0.91))).toBeCloseTo(0.29, 9);
  });

  test("never leaves [min, max]", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.99, minRatio: 0.1, maxRatio: 0.3, initialRatio: 0.9 });
    expect(ratios.ratioFor("m", "p")).toBe(0.3);
    for (let i = 0; i < 50; i++) expect(ratios.observe({ model: "m", policy: "p", ratio: 0.3, agreement: 0 })).toBe(0.3);
    const easy = new AdaptiveRecomputeRatios({ target: 0.5, minRatio: 0.1, maxRatio: 0.3, initialRatio: 0.12, probeAfter: 1 });
    for (let i = 0; i < 500; i++) easy.observe({ model: "m", policy: "p", ratio: easy.ratioFor("m", "p"), agreement: 1 });
    expect(easy.ratioFor("m", "p")).toBe(0.1);
  });

  test("weighs samples taken at another ratio by what they say about the current one", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.2, window: 4 });
    const sample = (ratio: number, agreement: number): AgreementObservation => ({ model: "m", policy: "p", ratio, agreement });
    // A failure at a lower ratio says nothing about 0.2: dropped.
    expect(ratios.observe(sample(0.1, 0))).toBe(0.2);
    // A success at a higher ratio says nothing either.
    for (let i = 0; i < 8; i++) ratios.observe(sample(0.3, 1));
    expect(ratios.ratioFor("m", "p")).toBe(0.2);
    expect(ratios.cellStats[0]).toMatchObject({ samples: 9, counted: 0 });
    // A failure at a higher ratio: 0.2 cannot do better, so it moves up at once.
    expect(ratios.observe(sample(0.25, 0.2))).toBeCloseTo(0.3, 9);
    // Successes at a lower ratio count towards a move down (the failed 0.2 is the floor: 0.29 is as low as it goes).
    for (let i = 0; i < 4; i++) ratios.observe(sample(0.2, 1));
    expect(ratios.ratioFor("m", "p")).toBeCloseTo(0.29, 9);
    for (let i = 0; i < 40; i++) ratios.observe(sample(0.2, 1));
    expect(ratios.ratioFor("m", "p")).toBeCloseTo(0.21, 9);
  });

  test("keeps one ratio per model and policy", () => {
    const ratios = new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.05, maxRatio: 0.6, initialRatio: 0.2 });
    ratios.observe({ model: "a", policy: "prophet", ratio: 0.2, agreement: 0 });
    // One request that agreed on nothing: the window's mean (with the prior) is 0.8625, 0.0375 short: up by 0.0375.
    expect(ratios.ratioFor("a", "prophet")).toBeCloseTo(0.2375, 9);
    expect(ratios.ratioFor("a", "cachecraft")).toBe(0.2);
    expect(ratios.ratioFor("b", "prophet")).toBe(0.2);
    expect(ratios.cellStats.map((c) => `${c.model}/${c.policy}`).sort()).toEqual(["a/cachecraft", "a/prophet", "b/prophet"]);
  });

  test("refuses settings outside their ranges", () => {
    expect(() => new AdaptiveRecomputeRatios({ target: 0, minRatio: 0, maxRatio: 1, initialRatio: 0.2 })).toThrow(/target/);
    expect(() => new AdaptiveRecomputeRatios({ target: 1.1, minRatio: 0, maxRatio: 1, initialRatio: 0.2 })).toThrow(/target/);
    expect(() => new AdaptiveRecomputeRatios({ target: 0.9, minRatio: 0.5, maxRatio: 0.4, initialRatio: 0.2 })).toThrow(/min/);
  });
});
