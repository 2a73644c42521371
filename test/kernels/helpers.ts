/** Seeded random inputs for the kernel property tests. */
import type { EncodedContexts } from "../../src/kernels/index.ts";

/** mulberry32: a small, fast, seeded 32-bit PRNG. */
export class Random {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)]!;
  }
  shuffle<T extends { length: number; [i: number]: any }>(items: T): T {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      const t = items[i];
      items[i] = items[j];
      items[j] = t;
    }
    return items;
  }
}

/** Sizes that matter most: 0, 1, 2, small, then larger. */
export function sizeFor(iteration: number, rng: Random, max: number): number {
  const fixed = [0, 1, 2, 3];
  return iteration < fixed.length ? fixed[iteration]! : rng.int(0, rng.next() < 0.8 ? Math.min(max, 24) : max);
}

/**
 * n random contexts over `blockCount` blocks, lengths 0..maxLength, with Zipf-like popularity
 * (low block numbers much more common), so that pairs share many blocks and tie often.
 */
export function randomContexts(rng: Random, n: number, blockCount: number, maxLength: number): EncodedContexts {
  const offsets = new Int32Array(n + 1);
  const flat: number[] = [];
  const seen = new Set<number>();
  for (let i = 0; i < n; i++) {
    const length = Math.min(rng.int(0, maxLength), blockCount);
    seen.clear();
    while (seen.size < length) {
      const b = Math.min(blockCount - 1, Math.floor(blockCount * rng.next() ** 2.5));
      if (!seen.has(b)) {
        seen.add(b);
        flat.push(b);
      }
    }
    offsets[i + 1] = flat.length;
  }
  return { flat: Int32Array.from(flat), offsets, blockCount };
}

/** Random condensed distances for n points; `levels` > 0 quantises them to force ties. */
export function randomCondensed(rng: Random, n: number, levels = 0): Float64Array {
  const d = new Float64Array((n * (n - 1)) / 2);
  for (let t = 0; t < d.length; t++) d[t] = levels > 0 ? rng.int(0, levels) / levels : rng.next() * 10;
  return d;
}

export function permutation(rng: Random, m: number): Int32Array {
  return rng.shuffle(Int32Array.from({ length: m }, (_, i) => i));
}

/** Random f32 scores; `levels` > 0 quantises them to force ties. */
export function randomScores(rng: Random, length: number, levels = 0, allowNegative = false): Float32Array {
  const s = new Float32Array(length);
  for (let t = 0; t < length; t++) {
    let v = levels > 0 ? rng.int(0, levels) / levels : rng.next();
    if (allowNegative && rng.next() < 0.3) v = -v;
    s[t] = v;
  }
  return s;
}

/** Exact equality of two typed arrays, reporting the first difference (bitwise for floats). */
export function firstDifference(a: ArrayLike<number>, b: ArrayLike<number>): string | null {
  if (a.length !== b.length) return `lengths differ: ${a.length} vs ${b.length}`;
  for (let t = 0; t < a.length; t++) {
    if (!Object.is(a[t], b[t])) return `index ${t}: ${a[t]} vs ${b[t]}`;
  }
  return null;
}
