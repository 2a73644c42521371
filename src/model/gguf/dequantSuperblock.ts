/**
 * Dequantizing the 256-element super-block formats ctxr reads but does not write, as llama.cpp
 * lays them out (ggml-common.h; checked against gguf-py's quants.py): Q2_K, Q3_K and IQ4_XS (Q5_K
 * is in quantQ5K.ts). Value e of a super-block, with e = 128h + 32j + l (Q2_K, Q3_K),
 * 32k + 16n + l (IQ4_XS):
 *
 *   Q2_K  84 B: scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin
 *               x = d·sc·(qs[32h + l] >> 2j & 3) − dmin·m          (scale per 16 values)
 *   Q3_K 110 B: hmask[32], qs[64], scales[12] (16 six-bit scales, stored + 32), f16 d
 *               q = (qs[32h + l] >> 2j & 3) | (hmask[l] >> (4h + j) & 1) << 2
 *               x = d·(sc − 32)·(q − 4)                             (per 16)
 *   IQ4_XS 136 B: f16 d, u16 scales_h, scales_l[4], qs[128]
 *               ls = (scales_l[k/2] >> 4(k%2) & 15) | (scales_h >> 2k & 3) << 4
 *               x = d·(ls − 32)·IQ4_NL_VALUES[qs[16k + l] >> 4n & 15] (quantBlocks32.ts)
 *
 * Pure: bytes in, float32 values out (count a multiple of 256, bytes exactly the blocks).
 */
import { float16BitsToFloat32 } from "../halfFloats.ts";
import { IQ4_NL_VALUES } from "./quantBlocks32.ts";

function f16(bytes: Uint8Array, at: number): number {
  return float16BitsToFloat32(bytes[at]! | (bytes[at + 1]! << 8));
}

export function dequantizeQ2K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let b = 0; b < count / 256; b++) {
    const at = 84 * b;
    const d = f16(bytes, at + 80);
    const dmin = f16(bytes, at + 82);
    for (let e = 0; e < 256; e++) {
      const s = bytes[at + (e >> 4)]!;
      const q = (bytes[at + 16 + 32 * (e >> 7) + (e & 31)]! >> (2 * ((e >> 5) & 3))) & 3;
      out[256 * b + e] = Math.fround(Math.fround(d * (s & 15)) * q) - Math.fround(dmin * (s >> 4));
    }
  }
  return out;
}

/** Q3_K's sixteen signed scales from the 12 packed bytes at `at`. */
export function unpackQ3KScales(bytes: Uint8Array, at: number): Int8Array {
  const out = new Int8Array(16);
  for (let i = 0; i < 16; i++) {
    const low = (bytes[at + (i % 8)]! >> (4 * (i >> 3))) & 15;
    const high = (bytes[at + 8 + (i % 4)]! >> (2 * (i >> 2))) & 3;
    out[i] = (low | (high << 4)) - 32;
  }
  return out;
}

export function dequantizeQ3K(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let b = 0; b < count / 256; b++) {
    const at = 110 * b;
    const d = f16(bytes, at + 108);
    const scales = unpackQ3KScales(bytes, at + 96);
    for (let e = 0; e < 256; e++) {
      const h = e >> 7;
      const j = (e >> 5) & 3;
      const l = e & 31;
      const q = ((bytes[at + 32 + 32 * h + l]! >> (2 * j)) & 3) | (((bytes[at + l]! >> (4 * h + j)) & 1) << 2);
      out[256 * b + e] = Math.fround(d * scales[e >> 4]!) * (q - 4);
    }
  }
  return out;
}

export function dequantizeIQ4XS(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  for (let b = 0; b < count / 256; b++) {
    const at = 136 * b;
    const d = f16(bytes, at);
    const scalesHigh = bytes[at + 2]! | (bytes[at + 3]! << 8);
    for (let k = 0; k < 8; k++) {
      const ls = ((bytes[at + 4 + (k >> 1)]! >> (4 * (k & 1))) & 15) | (((scalesHigh >> (2 * k)) & 3) << 4);
      const dl = Math.fround(d * (ls - 32));
      for (let i = 0; i < 32; i++) {
        const nibble = (bytes[at + 8 + 16 * k + (i & 15)]! >> (4 * (i >> 4))) & 15;
        out[256 * b + 32 * k + i] = dl * IQ4_NL_VALUES[nibble]!;
      }
    }
  }
  return out;
}
