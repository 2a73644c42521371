/**
 * Q6_K (ggml type 14): super-blocks of 256 values, 210 bytes each:
 *
 *   bytes 0..127    ql: low 4 bits of the quants
 *   bytes 128..191  qh: high 2 bits of the quants
 *   bytes 192..207  16 int8 sub-block scales sc[0..15] (a sub-block is 16 values)
 *   bytes 208..209  f16 d
 *
 * The block is two halves of 128 values; half h uses ql[64h .. 64h+63], qh[32h ..
 * 32h+31], and for l in 0..31 the six-bit quants (0..63) of its values l, l+32, l+64,
 * l+96 are:
 *   value l:      low nibble of ql[l],      bits 0-1 of qh[l]
 *   value l + 32: low nibble of ql[l + 32], bits 2-3 of qh[l]
 *   value l + 64: high nibble of ql[l],     bits 4-5 of qh[l]
 *   value l + 96: high nibble of ql[l + 32], bits 6-7 of qh[l]
 * and value i of the block = d · sc[i / 16] · (quant − 32).
 *
 * Quantized as ggml's quantize_row_q6_K_ref (to the same bytes): each sub-block's scale
 * is searched symmetrically (make_qx_quants: the value of largest magnitude maps to −32,
 * then 18 trial steps around it, each refitted by least squares weighted by x², the best
 * kept), the 16 scales coded as int8 against the largest, and the values rounded again
 * against the scales as stored; float32 arithmetic throughout.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";
import { nearestInt } from "./kQuantAffineFit.ts";

export const Q6_K_BLOCK = 256;
export const Q6_K_BYTES = 210;
const SUB = 16;
/** ggml's GROUP_MAX_EPS: below this a sub-block (or block) counts as all zero. */
const ZERO = Math.fround(1e-15);
const f = Math.fround;

const levelFor = (inverse: number, x: number) => Math.max(-32, Math.min(31, nearestInt(f(inverse * x))));

/**
 * The scale s of x ≈ s·q, q in −32..31, of the n values at `start`; writes each value's
 * level q + 32 to `levels` (at `start`).
 */
export function fitSymmetricLevels(values: Float32Array, start: number, n: number, levels: Uint8Array): number {
  let extreme = 0;
  let largest = 0;
  for (let i = 0; i < n; i++) {
    const magnitude = Math.abs(values[start + i]!);
    if (magnitude > largest) {
      largest = magnitude;
      extreme = values[start + i]!;
    }
  }
  if (largest < ZERO) {
    levels.fill(0, start, start + n);
    return 0;
  }
  const sums = (inverse: number): [sumLX: number, sumLL: number] => {
    let sumLX = 0;
    let sumLL = 0;
    for (let i = 0; i < n; i++) {
      const x = values[start + i]!;
      const level = levelFor(inverse, x);
      const w = f(x * x);
      sumLX = f(sumLX + f(f(w * x) * level));
      sumLL = f(sumLL + f(f(w * level) * level));
    }
    return [sumLX, sumLL];
  };
  let inverse = f(-32 / extreme);
  for (let i = 0; i < n; i++) levels[start + i] = levelFor(inverse, values[start + i]!) + 32;
  let [sumLX, sumLL] = sums(inverse);
  let scale = sumLL !== 0 ? f(sumLX / sumLL) : 0;
  let best = f(scale * sumLX);
  for (let step = -9; step <= 9; step++) {
    if (step === 0) continue;
    inverse = f(-f(32 + f(f(0.1) * step)) / extreme);
    [sumLX, sumLL] = sums(inverse);
    if (sumLL > 0 && f(sumLX * sumLX) > f(best * sumLL)) {
      for (let i = 0; i < n; i++) levels[start + i] = levelFor(inverse, values[start + i]!) + 32;
      scale = f(sumLX / sumLL);
      best = f(scale * sumLX);
    }
  }
  return scale;
}

export function quantizeQ6K(values: Float32Array): Uint8Array {
  const blocks = values.length / Q6_K_BLOCK;
  const out = new Uint8Array(blocks * Q6_K_BYTES);
  const view = new DataView(out.buffer);
  const scales = new Float32Array(16);
  const codes = new Int8Array(16);
  const q = new Uint8Array(Q6_K_BLOCK);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q6_K_BLOCK;
    const block = values.subarray(x, x + Q6_K_BLOCK);
    let extreme = 0;
    let largest = 0;
    for (let j = 0; j < 16; j++) {
      scales[j] = fitSymmetricLevels(block, j * SUB, SUB, q);
      if (Math.abs(scales[j]!) > largest) {
        largest = Math.abs(scales[j]!);
        extreme = scales[j]!;
      }
    }
    if (largest < ZERO) continue; // an all-zero block: zero bytes, d = 0
    const inverse = f(-128 / extreme);
    const dBits = float32ToFloat16Bits(f(1 / inverse));
    const d = float16BitsToFloat32(dBits);
    for (let j = 0; j < 16; j++) codes[j] = Math.min(127, nearestInt(f(inverse * scales[j]!)));
    for (let j = 0; j < 16; j++) {
      const scale = f(d * codes[j]!);
      if (scale === 0) continue; // the fit's own levels stay, as in ggml
      for (let i = 0; i < SUB; i++) q[j * SUB + i] = Math.max(-32, Math.min(31, nearestInt(f(block[j * SUB + i]! / scale)))) + 32;
    }
    const at = b * Q6_K_BYTES;
    for (let h = 0; h < 2; h++) {
      const ql = at + 64 * h;
      const qh = at + 128 + 32 * h;
      const y = 128 * h;
      for (let l = 0; l < 32; l++) {
        const q1 = q[y + l]!;
        const q2 = q[y + l + 32]!;
        const q3 = q[y + l + 64]!;
        const q4 = q[y + l + 96]!;
        out[ql + l] = (q1 & 15) | ((q3 & 15) << 4);
        out[ql + l + 32] = (q2 & 15) | ((q4 & 15) << 4);
        out[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    }
    for (let j = 0; j < 16; j++) view.setInt8(at + 192 + j, codes[j]!);
    view.setUint16(at + 208, dBits, true);
  }
  return out;
}

export function dequantizeQ6K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let b = 0; b < count / Q6_K_BLOCK; b++) {
    const at = b * Q6_K_BYTES;
    const d = float16BitsToFloat32(view.getUint16(at + 208, true));
    for (let h = 0; h < 2; h++) {
      const ql = at + 64 * h;
      const qh = at + 128 + 32 * h;
      const y = b * Q6_K_BLOCK + 128 * h;
      const scale = (i: number) => d * view.getInt8(at + 192 + 8 * h + (i >> 4));
      for (let l = 0; l < 32; l++) {
        const high = bytes[qh + l]!;
        out[y + l] = scale(l) * (((bytes[ql + l]! & 15) | ((high & 3) << 4)) - 32);
        out[y + l + 32] = scale(l + 32) * (((bytes[ql + l + 32]! & 15) | (((high >> 2) & 3) << 4)) - 32);
        out[y + l + 64] = scale(l + 64) * (((bytes[ql + l]! >> 4) | (((high >> 4) & 3) << 4)) - 32);
        out[y + l + 96] = scale(l + 96) * (((bytes[ql + l + 32]! >> 4) | (((high >> 6) & 3) << 4)) - 32);
      }
    }
  }
  return out;
}
