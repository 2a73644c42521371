/**
 * Q4_K (ggml type 12): super-blocks of 256 values, 144 bytes each:
 *
 *   bytes 0..1    f16 d      (scale of the sub-block scales)
 *   bytes 2..3    f16 dmin   (scale of the sub-block mins)
 *   bytes 4..15   8 six-bit scales sc[j] and 8 six-bit mins m[j] (kQuantSuperBlock.ts)
 *   bytes 16..143 nibbles: 4 chunks of 64 values, chunk c in bytes 32c..32c+31;
 *                 byte l of a chunk holds value 64c + l (low nibble, sub-block 2c)
 *                 and value 64c + 32 + l (high nibble, sub-block 2c + 1)
 *
 * Value i of sub-block j (32 values) = d·sc[j]·q[i] − dmin·m[j], q in 0..15.
 *
 * Quantized as ggml's quantize_row_q4_K_ref does (kQuantSuperBlock.ts: a weighted affine
 * fit of each sub-block, 21 trial steps), to the same bytes.
 */
import { float16BitsToFloat32 } from "../halfFloats.ts";
import { Q4_K_SEARCH } from "./kQuantAffineFit.ts";
import { AffineSuperBlockScratch, quantizeAffineSuperBlock, unpackKQuantScale } from "./kQuantSuperBlock.ts";

export const Q4_K_BLOCK = 256;
export const Q4_K_BYTES = 144;

export function quantizeQ4K(values: Float32Array): Uint8Array {
  const blocks = values.length / Q4_K_BLOCK;
  const out = new Uint8Array(blocks * Q4_K_BYTES);
  const levels = new Uint8Array(Q4_K_BLOCK);
  const scratch = new AffineSuperBlockScratch();
  for (let b = 0; b < blocks; b++) {
    const at = b * Q4_K_BYTES;
    quantizeAffineSuperBlock(values, b * Q4_K_BLOCK, Q4_K_SEARCH, out, at, levels, scratch);
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) out[at + 16 + 32 * c + l] = levels[64 * c + l]! | (levels[64 * c + 32 + l]! << 4);
    }
  }
  return out;
}

export function dequantizeQ4K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q4_K_BLOCK; b++) {
    const at = b * Q4_K_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at, true));
    const dmin = float16BitsToFloat32(view.getUint16(at + 2, true));
    for (let c = 0; c < 4; c++) {
      const [scaleLow, minLow] = unpackKQuantScale(bytes, at + 4, 2 * c);
      const [scaleHigh, minHigh] = unpackKQuantScale(bytes, at + 4, 2 * c + 1);
      for (let l = 0; l < 32; l++) {
        const byte = bytes[at + 16 + 32 * c + l]!;
        out[b * Q4_K_BLOCK + 64 * c + l] = d * scaleLow * (byte & 15) - dmin * minLow;
        out[b * Q4_K_BLOCK + 64 * c + 32 + l] = d * scaleHigh * (byte >> 4) - dmin * minHigh;
      }
    }
  }
  return out;
}
