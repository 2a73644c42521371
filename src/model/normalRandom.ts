/**
 * Seeded normal samples that are bit-for-bit the same on every machine: a
 * xoshiro128** generator (32-bit integer operations only) seeded through
 * splitmix32, and the polar form of the Box-Muller transform with a logarithm
 * made of IEEE additions, multiplications and divisions (Math.log, Math.sin and
 * Math.cos may differ by an ulp between C libraries; sqrt is exactly rounded).
 */

/** splitmix32: a well-mixed 32-bit value from a 32-bit state step. */
function splitmix32(state: number): [next: number, output: number] {
  const next = (state + 0x9e3779b9) >>> 0;
  let z = next;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return [next, (z ^ (z >>> 16)) >>> 0];
}

/** FNV-1a over the UTF-8 bytes of a string: a stream label for a tensor name. */
export function hashLabel(label: string): number {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(label)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** Uniform 32-bit integers from xoshiro128**. */
export class Xoshiro128 {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /** Seeds from a non-negative safe integer and an optional stream label. */
  constructor(seed: number, label = "") {
    if (!Number.isSafeInteger(seed) || seed < 0) throw new RangeError(`seed must be a non-negative integer, got ${seed}`);
    let state = (seed >>> 0) ^ Math.imul(Math.floor(seed / 4294967296) >>> 0, 0x9e3779b1);
    state = (state ^ hashLabel(label)) >>> 0;
    const words: number[] = [];
    for (let i = 0; i < 4; i++) {
      const [next, output] = splitmix32(state);
      state = next;
      words.push(output);
    }
    [this.s0, this.s1, this.s2, this.s3] = words as [number, number, number, number];
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

const LN2 = 0.6931471805599453;

/**
 * The natural logarithm of a positive finite number from basic IEEE operations:
 * x = m·2^e with m in [√½, √2), ln m = 2·atanh((m−1)/(m+1)) by its series.
 * Within a few ulps of the exact value, and the same everywhere.
 */
export function portableLog(x: number): number {
  if (!(x > 0) || !Number.isFinite(x)) throw new RangeError(`portableLog needs a positive finite number, got ${x}`);
  let exponent = 0;
  let m = x;
  // Scale into [1, 2) by exact powers of two (multiplications by 2^k are exact).
  while (m >= 2) {
    m *= 0.5;
    exponent++;
  }
  while (m < 1) {
    m *= 2;
    exponent--;
  }
  if (m > Math.SQRT2) {
    m *= 0.5;
    exponent++;
  }
  const f = (m - 1) / (m + 1);
  const f2 = f * f;
  // |f| <= 0.1716, f² <= 0.0295: 12 terms reach below 1e-18.
  let term = f;
  let sum = 0;
  for (let k = 1; k <= 25; k += 2) {
    sum += term / k;
    term *= f2;
  }
  return 2 * sum + exponent * LN2;
}

/** Standard normal samples (mean 0, variance 1) from one seeded stream. */
export class NormalRandom {
  private readonly uniform: Xoshiro128;
  private spare: number | null = null;

  constructor(seed: number, label = "") {
    this.uniform = new Xoshiro128(seed, label);
  }

  /** A uniform number in [-1, 1) with 2^-31 resolution. */
  private signedUniform(): number {
    return this.uniform.nextUint32() / 2147483648 - 1;
  }

  /** Marsaglia's polar method: two normals per accepted point of the unit disc. */
  next(): number {
    if (this.spare !== null) {
      const value = this.spare;
      this.spare = null;
      return value;
    }
    for (;;) {
      const u = this.signedUniform();
      const v = this.signedUniform();
      const s = u * u + v * v;
      if (s >= 1 || s === 0) continue;
      const scale = Math.sqrt((-2 * portableLog(s)) / s);
      this.spare = v * scale;
      return u * scale;
    }
  }
}
