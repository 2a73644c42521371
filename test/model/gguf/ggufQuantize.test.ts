import { describe, expect, test } from "bun:test";
import { NormalRandom } from "../../../src/model/normalRandom.ts";
import { float32ToFloat16Bits } from "../../../src/model/halfFloats.ts";
import { dequantizeValues, quantizeValues } from "../../../src/model/gguf/ggufQuantize.ts";
import { GGML_TYPE, type GgmlTypeName, ggmlTensorBytes } from "../../../src/model/gguf/ggufTypes.ts";

function randomValues(count: number, seed: number, std = 0.05): Float32Array {
  const random = new NormalRandom(seed, "quantize");
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = std * random.next();
  return values;
}

function relativeRmsError(original: Float32Array, back: Float32Array): number {
  let error = 0;
  let sum = 0;
  for (let i = 0; i < original.length; i++) {
    error += (back[i]! - original[i]!) ** 2;
    sum += original[i]! ** 2;
  }
  return Math.sqrt(error / sum);
}

/**
 * Measured on 262,144 N(0, 0.05²) values (the f16 block scales lose precision when weights are
 * far smaller, std ≲ 1e-3, as in ggml itself): F16 0.021%, BF16 0.17%, Q8_0 0.54%, Q6_K 1.73%, Q5_K 3.6%,
 * Q5_1 3.8%, Q5_0 4.3%, Q4_K 7.2%, Q4_0 8.6%. */
const BOUNDS: [GgmlTypeName, number][] = [
  ["F32", 0],
  ["F16", 0.0005],
  ["BF16", 0.003],
  ["Q8_0", 0.007],
  ["Q6_K", 0.021],
  ["Q5_K", 0.04],
  ["Q5_1", 0.042],
  ["Q5_0", 0.047],
  ["Q4_K", 0.08],
  ["Q4_0", 0.1],
];

describe("quantize → dequantize", () => {
  for (const [name, bound] of BOUNDS) {
    test(`${name}: relative RMS error under ${(bound * 100).toFixed(2)}%, sizes as the type says`, () => {
      for (const [seed, std] of [[1, 0.05], [2, 3], [3, 0.02]] as const) {
        const values = randomValues(256 * 256, seed, std);
        const bytes = quantizeValues(GGML_TYPE[name], values);
        expect(bytes.length).toBe(ggmlTensorBytes(GGML_TYPE[name], [256, 256]));
        const back = dequantizeValues(GGML_TYPE[name], bytes, values.length);
        expect(relativeRmsError(values, back)).toBeLessThanOrEqual(bound);
      }
    });
  }

  test("zeros, constants, outliers and one-signed blocks stay finite and close", () => {
    const values = new Float32Array(1024);
    values.fill(0.25, 256, 512); // a constant positive block
    for (let i = 512; i < 768; i++) values[i] = -0.01 * (i - 511); // all negative
    values.set(randomValues(256, 9), 768);
    values[800] = 40; // an outlier
    for (const type of [GGML_TYPE.Q8_0, GGML_TYPE.Q4_0, GGML_TYPE.Q5_0, GGML_TYPE.Q5_1, GGML_TYPE.Q4_K, GGML_TYPE.Q5_K, GGML_TYPE.Q6_K]) {
      const back = dequantizeValues(type, quantizeValues(type, values), values.length);
      for (let i = 0; i < 256; i++) expect(Math.abs(back[i]!)).toBe(0);
      for (const value of back) expect(Number.isFinite(value)).toBe(true);
      expect(Math.abs(back[300]! - 0.25)).toBeLessThan(0.02);
      expect(Math.abs(back[800]! - 40)).toBeLessThan(2);
    }
  });

  test("a count that is not whole blocks is refused, naming the type", () => {
    expect(() => quantizeValues(GGML_TYPE.Q4_K, new Float32Array(255))).toThrow("Q4_K needs a multiple of 256 values, got 255");
    expect(() => dequantizeValues(GGML_TYPE.Q8_0, new Uint8Array(33), 32)).toThrow("Q8_0: 32 values take 34 bytes, 33 given");
  });
});

const half = (value: number) => float32ToFloat16Bits(value);

describe("block layouts on hand-built blocks", () => {
  test("Q8_0: f16 d then 32 int8", () => {
    const block = new Uint8Array(34);
    new DataView(block.buffer).setUint16(0, half(0.5), true);
    for (let i = 0; i < 32; i++) block[2 + i] = (i * 8 - 124) & 0xff;
    const values = dequantizeValues(GGML_TYPE.Q8_0, block, 32);
    for (let i = 0; i < 32; i++) expect(values[i]).toBe(0.5 * (i * 8 - 124));
    const requantized = dequantizeValues(GGML_TYPE.Q8_0, quantizeValues(GGML_TYPE.Q8_0, values), 32);
    for (let i = 0; i < 32; i++) expect(Math.abs(requantized[i]! - values[i]!)).toBeLessThan(0.3);
  });

  test("Q4_0: f16 d, byte j = value j (low nibble) and value j + 16 (high nibble), minus 8", () => {
    const block = new Uint8Array(18);
    new DataView(block.buffer).setUint16(0, half(2), true);
    for (let j = 0; j < 16; j++) block[2 + j] = j | ((15 - j) << 4);
    const values = dequantizeValues(GGML_TYPE.Q4_0, block, 32);
    for (let j = 0; j < 16; j++) {
      expect(values[j]).toBe(2 * (j - 8));
      expect(values[j + 16]).toBe(2 * (15 - j - 8));
    }
    expect(quantizeValues(GGML_TYPE.Q4_0, values)).toEqual(block); // exactly representable: same bytes
  });

  test("Q4_K: d, dmin, packed 6-bit scales and mins, 4 chunks of 64 nibbles", () => {
    const scales = [1, 2, 3, 4, 40, 50, 60, 63];
    const mins = [5, 6, 7, 8, 33, 47, 16, 31];
    const block = new Uint8Array(144);
    const view = new DataView(block.buffer);
    view.setUint16(0, half(0.25), true);
    view.setUint16(2, half(0.125), true);
    // The packing written out bit by bit from the format's description.
    for (let j = 0; j < 4; j++) {
      block[4 + j] = scales[j]! | ((scales[j + 4]! >> 4) << 6);
      block[8 + j] = mins[j]! | ((mins[j + 4]! >> 4) << 6);
      block[12 + j] = (scales[j + 4]! & 15) | ((mins[j + 4]! & 15) << 4);
    }
    for (let i = 0; i < 128; i++) block[16 + i] = (i * 7) & 0xff;
    const values = dequantizeValues(GGML_TYPE.Q4_K, block, 256);
    for (let i = 0; i < 256; i++) {
      const chunk = i >> 6;
      const upper = (i & 63) >= 32;
      const byte = block[16 + 32 * chunk + (i & 31)]!;
      const q = upper ? byte >> 4 : byte & 15;
      const sub = 2 * chunk + (upper ? 1 : 0);
      expect(values[i]).toBeCloseTo(0.25 * scales[sub]! * q - 0.125 * mins[sub]!, 6);
    }
  });

  test("Q5_0: f16 d, u32 of fifth bits (bit i: value i), nibbles as Q4_0, minus 16", () => {
    const block = new Uint8Array(22);
    const view = new DataView(block.buffer);
    view.setUint16(0, half(0.5), true);
    view.setUint32(2, 0xa5c3_0f00, true);
    for (let j = 0; j < 16; j++) block[6 + j] = j | ((15 - j) << 4);
    const values = dequantizeValues(GGML_TYPE.Q5_0, block, 32);
    for (let j = 0; j < 16; j++) {
      expect(values[j]).toBe(0.5 * ((j | (((0xa5c3_0f00 >>> j) & 1) << 4)) - 16));
      expect(values[j + 16]).toBe(0.5 * (((15 - j) | (((0xa5c3_0f00 >>> (j + 16)) & 1) << 4)) - 16));
    }
    expect(quantizeValues(GGML_TYPE.Q5_0, values)).toEqual(block); // value −8 (level 0) is the extreme: same bytes
  });

  test("Q5_1: f16 d, f16 m, u32 of fifth bits, nibbles; value = d·q + m", () => {
    const block = new Uint8Array(24);
    const view = new DataView(block.buffer);
    view.setUint16(0, half(0.25), true);
    view.setUint16(2, half(-3), true);
    view.setUint32(4, 0x8000_0001 | 0x0001_0000, true);
    for (let j = 0; j < 16; j++) block[8 + j] = ((j * 5) & 15) | ((j * 3) & 15) << 4;
    const values = dequantizeValues(GGML_TYPE.Q5_1, block, 32);
    for (let j = 0; j < 16; j++) {
      const fifth = (i: number) => ((view.getUint32(4, true) >>> i) & 1) << 4;
      expect(values[j]).toBe(0.25 * (((j * 5) & 15) | fifth(j)) - 3);
      expect(values[j + 16]).toBe(0.25 * (((j * 3) & 15) | fifth(j + 16)) - 3);
    }
  });

  test("Q5_K: Q4_K's header, 32 bytes of fifth bits (bit 2c / 2c+1 of byte l), then the nibbles", () => {
    const scales = [1, 2, 3, 4, 40, 50, 60, 63];
    const mins = [5, 6, 7, 8, 33, 47, 16, 31];
    const block = new Uint8Array(176);
    const view = new DataView(block.buffer);
    view.setUint16(0, half(0.25), true);
    view.setUint16(2, half(0.125), true);
    for (let j = 0; j < 4; j++) {
      block[4 + j] = scales[j]! | ((scales[j + 4]! >> 4) << 6);
      block[8 + j] = mins[j]! | ((mins[j + 4]! >> 4) << 6);
      block[12 + j] = (scales[j + 4]! & 15) | ((mins[j + 4]! & 15) << 4);
    }
    for (let i = 0; i < 32; i++) block[16 + i] = (i * 73 + 5) & 0xff;
    for (let i = 0; i < 128; i++) block[48 + i] = (i * 7) & 0xff;
    const values = dequantizeValues(GGML_TYPE.Q5_K, block, 256);
    for (let i = 0; i < 256; i++) {
      const chunk = i >> 6;
      const upper = (i & 63) >= 32;
      const byte = block[48 + 32 * chunk + (i & 31)]!;
      const fifth = (block[16 + (i & 31)]! >> (2 * chunk + (upper ? 1 : 0))) & 1;
      const q = (upper ? byte >> 4 : byte & 15) | (fifth << 4);
      const sub = 2 * chunk + (upper ? 1 : 0);
      expect(values[i]).toBeCloseTo(0.25 * scales[sub]! * q - 0.125 * mins[sub]!, 6);
    }
  });

  test("Q6_K: ql, qh, int8 scales per 16 values, f16 d at the end", () => {
    const block = new Uint8Array(210);
    const view = new DataView(block.buffer);
    for (let i = 0; i < 128; i++) block[i] = (i * 37) & 0xff;
    for (let i = 0; i < 64; i++) block[128 + i] = (i * 101 + 3) & 0xff;
    const scales = [-128, -5, 1, 2, 3, 127, 7, -8, 9, 10, -11, 12, 13, 14, 15, 16];
    scales.forEach((s, j) => view.setInt8(192 + j, s));
    view.setUint16(208, half(0.5), true);
    const values = dequantizeValues(GGML_TYPE.Q6_K, block, 256);
    for (let i = 0; i < 256; i++) {
      const halfIndex = i >> 7;
      const within = i & 127;
      const quarter = within >> 5; // 0..3: which of l, l+32, l+64, l+96
      const l = within & 31;
      const lowByte = block[64 * halfIndex + l + (quarter & 1) * 32]!;
      const low = quarter < 2 ? lowByte & 15 : lowByte >> 4;
      const high = (block[128 + 32 * halfIndex + l]! >> (2 * quarter)) & 3;
      expect(values[i]).toBe(0.5 * scales[i >> 4]! * ((low | (high << 4)) - 32));
    }
  });

  test("K-quants re-quantize their own output to nearly the same values", () => {
    for (const type of [GGML_TYPE.Q4_K, GGML_TYPE.Q5_K, GGML_TYPE.Q6_K]) {
      const once = dequantizeValues(type, quantizeValues(type, randomValues(1024, 5)), 1024);
      const twice = dequantizeValues(type, quantizeValues(type, once), 1024);
      expect(relativeRmsError(once, twice)).toBeLessThan(0.03);
    }
  });
});
