/**
 * Conversions between float32 and the 16-bit float formats of model checkpoints:
 * IEEE half (f16) and bfloat16 (bf16), both rounding to nearest, ties to even,
 * from the exact float32 bits (so every platform gives the same bits).
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The f16 bits of a number, first rounded to float32 (overflow → ±Infinity, NaN stays NaN). */
export function float32ToFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  const mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa !== 0 ? 0x200 | (mantissa >>> 13) : 0);
  const halfExponent = exponent - 127 + 15;
  if (halfExponent >= 0x1f) return sign | 0x7c00;
  if (halfExponent <= 0) {
    // A subnormal half: m × 2^-24 with m = (1.mantissa × 2^23) >> (126 − exponent), rounded.
    const shift = 126 - exponent;
    if (shift > 24) return sign;
    const full = mantissa | 0x800000;
    let m = full >>> shift;
    const rest = full & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rest > half || (rest === half && (m & 1) === 1)) m++;
    return sign | m;
  }
  let bits = (halfExponent << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (bits & 1) === 1)) bits++; // a carry may reach Infinity: correct
  return sign | bits;
}

/** The float32 value of f16 bits (exact). */
export function float16BitsToFloat32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mantissa) * 2 ** (exponent - 25);
}

/** The bf16 bits of a number, first rounded to float32 (NaN stays a quiet NaN). */
export function float32ToBfloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The float32 value of bf16 bits (exact). */
export function bfloat16BitsToFloat32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}
