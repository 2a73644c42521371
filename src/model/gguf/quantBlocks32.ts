/**
 * Dequantization of ggml's 32-element block formats that ctxr reads but does not write: Q4_1 (3),
 * IQ4_NL (20) and MXFP4 (39), as ggml-quants.c computes it (layouts in ggml-common.h). Element
 * j < 16 is the low nibble of qs[j], element j + 16 its high nibble. (Q5_0 and Q5_1, the same
 * family, are read and written by quantQ5_0.ts and quantQ5_1.ts.)
 *
 *   Q4_1   20 B: f16 d, f16 m, qs[16]           x = q·d + m
 *   IQ4_NL 18 B: f16 d, qs[16]                  x = d·IQ4_NL_VALUES[q]
 *   MXFP4  17 B: u8 e (E8M0), qs[16]            x = 2^(e − 128)·MXFP4_VALUES[q] (E2M1 doubled)
 *
 * Pure: no I/O.
 */
import { float16BitsToFloat32 } from "../halfFloats.ts";
import { GGML_TYPE, GgmlTypeError } from "./ggufTypes.ts";

export const IQ4_NL_VALUES: readonly number[] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
export const MXFP4_VALUES: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

interface Layout {
  bytes: number;
  qs: number;
}

const LAYOUTS = new Map<number, Layout>([
  [GGML_TYPE.Q4_1, { bytes: 20, qs: 4 }],
  [GGML_TYPE.IQ4_NL, { bytes: 18, qs: 2 }],
  [GGML_TYPE.MXFP4, { bytes: 17, qs: 1 }],
]);

export function isBlock32Type(type: number): boolean {
  return LAYOUTS.has(type);
}

/** ggml's E8M0 scale halved: 2^(e − 128) (exact in float32, subnormal for e < 2). */
export function e8m0ToFloat32Half(e: number): number {
  return 2 ** (e - 128);
}

export function dequantizeBlock32(type: number, bytes: Uint8Array, count: number): Float32Array {
  const layout = LAYOUTS.get(type);
  if (!layout) throw new GgmlTypeError(`ggml type ${type} is not a 32-element block format`);
  const out = new Float32Array(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const q = new Int32Array(32);
  for (let b = 0; b < count / 32; b++) {
    const at = b * layout.bytes;
    for (let j = 0; j < 16; j++) {
      const byte = bytes[at + layout.qs + j]!;
      q[j] = byte & 15;
      q[j + 16] = byte >> 4;
    }
    const y = b * 32;
    switch (type) {
      case GGML_TYPE.Q4_1: {
        const d = float16BitsToFloat32(view.getUint16(at, true)), m = float16BitsToFloat32(view.getUint16(at + 2, true));
        for (let i = 0; i < 32; i++) out[y + i] = Math.fround(q[i]! * d) + m;
        break;
      }
      case GGML_TYPE.IQ4_NL: {
        const d = float16BitsToFloat32(view.getUint16(at, true));
        for (let i = 0; i < 32; i++) out[y + i] = d * IQ4_NL_VALUES[q[i]!]!;
        break;
      }
      case GGML_TYPE.MXFP4: {
        const d = e8m0ToFloat32Half(bytes[at]!);
        for (let i = 0; i < 32; i++) out[y + i] = d * MXFP4_VALUES[q[i]!]!;
        break;
      }
    }
  }
  return out;
}
