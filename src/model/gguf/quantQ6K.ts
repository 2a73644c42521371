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
 * Quantizing: each sub-block's scale is searched symmetrically (trial step sizes
 * around max|x| / 32, each refitted by least squares, least squared error kept), the
 * 16 scales are rounded to int8 against their largest, and the values are rounded
 * again against the scales actually stored.
 */
import { float16BitsToFloat32, float32ToFloat16Bits } from "../halfFloats.ts";

export const Q6_K_BLOCK = 256;
export const Q6_K_BYTES = 210;
const SUB = 16;
const SEARCH = 6;
const STEP = 0.15;

/**
 * The scale s of x ≈ s·q, q in −32..31, n values at `start`: for each trial step the
 * values are rounded, s refitted by least squares (Σqx / Σq²), and the fit with the
 * least squared error (Σx² − (Σqx)² / Σq²) kept.
 */
export function fitSymmetricLevels(values: Float32Array, start: number, n: number): number {
  let extreme = 0;
  for (let i = 0; i < n; i++) if (Math.abs(values[start + i]!) > Math.abs(extreme)) extreme = values[start + i]!;
  if (extreme === 0) return 0;
  let best = extreme / -32;
  let bestGain = -Infinity;
  for (let k = -SEARCH; k <= SEARCH; k++) {
    const inverse = -(32 + STEP * k) / extreme;
    let sumQX = 0;
    let sumQQ = 0;
    for (let i = 0; i < n; i++) {
      const v = values[start + i]!;
      let q = Math.round(v * inverse);
      if (q > 31) q = 31;
      else if (q < -32) q = -32;
      sumQX += q * v;
      sumQQ += q * q;
    }
    if (sumQQ === 0) continue;
    const gain = (sumQX * sumQX) / sumQQ; // the error is Σx² minus this
    if (gain > bestGain) {
      bestGain = gain;
      best = sumQX / sumQQ;
    }
  }
  return best;
}

export function quantizeQ6K(values: Float32Array): Uint8Array {
  const blocks = values.length / Q6_K_BLOCK;
  const out = new Uint8Array(blocks * Q6_K_BYTES);
  const view = new DataView(out.buffer);
  const scales = new Float64Array(16);
  const codes = new Int8Array(16);
  const q = new Uint8Array(Q6_K_BLOCK);
  for (let b = 0; b < blocks; b++) {
    const x = b * Q6_K_BLOCK;
    let extreme = 0;
    for (let j = 0; j < 16; j++) {
      scales[j] = fitSymmetricLevels(values, x + j * SUB, SUB);
      if (Math.abs(scales[j]!) > Math.abs(extreme)) extreme = scales[j]!;
    }
    const dBits = float32ToFloat16Bits(extreme / -128);
    const d = float16BitsToFloat32(dBits);
    for (let j = 0; j < 16; j++) codes[j] = d === 0 ? 0 : Math.max(-128, Math.min(127, Math.round(scales[j]! / d)));
    for (let j = 0; j < 16; j++) {
      const scale = d * codes[j]!;
      for (let i = 0; i < SUB; i++) {
        const v = values[x + j * SUB + i]!;
        q[j * SUB + i] = scale === 0 ? 32 : Math.max(-32, Math.min(31, Math.round(v / scale))) + 32;
      }
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
