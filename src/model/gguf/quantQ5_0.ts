/**
 * Q5_0 (ggml type 6): blocks of 32 values, 22 bytes each: f16 scale d, 4 bytes qh (a
 * little-endian u32 whose bit i is the fifth bit of value i), then 16 bytes of nibbles
 * (byte j: value j low, value j + 16 high); value = d · (q − 16), q in 0..31.
 * Quantized as ggml's quantize_row_q5_0_ref: the value of largest magnitude maps to −16
 * (d = it / −16), q = trunc(x / d + 16.5) capped at 31, in float32.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q5_0_BLOCK = 32;
export const Q5_0_BYTES = 22;
const f = Math.fround;

export function quantizeQ5_0(values: Float32Array): Uint8Array {
  const blocks = values.length / Q5_0_BLOCK;
  const out = new Uint8Array(blocks * Q5_0_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q5_0_BLOCK;
    let extreme = 0;
    for (let i = 0; i < Q5_0_BLOCK; i++) if (Math.abs(values[x + i]!) > Math.abs(extreme)) extreme = values[x + i]!;
    const d = f(extreme / -16);
    const inverse = d === 0 ? 0 : f(1 / d);
    const at = b * Q5_0_BYTES;
    view.setUint16(at, float32ToFloat16Bits(d), true);
    const level = (v: number) => Math.min(31, Math.trunc(f(f(v * inverse) + 16.5)));
    let fifthBits = 0;
    for (let j = 0; j < 16; j++) {
      const low = level(values[x + j]!);
      const high = level(values[x + j + 16]!);
      out[at + 6 + j] = (low & 15) | ((high & 15) << 4);
      fifthBits |= ((low >> 4) << j) | ((high >> 4) << (j + 16));
    }
    view.setUint32(at + 2, fifthBits >>> 0, true);
  }
  return out;
}

export function dequantizeQ5_0(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q5_0_BLOCK; b++) {
    const at = b * Q5_0_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    const fifthBits = view.getUint32(at + 2, true);
    for (let j = 0; j < 16; j++) {
      const byte = bytes[at + 6 + j]!;
      out[b * Q5_0_BLOCK + j] = d * (((byte & 15) | (((fifthBits >>> j) & 1) << 4)) - 16);
      out[b * Q5_0_BLOCK + j + 16] = d * (((byte >> 4) | (((fifthBits >>> (j + 16)) & 1) << 4)) - 16);
    }
  }
  return out;
}
