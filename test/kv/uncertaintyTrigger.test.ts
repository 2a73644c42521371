import { describe, expect, test } from "bun:test";
import {
  calibrateThresholds,
  DEFAULT_ENTROPY_THRESHOLD,
  DEFAULT_TRIGGER_WINDOW,
  DEFAULT_VARENTROPY_THRESHOLD,
  tokenUncertainty,
  UncertaintyTrigger,
  windowedMeans,
} from "../../src/kv/uncertaintyTrigger.ts";
import { Random } from "../kernels/helpers.ts";

/** Logits with the given probabilities (log p). */
const logitsOf = (probs: number[]) => Float32Array.from(probs, Math.log);

/** Uniform over `vocab` tokens: H = ln(vocab), varentropy 0. */
const uniform = (vocab: number) => new Float32Array(vocab);

/** Nearly certain: one token far ahead of the rest. */
function peaked(vocab: number): Float32Array {
  const l = new Float32Array(vocab);
  l[3] = 30;
  return l;
}

/** p = 0.9 on one token, 0.1 spread over the rest: low entropy (~1.4 nats), high varentropy (~15 nats²). */
function bimodal(vocab: number): Float32Array {
  const l = new Float32Array(vocab).fill(Math.log(0.1 / (vocab - 1)));
  l[0] = Math.log(0.9);
  return l;
}

describe("tokenUncertainty", () => {
  test("known distributions", () => {
    const u = tokenUncertainty(uniform(1000));
    expect(u.entropy).toBeCloseTo(Math.log(1000), 9);
    expect(u.varentropy).toBeCloseTo(0, 9);
    const p = tokenUncertainty(peaked(50_000));
    expect(p.entropy).toBeLessThan(1e-6);
    expect(p.varentropy).toBeLessThan(1e-4);
    // p = (1/2, 1/4, 1/4): H = 1.5 ln 2, surprisal deviations ±0.5 ln 2.
    const q = tokenUncertainty(logitsOf([0.5, 0.25, 0.25]));
    expect(q.entropy).toBeCloseTo(1.5 * Math.LN2, 6);
    expect(q.varentropy).toBeCloseTo(0.25 * Math.LN2 * Math.LN2, 6);
  });

  test("matches the definition on random logits; shift invariant; -Infinity is a masked token", () => {
    const rng = new Random(2);
    for (let trial = 0; trial < 20; trial++) {
      const n = rng.int(1, 300);
      const logits = Float64Array.from({ length: n }, () => (rng.next() - 0.5) * 20);
      const z = logits.reduce((s, x) => s + Math.exp(x), 0);
      const p = Array.from(logits, (x) => Math.exp(x) / z);
      const h = -p.reduce((s, pi) => s + (pi > 0 ? pi * Math.log(pi) : 0), 0);
      const v = p.reduce((s, pi) => s + (pi > 0 ? pi * (Math.log(pi) + h) ** 2 : 0), 0);
      const got = tokenUncertainty(logits);
      expect(got.entropy).toBeCloseTo(h, 9);
      expect(got.varentropy).toBeCloseTo(v, 8);
      const shifted = tokenUncertainty(logits.map((x) => x + 1000));
      expect(shifted.entropy).toBeCloseTo(h, 9);
    }
    const masked = tokenUncertainty([0, 0, -Infinity, 0, -Infinity]);
    expect(masked.entropy).toBeCloseTo(Math.log(3), 12);
    expect(masked.varentropy).toBeCloseTo(0, 12);
    // Temperature flattens.
    expect(tokenUncertainty([0, 1, 2], 100).entropy).toBeGreaterThan(tokenUncertainty([0, 1, 2]).entropy);
    expect(() => tokenUncertainty([0, NaN])).toThrow(RangeError);
    expect(() => tokenUncertainty([-Infinity])).toThrow(RangeError);
    expect(() => tokenUncertainty([0], 0)).toThrow(RangeError);
  });
});

describe("UncertaintyTrigger", () => {
  test("documented defaults", () => {
    const t = new UncertaintyTrigger();
    expect(t.entropyThreshold).toBe(DEFAULT_ENTROPY_THRESHOLD);
    expect(t.varentropyThreshold).toBe(DEFAULT_VARENTROPY_THRESHOLD);
    expect(t.windowSteps).toBe(DEFAULT_TRIGGER_WINDOW);
    expect(t.minSteps).toBe(DEFAULT_TRIGGER_WINDOW);
  });

  test("stays quiet on confident steps, fires on a window of high-entropy steps", () => {
    const t = new UncertaintyTrigger({ windowSteps: 8 });
    for (let i = 0; i < 20; i++) {
      t.observeLogits(peaked(5000));
      expect(t.shouldReconstruct()).toBe(false);
    }
    // Uniform over 5000 tokens: ln 5000 = 8.5 nats per step. The window mean crosses 3 nats
    // after 3 such steps among 8.
    const fired: boolean[] = [];
    for (let i = 0; i < 4; i++) {
      t.observeLogits(uniform(5000));
      fired.push(t.shouldReconstruct());
    }
    expect(fired).toEqual([false, false, true, true]);
    expect(t.meanEntropy).toBeCloseTo((4 * Math.log(5000)) / 8, 5);
    // Confident steps slide the uncertain ones out of the window.
    for (let i = 0; i < 6; i++) t.observeLogits(peaked(5000));
    expect(t.shouldReconstruct()).toBe(false);
  });

  test("fires on high varentropy alone", () => {
    const step = tokenUncertainty(bimodal(50_000));
    expect(step.entropy).toBeLessThan(DEFAULT_ENTROPY_THRESHOLD);
    expect(step.varentropy).toBeGreaterThan(DEFAULT_VARENTROPY_THRESHOLD);
    const t = new UncertaintyTrigger({ windowSteps: 4 });
    for (let i = 0; i < 4; i++) t.observeLogits(bimodal(50_000));
    expect(t.meanEntropy).toBeLessThan(t.entropyThreshold);
    expect(t.shouldReconstruct()).toBe(true);
  });

  test("needs minSteps observations; reset forgets", () => {
    const t = new UncertaintyTrigger({ windowSteps: 4, minSteps: 2, entropyThreshold: 1, varentropyThreshold: 100 });
    t.observe({ entropy: 5, varentropy: 0 });
    expect(t.steps).toBe(1);
    expect(t.shouldReconstruct()).toBe(false);
    t.observe({ entropy: 5, varentropy: 0 });
    expect(t.shouldReconstruct()).toBe(true);
    t.reset();
    expect(t.steps).toBe(0);
    expect(t.meanEntropy).toBe(0);
    expect(t.shouldReconstruct()).toBe(false);
    expect(() => new UncertaintyTrigger({ windowSteps: 4, minSteps: 5 })).toThrow(RangeError);
    expect(() => t.observe({ entropy: NaN, varentropy: 0 })).toThrow(RangeError);
  });

  test("calibrateThresholds: the 99th percentile by default (as the paper calibrates offline)", () => {
    const samples = Array.from({ length: 101 }, (_, i) => ({ entropy: i, varentropy: 2 * i }));
    expect(calibrateThresholds(samples)).toEqual({ entropyThreshold: 99, varentropyThreshold: 198 });
    expect(calibrateThresholds(samples, 0.5)).toEqual({ entropyThreshold: 50, varentropyThreshold: 100 });
    expect(calibrateThresholds([{ entropy: 1, varentropy: 2 }])).toEqual({ entropyThreshold: 1, varentropyThreshold: 2 });
    expect(() => calibrateThresholds([])).toThrow(RangeError);
  });

  test("windowedMeans: one mean per full window, the values a full trigger window compares", () => {
    const steps = [1, 5, 2, 8, 3, 0.5].map((e) => ({ entropy: e, varentropy: e * e }));
    const means = windowedMeans(steps, 3);
    expect(means.map((m) => m.entropy)).toEqual([8 / 3, 5, 13 / 3, 11.5 / 3]);
    const trigger = new UncertaintyTrigger({ windowSteps: 3 });
    steps.forEach((step, i) => {
      trigger.observe(step);
      if (i >= 2) {
        expect(trigger.meanEntropy).toBeCloseTo(means[i - 2]!.entropy, 12);
        expect(trigger.meanVarentropy).toBeCloseTo(means[i - 2]!.varentropy, 12);
      }
    });
    expect(windowedMeans(steps, 1)).toEqual(steps);
    expect(windowedMeans(steps, 7)).toEqual([]);
    expect(() => windowedMeans(steps, 0)).toThrow(RangeError);
  });
});
