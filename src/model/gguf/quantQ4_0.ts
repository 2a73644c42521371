/**
 * Q4_0 (ggml type 2): blocks of 32 values, 18 bytes each: f16 scale d, then 16 bytes
 * of nibbles. Byte j holds value j in its low nibble and value j + 16 in its high
 * nibble; value = d · (nibble − 8). The scale maps the value of largest magnitude to
 * −8 (d = that value / −8), so the asymmetric range −8..7 is used in full.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q4_0_BLOCK = 32;
export const Q4_0_BYTES = 18;

export function quantizeQ4_0(values: Float32Array): Uint8Array {
  const blocks = values.length / Q4_0_BLOCK;
  const out = new Uint8Array(blocks * Q4_0_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q4_0_BLOCK;
    let extreme = 0;
    for (let i = 0; i < Q4_0_BLOCK; i++) if (Math.abs(values[x + i]!) > Math.abs(extreme)) extreme = values[x + i]!;
    const d = extreme / -8;
    const inverse = d === 0 ? 0 : 1 / d;
    const at = b * Q4_0_BYTES;
    view.setUint16(at, float32ToFloat16Bits(d), true);
    const nibble = (v: number) => Math.max(0, Math.min(15, Math.floor(v * inverse + 8.5)));
    for (let j = 0; j < 16; j++) out[at + 2 + j] = nibble(values[x + j]!) | (nibble(values[x + j + 16]!) << 4);
  }
  return out;
}

export function dequantizeQ4_0(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q4_0_BLOCK; b++) {
    const at = b * Q4_0_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    for (let j = 0; j < 16; j++) {
      const byte = bytes[at + 2 + j]!;
      out[b * Q4_0_BLOCK + j] = d * ((byte & 0xf) - 8);
      out[b * Q4_0_BLOCK + j + 16] = d * ((byte >> 4) - 8);
    }
  }
  return out;
}
