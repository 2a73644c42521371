/**
 * Q5_1 (ggml type 7): blocks of 32 values, 24 bytes each: f16 scale d, f16 min m, 4 bytes
 * qh (a little-endian u32 whose bit i is the fifth bit of value i), then 16 bytes of
 * nibbles (byte j: value j low, value j + 16 high); value = d · q + m, q in 0..31.
 * Quantized as ggml's quantize_row_q5_1_ref: m = the block's least value, d = range / 31,
 * q = trunc((x − m) / d + 0.5), in float32.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q5_1_BLOCK = 32;
export const Q5_1_BYTES = 24;
const f = Math.fround;

export function quantizeQ5_1(values: Float32Array): Uint8Array {
  const blocks = values.length / Q5_1_BLOCK;
  const out = new Uint8Array(blocks * Q5_1_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q5_1_BLOCK;
    let lo = Infinity;
    let hi = -Infinity;
    for (let i = 0; i < Q5_1_BLOCK; i++) {
      lo = Math.min(lo, values[x + i]!);
      hi = Math.max(hi, values[x + i]!);
    }
    const d = f(f(hi - lo) / 31);
    const inverse = d === 0 ? 0 : f(1 / d);
    const at = b * Q5_1_BYTES;
    view.setUint16(at, float32ToFloat16Bits(d), true);
    view.setUint16(at + 2, float32ToFloat16Bits(lo), true);
    const level = (v: number) => Math.min(31, Math.trunc(f(f(f(v - lo) * inverse) + 0.5)));
    let fifthBits = 0;
    for (let j = 0; j < 16; j++) {
      const low = level(values[x + j]!);
      const high = level(values[x + j + 16]!);
      out[at + 8 + j] = (low & 15) | ((high & 15) << 4);
      fifthBits |= ((low >> 4) << j) | ((high >> 4) << (j + 16));
    }
    view.setUint32(at + 4, fifthBits >>> 0, true);
  }
  return out;
}

export function dequantizeQ5_1(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q5_1_BLOCK; b++) {
    const at = b * Q5_1_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    const m = float16BitsToFloat32(view.getUint16(at + 2, true));
    const fifthBits = view.getUint32(at + 4, true);
    for (let j = 0; j < 16; j++) {
      const byte = bytes[at + 8 + j]!;
      out[b * Q5_1_BLOCK + j] = d * ((byte & 15) | (((fifthBits >>> j) & 1) << 4)) + m;
      out[b * Q5_1_BLOCK + j + 16] = d * ((byte >> 4) | (((fifthBits >>> (j + 16)) & 1) << 4)) + m;
    }
  }
  return out;
}
