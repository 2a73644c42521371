/**
 * Q4_K (ggml type 12): super-blocks of 256 values, 144 bytes each:
 *
 *   bytes 0..1    f16 d      (scale of the sub-block scales)
 *   bytes 2..3    f16 dmin   (scale of the sub-block mins)
 *   bytes 4..15   8 six-bit scales sc[j] and 8 six-bit mins m[j], packed:
 *                   j < 4:  byte j     = sc[j]   | (sc[j+4] >> 4) << 6
 *                           byte j + 4 = m[j]    | (m[j+4]  >> 4) << 6
 *                           byte j + 8 = (sc[j+4] & 15) | (m[j+4] & 15) << 4
 *   bytes 16..143 nibbles: 4 chunks of 64 values, chunk c in bytes 32c..32c+31;
 *                 byte l of a chunk holds value 64c + l (low nibble, sub-block 2c)
 *                 and value 64c + 32 + l (high nibble, sub-block 2c + 1)
 *
 * Value i of sub-block j (32 values) = d·sc[j]·q[i] − dmin·m[j], q in 0..15.
 *
 * Quantizing: for each sub-block an affine fit (scale ≥ 0, offset ≤ 0) found by a
 * small search: for 13 trial step sizes the values are rounded to the 16 levels,
 * then scale and offset are refitted by least squares to those levels, keeping the
 * pair of least squared error. The 8 scales and 8 mins are then rounded to 6 bits
 * against the block maxima, and the values are rounded again against the scales and
 * mins actually stored (f16 d and dmin included).
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q4_K_BLOCK = 256;
export const Q4_K_BYTES = 144;
const SUB = 32;
const LEVELS = 15;
/** Trial step sizes: range / (LEVELS + k · STEP) for k in −SEARCH..SEARCH. */
const SEARCH = 6;
const STEP = 0.15;

/** Packs six-bit scales and mins into the 12 scale bytes at `at`. */
export function packQ4KScales(out: Uint8Array, at: number, scales: ArrayLike<number>, mins: ArrayLike<number>): void {
  for (let j = 0; j < 4; j++) {
    out[at + j] = (scales[j]! & 63) | ((scales[j + 4]! >> 4) << 6);
    out[at + j + 4] = (mins[j]! & 63) | ((mins[j + 4]! >> 4) << 6);
    out[at + j + 8] = (scales[j + 4]! & 15) | ((mins[j + 4]! & 15) << 4);
  }
}

/** Scale and min of sub-block j from the 12 scale bytes at `at`. */
export function unpackQ4KScale(bytes: Uint8Array, at: number, j: number): [scale: number, min: number] {
  if (j < 4) return [bytes[at + j]! & 63, bytes[at + j + 4]! & 63];
  return [(bytes[at + j + 4]! & 15) | ((bytes[at + j - 4]! >> 6) << 4), (bytes[at + j + 4]! >> 4) | ((bytes[at + j]! >> 6) << 4)];
}

/**
 * The affine fit x ≈ scale·q − min of n values, q in 0..levels, min ≥ 0: for each trial
 * step the values are rounded to levels, scale and offset refitted by least squares to
 * those levels, and the squared error of that fit (closed form, from the sums) compared.
 */
export function fitAffineLevels(values: Float32Array, start: number, n: number, levels: number): [scale: number, min: number] {
  let lo = 0;
  let hi = -Infinity;
  let sumX = 0;
  let sumXX = 0;
  for (let i = 0; i < n; i++) {
    const v = values[start + i]!;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    sumX += v;
    sumXX += v * v;
  }
  if (hi <= lo) return [0, -lo]; // all values equal to lo ≤ 0, or all zero
  let bestScale = (hi - lo) / levels;
  let bestMin = -lo;
  let bestError = Infinity;
  for (let k = -SEARCH; k <= SEARCH; k++) {
    const inverse = (levels + STEP * k) / (hi - lo);
    let sumQ = 0;
    let sumQQ = 0;
    let sumQX = 0;
    for (let i = 0; i < n; i++) {
      const v = values[start + i]!;
      let q = Math.round((v - lo) * inverse);
      if (q > levels) q = levels;
      else if (q < 0) q = 0;
      sumQ += q;
      sumQQ += q * q;
      sumQX += q * v;
    }
    const det = n * sumQQ - sumQ * sumQ;
    if (det <= 0) continue;
    let scale = (n * sumQX - sumQ * sumX) / det;
    let offset = (sumX - scale * sumQ) / n; // x ≈ scale·q + offset
    if (offset > 0) {
      offset = 0;
      scale = sumQX / sumQQ;
    }
    if (scale <= 0) continue;
    const error = scale * scale * sumQQ + 2 * scale * offset * sumQ + n * offset * offset - 2 * scale * sumQX - 2 * offset * sumX + sumXX;
    if (error < bestError) {
      bestError = error;
      bestScale = scale;
      bestMin = -offset;
    }
  }
  return [bestScale, bestMin];
}

export function quantizeQ4K(values: Float32Array): Uint8Array {
  const blocks = values.length / Q4_K_BLOCK;
  const out = new Uint8Array(blocks * Q4_K_BYTES);
  const view = new DataView(out.buffer);
  const scales = new Float64Array(8);
  const mins = new Float64Array(8);
  const scaleCodes = new Uint8Array(8);
  const minCodes = new Uint8Array(8);
  const q = new Uint8Array(Q4_K_BLOCK);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q4_K_BLOCK;
    for (let j = 0; j < 8; j++) [scales[j], mins[j]] = fitAffineLevels(values, x + j * SUB, SUB, LEVELS);
    const maxScale = Math.max(...scales);
    const maxMin = Math.max(...mins);
    const dBits = float32ToFloat16Bits(maxScale / 63);
    const dminBits = float32ToFloat16Bits(maxMin / 63);
    const d = float16BitsToFloat32(dBits);
    const dmin = float16BitsToFloat32(dminBits);
    for (let j = 0; j < 8; j++) {
      scaleCodes[j] = d > 0 ? Math.min(63, Math.round(scales[j]! / d)) : 0;
      minCodes[j] = dmin > 0 ? Math.min(63, Math.round(mins[j]! / dmin)) : 0;
    }
    for (let j = 0; j < 8; j++) {
      const scale = d * scaleCodes[j]!;
      const min = dmin * minCodes[j]!;
      for (let i = 0; i < SUB; i++) {
        const v = values[x + j * SUB + i]!;
        q[j * SUB + i] = scale > 0 ? Math.max(0, Math.min(LEVELS, Math.round((v + min) / scale))) : 0;
      }
    }
    const at = b * Q4_K_BYTES;
    view.setUint16(at, dBits, true);
    view.setUint16(at + 2, dminBits, true);
    packQ4KScales(out, at + 4, scaleCodes, minCodes);
    for (let c = 0; c < 4; c++) {
      for (let l = 0; l < 32; l++) out[at + 16 + 32 * c + l] = q[64 * c + l]! | (q[64 * c + 32 + l]! << 4);
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
      const [scaleLow, minLow] = unpackQ4KScale(bytes, at + 4, 2 * c);
      const [scaleHigh, minHigh] = unpackQ4KScale(bytes, at + 4, 2 * c + 1);
      for (let l = 0; l < 32; l++) {
        const byte = bytes[at + 16 + 32 * c + l]!;
        out[b * Q4_K_BLOCK + 64 * c + l] = d * scaleLow * (byte & 15) - dmin * minLow;
        out[b * Q4_K_BLOCK + 64 * c + 32 + l] = d * scaleHigh * (byte >> 4) - dmin * minHigh;
      }
    }
  }
  return out;
}
