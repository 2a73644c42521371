import { describe, expect, test } from "bun:test";
import { bfloat16BitsToFloat32, float16BitsToFloat32, float32ToBfloat16Bits, float32ToFloat16Bits } from "../../src/model/halfFloats.ts";
import { Xoshiro128 } from "../../src/model/normalRandom.ts";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function fromBits(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

describe("f16", () => {
  test("known values, rounding to nearest even, overflow and subnormals", () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3c00],
      [-2, 0xc000],
      [0.5, 0x3800],
      [65504, 0x7bff], // largest finite
      [65519, 0x7bff], // rounds down
      [65520, 0x7c00], // the tie rounds to even: Infinity
      [1e9, 0x7c00],
      [-Infinity, 0xfc00],
      [2 ** -14, 0x0400], // smallest normal
      [2 ** -24, 0x0001], // smallest subnormal
      [2 ** -25, 0x0000], // tie between 0 and 2^-24: even is 0
      [3 * 2 ** -25, 0x0002], // tie between 1 and 2 (×2^-24): even is 2
      [2 ** -25 * 1.0001, 0x0001],
      [1 + 2 ** -11, 0x3c00], // tie: even mantissa
      [1 + 3 * 2 ** -11, 0x3c02], // tie: rounds up to even
      [2 ** -14 - 2 ** -24, 0x03ff], // largest subnormal
      [2 ** -14 - 2 ** -26, 0x0400], // rounds up across into the normals
    ];
    for (const [value, bits] of cases) expect([value, float32ToFloat16Bits(value)]).toEqual([value, bits]);
    expect(Number.isNaN(float16BitsToFloat32(float32ToFloat16Bits(NaN)))).toBe(true);
  });

  test("every f16 value survives f16 → f32 → f16", () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const value = float16BitsToFloat32(bits);
      if (Number.isNaN(value)) continue;
      if (float32ToFloat16Bits(value) !== bits) throw new Error(`bits ${bits.toString(16)}: ${value} → ${float32ToFloat16Bits(value).toString(16)}`);
    }
  });

  test("agrees with the runtime's Math.f16round on random float32 values", () => {
    const f16round = (Math as unknown as { f16round?: (x: number) => number }).f16round;
    if (typeof f16round !== "function") return; // older runtimes: the tests above suffice
    const random = new Xoshiro128(7);
    for (let i = 0; i < 200_000; i++) {
      // Random bit patterns over the whole float32 range, and a dense band around f16's range.
      const value = i % 2 === 0 ? fromBits(random.nextUint32()) : fromBits((0x33000000 + (random.nextUint32() % 0x0d000000)) | (random.nextUint32() & 0x80000000));
      if (Number.isNaN(value)) continue;
      const expected = f16round(value);
      const got = float16BitsToFloat32(float32ToFloat16Bits(value));
      if (!Object.is(got, expected)) throw new Error(`${value}: got ${got}, expected ${expected}`);
    }
  });
});

describe("bf16", () => {
  test("known values and rounding to nearest even", () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3f80],
      [-2, 0xc000],
      [Infinity, 0x7f80],
      [fromBits(0x3f808000), 0x3f80], // tie: even stays
      [fromBits(0x3f818000), 0x3f82], // tie: odd rounds up
      [fromBits(0x3f808001), 0x3f81],
      [fromBits(0x7f7fffff), 0x7f80], // largest float32 rounds to Infinity
    ];
    for (const [value, bits] of cases) expect([value, float32ToBfloat16Bits(value)]).toEqual([value, bits]);
    expect(Number.isNaN(bfloat16BitsToFloat32(float32ToBfloat16Bits(NaN)))).toBe(true);
  });

  test("every bf16 value survives bf16 → f32 → bf16, and rounding is to the nearest", () => {
    for (let bits = 0; bits < 0x10000; bits++) {
      const value = bfloat16BitsToFloat32(bits);
      if (Number.isNaN(value)) continue;
      if (float32ToBfloat16Bits(value) !== bits) throw new Error(`bits ${bits.toString(16)}`);
    }
    const random = new Xoshiro128(3);
    for (let i = 0; i < 100_000; i++) {
      const value = fromBits(random.nextUint32() & 0x7effffff); // finite, positive
      const rounded = bfloat16BitsToFloat32(float32ToBfloat16Bits(value));
      const down = bfloat16BitsToFloat32(u32ToBf16(value));
      const up = bfloat16BitsToFloat32(u32ToBf16(value) + 1);
      expect(rounded === down || rounded === up).toBe(true);
      expect(Math.abs(rounded - value)).toBeLessThanOrEqual(Math.min(value - down, up - value));
    }
  });
});

function u32ToBf16(value: number): number {
  f32[0] = value;
  return u32[0]! >>> 16;
}
