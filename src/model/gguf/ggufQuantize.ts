/**
 * Converting float32 values to and from the bytes of every ggml type we support
 * (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; dequantization also of Q4_1,
 * IQ4_NL, MXFP4, Q2_K, Q3_K and IQ4_XS, which we read but do not write): one entry point for
 * writers and readers.
 * Values are a tensor's elements in row-major order; because ne[0] holds whole blocks,
 * a tensor is just a run of blocks. Pure: no I/O.
 *
 *   const bytes = quantizeValues(GGML_TYPE.Q4_K, values);     // values.length % 256 === 0
 *   const back = dequantizeValues(GGML_TYPE.Q4_K, bytes, values.length);
 */
import { bfloat16BitsToFloat32, float16BitsToFloat32, float32ToBfloat16Bits, float32ToFloat16Bits } from "../halfFloats.ts";
import { dequantizeIQ4XS, dequantizeQ2K, dequantizeQ3K } from "./dequantSuperblock.ts";
import { GGML_TYPE, GgmlTypeError, ggmlTypeInfo, ggmlTypeName } from "./ggufTypes.ts";
import { dequantizeBlock32, isBlock32Type } from "./quantBlocks32.ts";
import { dequantizeQ4_0, quantizeQ4_0 } from "./quantQ4_0.ts";
import { dequantizeQ4K, quantizeQ4K } from "./quantQ4K.ts";
import { dequantizeQ5_0, quantizeQ5_0 } from "./quantQ5_0.ts";
import { dequantizeQ5_1, quantizeQ5_1 } from "./quantQ5_1.ts";
import { dequantizeQ5K, quantizeQ5K } from "./quantQ5K.ts";
import { dequantizeQ6K, quantizeQ6K } from "./quantQ6K.ts";
import { dequantizeQ8_0, quantizeQ8_0 } from "./quantQ8_0.ts";

/** The types quantizeValues writes (dequantizeValues reads every type of ggufTypes.ts). */
export const QUANTIZABLE_TYPES: readonly number[] = [GGML_TYPE.F32, GGML_TYPE.F16, GGML_TYPE.BF16, GGML_TYPE.Q8_0, GGML_TYPE.Q4_0, GGML_TYPE.Q5_0, GGML_TYPE.Q5_1, GGML_TYPE.Q4_K, GGML_TYPE.Q5_K, GGML_TYPE.Q6_K];

function checkCount(type: number, count: number): void {
  const info = ggmlTypeInfo(type);
  if (count % info.blockSize !== 0) throw new GgmlTypeError(`${info.name} needs a multiple of ${info.blockSize} values, got ${count}`);
}

export function quantizeValues(type: number, values: Float32Array): Uint8Array {
  checkCount(type, values.length);
  switch (type) {
    case GGML_TYPE.F32:
      return new Uint8Array(values.slice().buffer);
    case GGML_TYPE.F16:
    case GGML_TYPE.BF16: {
      const toBits = type === GGML_TYPE.F16 ? float32ToFloat16Bits : float32ToBfloat16Bits;
      const bits = new Uint16Array(values.length);
      for (let i = 0; i < values.length; i++) bits[i] = toBits(values[i]!);
      return new Uint8Array(bits.buffer);
    }
    case GGML_TYPE.Q8_0:
      return quantizeQ8_0(values);
    case GGML_TYPE.Q4_0:
      return quantizeQ4_0(values);
    case GGML_TYPE.Q5_0:
      return quantizeQ5_0(values);
    case GGML_TYPE.Q5_1:
      return quantizeQ5_1(values);
    case GGML_TYPE.Q4_K:
      return quantizeQ4K(values);
    case GGML_TYPE.Q5_K:
      return quantizeQ5K(values);
    case GGML_TYPE.Q6_K:
      return quantizeQ6K(values);
  }
  throw new GgmlTypeError(`cannot quantize to ${ggmlTypeName(type)} (ggml type ${type}): ctxr writes ${QUANTIZABLE_TYPES.map(ggmlTypeName).join(", ")}`);
}

export function dequantizeValues(type: number, bytes: Uint8Array, count: number): Float32Array {
  checkCount(type, count);
  const info = ggmlTypeInfo(type);
  const expected = (count / info.blockSize) * info.blockBytes;
  if (bytes.length !== expected) throw new GgmlTypeError(`${info.name}: ${count} values take ${expected} bytes, ${bytes.length} given`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (type) {
    case GGML_TYPE.F32: {
      const out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true);
      return out;
    }
    case GGML_TYPE.F16:
    case GGML_TYPE.BF16: {
      const fromBits = type === GGML_TYPE.F16 ? float16BitsToFloat32 : bfloat16BitsToFloat32;
      const out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = fromBits(view.getUint16(2 * i, true));
      return out;
    }
    case GGML_TYPE.Q8_0:
      return dequantizeQ8_0(bytes, count);
    case GGML_TYPE.Q4_0:
      return dequantizeQ4_0(bytes, count);
    case GGML_TYPE.Q5_0:
      return dequantizeQ5_0(bytes, count);
    case GGML_TYPE.Q5_1:
      return dequantizeQ5_1(bytes, count);
    case GGML_TYPE.Q4_K:
      return dequantizeQ4K(bytes, count);
    case GGML_TYPE.Q5_K:
      return dequantizeQ5K(bytes, count);
    case GGML_TYPE.Q6_K:
      return dequantizeQ6K(bytes, count);
    case GGML_TYPE.Q2_K:
      return dequantizeQ2K(bytes, count);
    case GGML_TYPE.Q3_K:
      return dequantizeQ3K(bytes, count);
    case GGML_TYPE.IQ4_XS:
      return dequantizeIQ4XS(bytes, count);
  }
  if (isBlock32Type(type)) return dequantizeBlock32(type, bytes, count);
  throw new GgmlTypeError(`cannot dequantize ggml type ${type}`);
}
