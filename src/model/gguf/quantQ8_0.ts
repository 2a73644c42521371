/**
 * Q8_0 (ggml type 8): blocks of 32 values, 34 bytes each: f16 scale d, then 32 int8
 * quants q; value i = d · q[i]. d = max|x| / 127, q = x · (1/d) rounded half away from
 * zero, in float32: ggml's quantize_row_q8_0_ref, to the same bytes.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q8_0_BLOCK = 32;
export const Q8_0_BYTES = 34;

export function quantizeQ8_0(values: Float32Array): Uint8Array {
  const blocks = values.length / Q8_0_BLOCK;
  const out = new Uint8Array(blocks * Q8_0_BYTES);
  const view = new DataView(out.buffer);
  const quants = new Int8Array(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q8_0_BLOCK;
    let amax = 0;
    for (let i = 0; i < Q8_0_BLOCK; i++) amax = Math.max(amax, Math.abs(values[x + i]!));
    const d = Math.fround(amax / 127);
    const inverse = d === 0 ? 0 : Math.fround(1 / d);
    const at = b * Q8_0_BYTES;
    view.setUint16(at, float32ToFloat16Bits(d), true);
    for (let i = 0; i < Q8_0_BLOCK; i++) {
      const scaled = Math.fround(values[x + i]! * inverse);
      quants[at + 2 + i] = Math.max(-127, Math.min(127, Math.sign(scaled) * Math.round(Math.abs(scaled))));
    }
  }
  return out;
}

export function dequantizeQ8_0(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q8_0_BLOCK; b++) {
    const at = b * Q8_0_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    for (let i = 0; i < Q8_0_BLOCK; i++) out[b * Q8_0_BLOCK + i] = d * view.getInt8(at + 2 + i);
  }
  return out;
}
