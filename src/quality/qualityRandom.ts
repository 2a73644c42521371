/**
 * The quality tasks' random numbers: mulberry32, a 32-bit generator that Python
 * reproduces bit for bit with integer arithmetic (scripts/quality_tasks.py mirrors
 * every function here). Integers in [0, n) are `next() % n`: a tiny modulo bias, but
 * exact in both languages (no floating point anywhere).
 */

/** mulberry32 from a 32-bit seed: each call returns an unsigned 32-bit integer. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1) >>> 0;
    t = ((t + Math.imul(t ^ (t >>> 7), t | 61)) ^ t) >>> 0;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** The seed of example `index` of a set seeded by `seed`. */
export function exampleSeed(seed: number, index: number): number {
  return mulberry32((seed ^ Math.imul(index, 0x9e3779b1)) >>> 0)();
}

/** Draws integers, picks and permutations from one mulberry32 stream. */
export class QualityRandom {
  private readonly next: () => number;

  constructor(seed: number) {
    this.next = mulberry32(seed);
  }

  /** An integer in [0, n). */
  below(n: number): number {
    if (!Number.isSafeInteger(n) || n < 1) throw new RangeError(`below(${n}): n must be a positive integer`);
    return this.next() % n;
  }

  /** An integer in [low, high], both included. */
  between(low: number, high: number): number {
    return low + this.below(high - low + 1);
  }

  /** True with probability percent/100. */
  chance(percent: number): boolean {
    return this.below(100) < percent;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }

  /** A shuffled copy (Fisher–Yates from the end). */
  shuffled<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }
}
