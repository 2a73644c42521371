/**
 * Q5_K (ggml type 13): super-blocks of 256 values, 176 bytes each:
 *
 *   bytes 0..15    d, dmin and the packed six-bit scales and mins, as Q4_K (kQuantSuperBlock.ts)
 *   bytes 16..47   qh: the fifth bits; bit 2c of qh[l] belongs to value 64c + l and bit
 *                  2c + 1 to value 64c + 32 + l (c = 0..3)
 *   bytes 48..175  nibbles: 4 chunks of 64 values, chunk c in bytes 32c..32c+31; byte l
 *                  of a chunk holds value 64c + l (low nibble, sub-block 2c) and value
 *                  64c + 32 + l (high nibble, sub-block 2c + 1)
 *
 * Value i of sub-block j (32 values) = d·sc[j]·q[i] − dmin·m[j], q in 0..31. Quantized as
 * ggml's quantize_row_q5_K_ref does (weighted affine fit, 15 trial steps).
 */
import { float16BitsToFloat32 } from "../halfFloats.ts";
import { Q5_K_SEARCH } from "./kQuantAffineFit.ts";
import { AffineSuperBlockScratch, quantizeAffineSuperBlock, unpackKQuantScale } from "./kQuantSuperBlock.ts";

export const Q5_K_BLOCK = 256;
export const Q5_K_BYTES = 176;

export function quantizeQ5K(values: Float32Array): Uint8Array {
  const blocks = values.length / Q5_K_BLOCK;
  const out = new Uint8Array(blocks * Q5_K_BYTES);
  const levels = new Uint8Array(Q5_K_BLOCK);
  const scratch = new AffineSuperBlockScratch();
  for (let b = 0; b < blocks; b++) {
    const at = b * Q5_K_BYTES;
    quantizeAffineSuperBlock(values, b * Q5_K_BLOCK, Q5_K_SEARCH, out, at, levels, scratch);
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) {
        const low = levels[64 * c + l]!;
        const high = levels[64 * c + 32 + l]!;
        out[at + 16 + l] = out[at + 16 + l]! | ((low >> 4) << (2 * c)) | ((high >> 4) << (2 * c + 1));
        out[at + 48 + 32 * c + l] = (low & 15) | ((high & 15) << 4);
      }
    }
  }
  return out;
}

export function dequantizeQ5K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q5_K_BLOCK; b++) {
    const at = b * Q5_K_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    const dmin = float16BitsToFloat32(view.getUint16(at + 2, true));
    for (let c = 0; c < 4; c++) {
      const [scaleLow, minLow] = unpackKQuantScale(bytes, at + 4, 2 * c);
      const [scaleHigh, minHigh] = unpackKQuantScale(bytes, at + 4, 2 * c + 1);
      for (let l = 0; l < 32; l++) {
        const byte = bytes[at + 48 + 32 * c + l]!;
        const high = bytes[at + 16 + l]!;
        const qLow = (byte & 15) | (((high >> (2 * c)) & 1) << 4);
        const qHigh = (byte >> 4) | (((high >> (2 * c + 1)) & 1) << 4);
        out[b * Q5_K_BLOCK + 64 * c + l] = d * scaleLow * qLow - dmin * minLow;
        out[b * Q5_K_BLOCK + 64 * c + 32 + l] = d * scaleHigh * qHigh - dmin * minHigh;
      }
    }
  }
  return out;
}
