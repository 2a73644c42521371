/**
 * The ggml tensor types a GGUF file of ours may hold, as ggml numbers and lays them out:
 * the type id stored in a tensor info, the name llama.cpp prints, and the block (how
 * many elements share one block of how many bytes). F32/F16/BF16 are "blocks" of one
 * element. Quantized rows must hold whole blocks: ne[0] is a multiple of the block size.
 *
 *   Q4_0: 32 elements, 18 bytes  (f16 d, 16 bytes of nibbles)
 *   Q5_0: 32 elements, 22 bytes  (f16 d, 4 bytes of fifth bits, 16 bytes of nibbles)
 *   Q5_1: 32 elements, 24 bytes  (f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles)
 *   Q8_0: 32 elements, 34 bytes  (f16 d, 32 int8)
 *   Q4_K: 256 elements, 144 bytes (f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles)
 *   Q5_K: 256 elements, 176 bytes (as Q4_K, with 32 bytes of fifth bits before the nibbles)
 *   Q6_K: 256 elements, 210 bytes (ql[128], qh[64], int8 scales[16], f16 d)
 *   Q4_1, IQ4_NL, MXFP4: 32 elements, 20/18/17 bytes (read only: quantBlocks32.ts)
 *   Q2_K, Q3_K, IQ4_XS: 256 elements, 84, 110, 136 bytes (read only: dequantSuperblock.ts)
 */

export const GGML_TYPE = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  IQ4_NL: 20,
  IQ4_XS: 23,
  BF16: 30,
  MXFP4: 39,
} as const;

export type GgmlTypeName = keyof typeof GGML_TYPE;
export type GgmlType = (typeof GGML_TYPE)[GgmlTypeName];

export interface GgmlTypeInfo {
  id: GgmlType;
  name: GgmlTypeName;
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  blockBytes: number;
}

export const GGML_TYPE_INFO: ReadonlyMap<number, GgmlTypeInfo> = new Map(
  (
    [
      ["F32", 1, 4],
      ["F16", 1, 2],
      ["Q4_0", 32, 18],
      ["Q5_0", 32, 22],
      ["Q5_1", 32, 24],
      ["Q8_0", 32, 34],
      ["Q4_K", 256, 144],
      ["Q5_K", 256, 176],
      ["Q6_K", 256, 210],
      ["Q2_K", 256, 84],
      ["Q3_K", 256, 110],
      ["IQ4_XS", 256, 136],
      ["BF16", 1, 2],
      ["Q4_1", 32, 20],
      ["IQ4_NL", 32, 18],
      ["MXFP4", 32, 17],
    ] as const
  ).map(([name, blockSize, blockBytes]) => [GGML_TYPE[name], { id: GGML_TYPE[name], name, blockSize, blockBytes }]),
);

export class GgmlTypeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "GgmlTypeError";
  }
}

/** The type's info; throws naming the id when ggml has no such type we support. */
export function ggmlTypeInfo(type: number): GgmlTypeInfo {
  const info = GGML_TYPE_INFO.get(type);
  if (!info) throw new GgmlTypeError(`unsupported ggml tensor type ${type} (supported: ${[...GGML_TYPE_INFO.values()].map((t) => `${t.name}=${t.id}`).join(", ")})`);
  return info;
}

export function ggmlTypeName(type: number): string {
  return GGML_TYPE_INFO.get(type)?.name ?? `type ${type}`;
}

/** Elements of a tensor of dims ne[0..] (a safe integer, or an error). */
export function ggmlElementCount(dims: readonly number[]): number {
  let count = 1;
  for (const dim of dims) {
    if (!Number.isSafeInteger(dim) || dim < 0) throw new GgmlTypeError(`bad dimension ${dim}`);
    count *= dim;
    if (!Number.isSafeInteger(count)) throw new GgmlTypeError(`dims ${JSON.stringify(dims)} hold too many elements`);
  }
  return count;
}

/** Bytes of a tensor of this type and dims; ne[0] must hold whole blocks. */
export function ggmlTensorBytes(type: number, dims: readonly number[]): number {
  const info = ggmlTypeInfo(type);
  const count = ggmlElementCount(dims);
  const columns = dims.length === 0 ? 1 : dims[0]!;
  if (columns % info.blockSize !== 0) {
    throw new GgmlTypeError(`${info.name} needs ne[0] to be a multiple of ${info.blockSize}, got ${columns}`);
  }
  return (count / info.blockSize) * info.blockBytes;
}
