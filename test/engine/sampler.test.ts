import { describe, expect, test } from "bun:test";
import { NormalRandom } from "../../src/model/normalRandom.ts";
import {
  Sampler,
  SamplingError,
  type SamplingParams,
  argmax,
  checkSamplingParams,
  samplingDistribution,
  tokenLogprobs,
} from "../../src/engine/sampler.ts";

function normalLogits(size: number, std: number, seed: number): Float32Array {
  const random = new NormalRandom(seed, "logits");
  return Float32Array.from({ length: size }, () => std * random.next());
}

/** The distribution by the book: float64 softmax(l / T), full sort, min-p cut, top-k cut, top-p cut. */
function referenceDistribution(logits: Float32Array, { temperature, topK, topP, minP = 0 }: SamplingParams): Map<number, number> {
  const ids = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]! || a - b);
  const max = logits[ids[0]!]!;
  // Weights relative to the most likely token's: min-p keeps those of at least minP.
  let kept = ids.map((id) => ({ id, w: Math.exp((logits[id]! - max) / temperature) })).filter((t) => t.w > 0 && t.w >= minP);
  if (topK > 0) kept = kept.slice(0, topK);
  let total = kept.reduce((sum, t) => sum + t.w, 0);
  if (topP < 1) {
    let sum = 0;
    const cut = kept.findIndex((t) => (sum += t.w) >= topP * total);
    kept = kept.slice(0, cut === -1 ? kept.length : cut + 1);
    total = kept.reduce((s, t) => s + t.w, 0);
  }
  return new Map(kept.map((t) => [t.id, t.w / total]));
}

/** Pearson's chi-square of observed counts against expected probabilities. */
function chiSquare(counts: Map<number, number>, expected: Map<number, number>, draws: number): number {
  let sum = 0;
  for (const [id, p] of expected) {
    const e = p * draws;
    sum += ((counts.get(id) ?? 0) - e) ** 2 / e;
  }
  return sum;
}

function draw(sampler: Sampler, logits: Float32Array, draws: number): Map<number, number> {
  const counts = new Map<number, number>();
  for (let i = 0; i < draws; i++) {
    const id = sampler.sample(logits);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

const params = (overrides: Partial<SamplingParams>): SamplingParams => ({ temperature: 1, topP: 1, topK: 0, seed: 1, ...overrides });

describe("greedy", () => {
  test("temperature 0 takes the largest logit, the lowest id among equals", () => {
    const sampler = new Sampler(params({ temperature: 0, topP: 0.5, topK: 3 }));
    expect(sampler.greedy).toBe(true);
    expect(sampler.sample(new Float32Array([0.5, 2, -1, 2, 1.9]))).toBe(1);
    expect(sampler.sample(new Float32Array([-Infinity, NaN, -3, -3]))).toBe(2);
    expect(sampler.sample(new Float32Array([7]))).toBe(0);
  });

  test("top_k 1 is greedy too", () => {
    expect(new Sampler(params({ topK: 1 })).sample(new Float32Array([1, 3, 3, 2]))).toBe(1);
  });

  test("argmax errors on empty or impossible logits", () => {
    expect(() => argmax(new Float32Array(0))).toThrow(SamplingError);
    expect(() => argmax(new Float32Array([-Infinity, NaN]))).toThrow("every logit is -Infinity or NaN");
    expect(() => new Sampler(params({})).sample(new Float32Array([NaN, NaN]))).toThrow(SamplingError);
  });

  test("a +Infinity logit is drawn for sure", () => {
    expect(new Sampler(params({})).sample(new Float32Array([1, Infinity, 2]))).toBe(1);
  });
});

describe("parameters", () => {
  test("out-of-range values are errors naming the field", () => {
    expect(() => checkSamplingParams(params({ temperature: -0.1 }))).toThrow("temperature");
    expect(() => checkSamplingParams(params({ temperature: Infinity }))).toThrow("temperature");
    expect(() => checkSamplingParams(params({ topP: 0 }))).toThrow("top_p");
    expect(() => checkSamplingParams(params({ topP: 1.01 }))).toThrow("top_p");
    expect(() => checkSamplingParams(params({ topK: -1 }))).toThrow("top_k");
    expect(() => checkSamplingParams(params({ topK: 1.5 }))).toThrow("top_k");
    expect(() => new Sampler(params({ seed: 0.5 }))).toThrow("seed");
    expect(() => checkSamplingParams(params({ seed: -7 }))).not.toThrow();
  });
});

describe("seeded draws", () => {
  const logits = normalLogits(1000, 2, 3);

  test("the same seed gives the same tokens; another seed others", () => {
    const run = (seed: number) => {
      const sampler = new Sampler(params({ seed, temperature: 1.2 }));
      return Array.from({ length: 200 }, () => sampler.sample(logits));
    };
    expect(run(42)).toEqual(run(42));
    expect(run(42)).not.toEqual(run(43));
    expect(run(-42)).not.toEqual(run(42));
    expect(run(-42)).toEqual(run(-42));
  });

  test("without a seed, a random one that can be logged and replayed", () => {
    const first = new Sampler({ temperature: 1, topP: 1, topK: 0 });
    const second = new Sampler({ temperature: 1, topP: 1, topK: 0 });
    expect(Number.isSafeInteger(first.seed) && first.seed >= 0).toBe(true);
    expect(first.seed).not.toBe(second.seed);
    const replay = new Sampler({ temperature: 1, topP: 1, topK: 0, seed: first.seed });
    const a = Array.from({ length: 50 }, () => first.sample(logits));
    expect(Array.from({ length: 50 }, () => replay.sample(logits))).toEqual(a);
  });
});

describe("sampling frequencies follow the distribution", () => {
  // Critical chi-square values at p = 0.001 would fail a correct sampler once in a
  // thousand seeds; the seeds are fixed, so these tests are deterministic.
  test("softmax(logits / T) over a small vocabulary", () => {
    const logits = new Float32Array([2, 1, 0.5, 0, -1, -2, 1.5, 0.25]);
    for (const temperature of [0.5, 1, 2]) {
      const p = params({ temperature, seed: 7 });
      const expected = referenceDistribution(logits, p);
      const draws = 40000;
      const counts = draw(new Sampler(p), logits, draws);
      expect(chiSquare(counts, expected, draws)).toBeLessThan(24.3); // df 7, p = 0.001
      // The distribution it reports is the same.
      for (const { id, probability } of samplingDistribution(logits, p)) expect(probability).toBeCloseTo(expected.get(id)!, 12);
    }
  });

  test("top-k: exactly the k largest logits, renormalised", () => {
    const logits = normalLogits(500, 1, 11);
    const p = params({ topK: 6, temperature: 0.8, seed: 3 });
    const expected = referenceDistribution(logits, p);
    expect(expected.size).toBe(6);
    const draws = 30000;
    const counts = draw(new Sampler(p), logits, draws);
    expect(new Set(counts.keys())).toEqual(new Set(expected.keys()));
    expect(chiSquare(counts, expected, draws)).toBeLessThan(20.5); // df 5
  });

  test("top-p: the fewest most likely tokens reaching p", () => {
    // Probabilities 0.4, 0.3, 0.2, 0.1 at temperature 1.
    const logits = new Float32Array([0.1, 0.2, 0.3, 0.4].map(Math.log).reverse());
    const support = (topP: number) => samplingDistribution(logits, params({ topP })).map((t) => t.id);
    expect(support(0.35)).toEqual([0]);
    expect(support(0.65)).toEqual([0, 1]);
    expect(support(0.85)).toEqual([0, 1, 2]);
    expect(support(0.95)).toEqual([0, 1, 2, 3]);
    const draws = 20000;
    const p = params({ topP: 0.85, seed: 9 });
    const counts = draw(new Sampler(p), logits, draws);
    expect([...counts.keys()].sort()).toEqual([0, 1, 2]);
    expect(chiSquare(counts, referenceDistribution(logits, p), draws)).toBeLessThan(13.8); // df 2
  });

  test("min-p: tokens less likely than min_p × the most likely are never drawn, with or without top-k and top-p", () => {
    // Probabilities 0.4, 0.3, 0.2, 0.1 at temperature 1: min_p 0.45 keeps those of at least 0.18.
    const small = new Float32Array([0.1, 0.2, 0.3, 0.4].map(Math.log).reverse());
    expect(samplingDistribution(small, params({ minP: 0.45 })).map((t) => t.id)).toEqual([0, 1, 2]);
    expect(samplingDistribution(small, params({ minP: 1 })).map((t) => t.id)).toEqual([0]);
    expect(samplingDistribution(small, params({ minP: 0 })).map((t) => t.id)).toEqual([0, 1, 2, 3]);
    const logits = normalLogits(2000, 2, 13);
    for (const extra of [{}, { topK: 40 }, { topP: 0.9 }, { topK: 300, topP: 0.8, temperature: 1.5 }]) {
      const p = params({ minP: 0.05, seed: 21, ...extra });
      const expected = referenceDistribution(logits, p);
      const got = samplingDistribution(logits, p);
      expect(got.map((t) => t.id)).toEqual([...expected.keys()]);
      for (const { id, probability } of got) expect(probability).toBeCloseTo(expected.get(id)!, 10);
    }
    const p = params({ minP: 0.1, temperature: 0.9, seed: 5 });
    const expected = referenceDistribution(logits, p);
    const draws = 30000;
    const counts = draw(new Sampler(p), logits, draws);
    expect([...counts.keys()].every((id) => expected.has(id))).toBe(true);
    expect(chiSquare(counts, expected, draws)).toBeLessThan(expected.size * 3 + 30);
    expect(() => new Sampler(params({ minP: 1.5 }))).toThrow(/min_p/);
  });

  test("top-k then top-p on a large vocabulary: the same support as sorting everything", () => {
    const logits = normalLogits(3000, 2.5, 5);
    const p = params({ topK: 300, topP: 0.7, temperature: 0.9, seed: 4 });
    const expected = referenceDistribution(logits, p);
    const draws = 30000;
    const counts = draw(new Sampler(p), logits, draws);
    for (const id of counts.keys()) expect(expected.has(id)).toBe(true);
    // Pool the rare tokens so every cell expects at least 5 draws.
    const pooled = new Map<number, number>();
    const pooledCounts = new Map<number, number>();
    for (const [id, probability] of expected) {
      const cell = probability * draws >= 5 ? id : -1;
      pooled.set(cell, (pooled.get(cell) ?? 0) + probability);
      pooledCounts.set(cell, (pooledCounts.get(cell) ?? 0) + (counts.get(id) ?? 0));
    }
    const df = pooled.size - 1;
    // Wilson-Hilferty approximation of the chi-square p = 0.001 point.
    const critical = df * (1 - 2 / (9 * df) + 3.09 * Math.sqrt(2 / (9 * df))) ** 3;
    expect(chiSquare(pooledCounts, pooled, draws)).toBeLessThan(critical);
  });
});

describe("the support matches a full sort exactly", () => {
  test("random logits, ties and parameters", () => {
    for (let round = 0; round < 300; round++) {
      const size = [5, 40, 300, 3000][round % 4]!;
      const logits = normalLogits(size, 1 + (round % 3), 100 + round);
      // Quantize some so that equal logits occur (lower id first among them).
      if (round % 2 === 0) for (let i = 0; i < size; i++) logits[i] = Math.round(logits[i]! * 2) / 2;
      if (round % 5 === 0) logits[round % size] = -Infinity;
      const p = params({
        temperature: [0.3, 0.7, 1, 1.7][round % 4]!,
        topK: [0, 1, 3, 50, size + 5][round % 5]!,
        topP: [1, 0.95, 0.5, 0.9, 0.2, 0.99][round % 6]!,
      });
      const expected = referenceDistribution(logits, p);
      const got = samplingDistribution(logits, p);
      expect(got.map((t) => t.id)).toEqual([...expected.keys()]);
      for (const { id, probability } of got) expect(probability).toBeCloseTo(expected.get(id)!, 9);
    }
  });

  test("equal logits: top-k keeps the lowest ids", () => {
    const logits = new Float32Array(100).fill(1);
    expect(samplingDistribution(logits, params({ topK: 3 })).map((t) => t.id)).toEqual([0, 1, 2]);
    expect(samplingDistribution(logits, params({ topP: 0.05 })).map((t) => t.id)).toEqual([0, 1, 2, 3, 4]);
    const counts = draw(new Sampler(params({ topK: 3 })), logits, 3000);
    expect([...counts.keys()].sort()).toEqual([0, 1, 2]);
  });
});

describe("speed on a 152k vocabulary", () => {
  test("a draw takes a few milliseconds at most", () => {
    const logits = normalLogits(151936, 3, 8);
    const flat = new Float32Array(151936).fill(0.5);
    const cases: [string, Float32Array, SamplingParams][] = [
      ["T=1 top_p=0.9", logits, params({ topP: 0.9 })],
      ["T=0.7 top_k=50", logits, params({ temperature: 0.7, topK: 50 })],
      ["T=0.7 top_k=50 top_p=0.8", logits, params({ temperature: 0.7, topK: 50, topP: 0.8 })],
      ["T=1.5 no cut", logits, params({ temperature: 1.5 })],
      ["T=1 top_p=0.95, flat", flat, params({ topP: 0.95 })],
      ["T=1 top_k=20000", logits, params({ topK: 20000 })],
    ];
    for (const [name, row, p] of cases) {
      const sampler = new Sampler(p);
      sampler.sample(row);
      const runs = 20;
      const start = performance.now();
      for (let i = 0; i < runs; i++) sampler.sample(row);
      const ms = (performance.now() - start) / runs;
      console.log(`sample ${name}: ${ms.toFixed(2)} ms`);
      expect(ms).toBeLessThan(50);
    }
  });
});

describe("tokenLogprobs", () => {
  test("log-softmax of the raw logits in float64, top sorted most likely first", () => {
    const logits = new Float32Array([1, 3, 3, -Infinity, 0.5, NaN]);
    const result = tokenLogprobs(logits, 4, 3);
    const logTotal = Math.log(Math.exp(1) + 2 * Math.exp(3) + Math.exp(0.5));
    expect(result.logprob).toBeCloseTo(0.5 - logTotal, 14);
    expect(result.top.map((t) => t.id)).toEqual([1, 2, 0]);
    expect(result.top[0]!.logprob).toBeCloseTo(3 - logTotal, 14);
    expect(result.top[2]!.logprob).toBeCloseTo(1 - logTotal, 14);
    expect(tokenLogprobs(logits, 3, 0)).toEqual({ logprob: -Infinity, top: [] });
    expect(tokenLogprobs(logits, 1, 10).top.map((t) => t.id)).toEqual([1, 2, 0, 4, 3]);
  });

  test("probabilities sum to one and top agrees with a full sort on a large vocabulary", () => {
    const logits = normalLogits(50000, 4, 2);
    let max = -Infinity;
    for (const value of logits) max = Math.max(max, value);
    let sum = 0;
    for (const value of logits) sum += Math.exp(value - max);
    const logTotal = max + Math.log(sum);
    for (const id of [0, 7, 4999, 49999]) expect(tokenLogprobs(logits, id, 0).logprob).toBeCloseTo(logits[id]! - logTotal, 12);
    const top = tokenLogprobs(logits, 7, 20).top;
    const sorted = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]! || a - b).slice(0, 20);
    expect(top.map((t) => t.id)).toEqual(sorted);
    for (const { id, logprob } of top) expect(logprob).toBeCloseTo(logits[id]! - logTotal, 12);
  });

  test("bad arguments", () => {
    expect(() => tokenLogprobs(new Float32Array(3), 3, 1)).toThrow(SamplingError);
    expect(() => tokenLogprobs(new Float32Array(3), -1, 1)).toThrow(SamplingError);
    expect(() => tokenLogprobs(new Float32Array(3), 0, -1)).toThrow(SamplingError);
  });
});
