/**
 * The first 16 bytes shared by Q4_K and Q5_K super-blocks (256 values, eight sub-blocks of
 * 32), and how ggml's reference quantizer fills them:
 *
 *   bytes 0..1    f16 d      (scale of the sub-block scales)
 *   bytes 2..3    f16 dmin   (scale of the sub-block mins)
 *   bytes 4..15   8 six-bit scales sc[j] and 8 six-bit mins m[j], packed:
 *                   j < 4:  byte j     = sc[j]   | (sc[j+4] >> 4) << 6
 *                           byte j + 4 = m[j]    | (m[j+4]  >> 4) << 6
 *                           byte j + 8 = (sc[j+4] & 15) | (m[j+4] & 15) << 4
 *
 * Value i of sub-block j = d·sc[j]·q[i] − dmin·m[j]. Each sub-block is fitted
 * (kQuantAffineFit.ts), the scales and mins coded to 6 bits against their largest, and the
 * values rounded again against the scales and mins as stored (float32 arithmetic, as ggml).
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";
import { type AffineFitSearch, fitWeightedAffine, nearestInt, subBlockWeights } from "./kQuantAffineFit.ts";

const f = Math.fround;
const SUB = 32;

/** Packs six-bit scales and mins into the 12 scale bytes at `at`. */
export function packKQuantScales(out: Uint8Array, at: number, scales: ArrayLike<number>, mins: ArrayLike<number>): void {
  for (let j = 0; j < 4; j++) {
    out[at + j] = (scales[j]! & 63) | ((scales[j + 4]! >> 4) << 6);
    out[at + j + 4] = (mins[j]! & 63) | ((mins[j + 4]! >> 4) << 6);
    out[at + j + 8] = (scales[j + 4]! & 15) | ((mins[j + 4]! & 15) << 4);
  }
}

/** Scale and min of sub-block j from the 12 scale bytes at `at`. */
export function unpackKQuantScale(bytes: Uint8Array, at: number, j: number): [scale: number, min: number] {
  if (j < 4) return [bytes[at + j]! & 63, bytes[at + j + 4]! & 63];
  return [(bytes[at + j + 4]! & 15) | ((bytes[at + j - 4]! >> 6) << 4), (bytes[at + j + 4]! >> 4) | ((bytes[at + j]! >> 6) << 4)];
}

/** Scratch space for quantizeAffineSuperBlock, reused across blocks. */
export class AffineSuperBlockScratch {
  readonly scales = new Float32Array(8);
  readonly mins = new Float32Array(8);
  readonly scaleCodes = new Uint8Array(8);
  readonly minCodes = new Uint8Array(8);
  readonly weights = new Float32Array(SUB);
  readonly trial = new Uint8Array(SUB);
}

/**
 * Quantizes the 256 values at `x`: writes d, dmin and the scale bytes at `out[at..at+15]`
 * and each value's level (0..search.levels) to `levels[0..255]`.
 */
export function quantizeAffineSuperBlock(values: Float32Array, x: number, search: AffineFitSearch, out: Uint8Array, at: number, levels: Uint8Array, scratch: AffineSuperBlockScratch): void {
  const { scales, mins, scaleCodes, minCodes, weights, trial } = scratch;
  const sub = values.subarray(x, x + 8 * SUB);
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    subBlockWeights(sub, j * SUB, SUB, weights);
    const [scale, min] = fitWeightedAffine(sub, j * SUB, SUB, weights, search, levels, trial);
    scales[j] = scale;
    mins[j] = min;
    if (scales[j]! > maxScale) maxScale = scales[j]!;
    if (mins[j]! > maxMin) maxMin = mins[j]!;
  }
  const inverseScale = maxScale > 0 ? f(63 / maxScale) : 0;
  const inverseMin = maxMin > 0 ? f(63 / maxMin) : 0;
  for (let j = 0; j < 8; j++) {
    scaleCodes[j] = Math.min(63, nearestInt(f(inverseScale * scales[j]!)));
    minCodes[j] = Math.min(63, nearestInt(f(inverseMin * mins[j]!)));
  }
  const dBits = float32ToFloat16Bits(f(maxScale / 63));
  const dminBits = float32ToFloat16Bits(f(maxMin / 63));
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  view.setUint16(at, dBits, true);
  view.setUint16(at + 2, dminBits, true);
  packKQuantScales(out, at + 4, scaleCodes, minCodes);
  const d = float16BitsToFloat32(dBits);
  const dmin = float16BitsToFloat32(dminBits);
  for (let j = 0; j < 8; j++) {
    const scale = f(d * scaleCodes[j]!);
    if (scale === 0) continue; // the fit's own levels stay, as in ggml
    const min = f(dmin * minCodes[j]!);
    for (let i = 0; i < SUB; i++) {
      levels[j * SUB + i] = Math.max(0, Math.min(search.levels, nearestInt(f(f(sub[j * SUB + i]! + min) / scale))));
    }
  }
}
