/**
 * The safetensors format (Hugging Face): an 8-byte little-endian header length N,
 * N bytes of UTF-8 JSON mapping each tensor name to {dtype, shape, data_offsets}
 * (plus an optional "__metadata__" object of strings), then the tensors' bytes.
 * data_offsets are [begin, end) relative to the byte buffer after the header; the
 * ranges must tile the buffer exactly (no holes, no overlaps, nothing after).
 *
 * The writer pads the header with spaces so that the buffer starts at a multiple of
 * 8 bytes, and places tensors with larger elements first, so that every tensor
 * starts at a multiple of its element size (what the reference implementation does;
 * a runner can then map the file and read tensors in place). The parser treats the
 * bytes as hostile: every number is checked before it is used.
 */
import { bfloat16BitsToFloat32, float16BitsToFloat32 } from "./halfFloats.ts";

export type SafetensorsDtype =
  | "BOOL"
  | "U8"
  | "I8"
  | "F8_E4M3"
  | "F8_E5M2"
  | "U16"
  | "I16"
  | "F16"
  | "BF16"
  | "U32"
  | "I32"
  | "F32"
  | "U64"
  | "I64"
  | "F64";

/** Bytes per element of each dtype. */
export const DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
  U16: 2,
  I16: 2,
  F16: 2,
  BF16: 2,
  U32: 4,
  I32: 4,
  F32: 4,
  U64: 8,
  I64: 8,
  F64: 8,
};

/** The largest header accepted (the reference implementation's limit). */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;

/** Alignment of the byte buffer's start (the writer's padding). */
export const BUFFER_ALIGNMENT = 8;

export class SafetensorsError extends Error {
  constructor(message: string) {
    super(`safetensors: ${message}`);
    this.name = "SafetensorsError";
  }
}

export interface TensorSpec {
  name: string;
  dtype: SafetensorsDtype;
  shape: readonly number[];
}

/** A tensor's place in a file: offsets relative to the byte buffer, and absolute. */
export interface TensorEntry extends TensorSpec {
  /** data_offsets[0] and [1]: the range in the byte buffer. */
  begin: number;
  end: number;
  /** Where the tensor's bytes start in the file (dataStart + begin). */
  fileOffset: number;
}

export interface SafetensorsLayout {
  /** The first 8 + N bytes of the file: length, JSON header, padding. */
  header: Uint8Array;
  /** Where the byte buffer starts in the file (8 + N). */
  dataStart: number;
  /** The tensors in file order. */
  entries: TensorEntry[];
  /** The whole file's size. */
  fileBytes: number;
  metadata: Record<string, string> | null;
}

export function elementCount(shape: readonly number[]): number {
  let count = 1;
  for (const dim of shape) count *= dim;
  return count;
}

export function tensorBytes(spec: TensorSpec): number {
  return elementCount(spec.shape) * DTYPE_BYTES[spec.dtype];
}

const TENSOR_NAME_MAX = 1024;

function checkSpec(spec: TensorSpec): void {
  if (typeof spec.name !== "string" || spec.name === "" || spec.name.length > TENSOR_NAME_MAX) {
    throw new SafetensorsError(`bad tensor name ${JSON.stringify(spec.name)}`);
  }
  if (spec.name === "__metadata__") throw new SafetensorsError("a tensor may not be called __metadata__");
  if (!(spec.dtype in DTYPE_BYTES)) throw new SafetensorsError(`tensor ${spec.name}: unknown dtype ${String(spec.dtype)}`);
  for (const dim of spec.shape) {
    if (!Number.isSafeInteger(dim) || dim < 0) throw new SafetensorsError(`tensor ${spec.name}: bad dimension ${dim}`);
  }
  if (!Number.isSafeInteger(tensorBytes(spec))) throw new SafetensorsError(`tensor ${spec.name}: too large`);
}

/**
 * Plans a file: the header bytes and where each tensor goes. Tensors are placed by
 * element size, largest first, and otherwise in the given order (stable).
 */
export function safetensorsLayout(specs: readonly TensorSpec[], metadata: Record<string, string> | null = null): SafetensorsLayout {
  const seen = new Set<string>();
  for (const spec of specs) {
    checkSpec(spec);
    if (seen.has(spec.name)) throw new SafetensorsError(`tensor ${spec.name} given twice`);
    seen.add(spec.name);
  }
  const ordered = specs
    .map((spec, index) => ({ spec, index }))
    .sort((a, b) => DTYPE_BYTES[b.spec.dtype] - DTYPE_BYTES[a.spec.dtype] || a.index - b.index)
    .map(({ spec }) => spec);

  const json: Record<string, unknown> = {};
  if (metadata !== null) {
    for (const [key, value] of Object.entries(metadata)) {
      if (typeof value !== "string") throw new SafetensorsError(`metadata ${key} is not a string`);
    }
    json.__metadata__ = metadata;
  }
  const relative: { spec: TensorSpec; begin: number; end: number }[] = [];
  let offset = 0;
  for (const spec of ordered) {
    const end = offset + tensorBytes(spec);
    json[spec.name] = { dtype: spec.dtype, shape: [...spec.shape], data_offsets: [offset, end] };
    relative.push({ spec, begin: offset, end });
    offset = end;
  }
  const text = new TextEncoder().encode(JSON.stringify(json));
  const paddedLength = Math.ceil((8 + text.length) / BUFFER_ALIGNMENT) * BUFFER_ALIGNMENT - 8;
  const header = new Uint8Array(8 + paddedLength).fill(0x20, 8 + text.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(paddedLength), true);
  header.set(text, 8);
  const dataStart = header.length;
  return {
    header,
    dataStart,
    entries: relative.map(({ spec, begin, end }) => ({
      name: spec.name,
      dtype: spec.dtype,
      shape: [...spec.shape],
      begin,
      end,
      fileOffset: dataStart + begin,
    })),
    fileBytes: dataStart + offset,
    metadata,
  };
}

export interface TensorData extends TensorSpec {
  /** The raw little-endian bytes, exactly tensorBytes(spec) long. */
  data: Uint8Array;
}

/** The chunks of a whole file, in order: header, then each tensor's bytes. */
export function* safetensorsChunks(
  layout: SafetensorsLayout,
  dataOf: (entry: TensorEntry) => Uint8Array,
): Generator<Uint8Array> {
  yield layout.header;
  for (const entry of layout.entries) {
    const data = dataOf(entry);
    if (data.length !== entry.end - entry.begin) {
      throw new SafetensorsError(`tensor ${entry.name}: ${data.length} bytes given, ${entry.end - entry.begin} expected`);
    }
    yield data;
  }
}

/** Encodes tensors held in memory as one safetensors file. */
export function encodeSafetensors(tensors: readonly TensorData[], metadata: Record<string, string> | null = null): Uint8Array {
  const layout = safetensorsLayout(tensors, metadata);
  const byName = new Map(tensors.map((tensor) => [tensor.name, tensor.data]));
  const file = new Uint8Array(layout.fileBytes);
  let offset = 0;
  for (const chunk of safetensorsChunks(layout, (entry) => byName.get(entry.name)!)) {
    file.set(chunk, offset);
    offset += chunk.length;
  }
  return file;
}

export interface SafetensorsHeader {
  /** N, the JSON header's length (padding included). */
  headerBytes: number;
  dataStart: number;
  /** The tensors sorted by their place in the file. */
  entries: TensorEntry[];
  metadata: Record<string, string> | null;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : JSON.stringify(value);
}

/**
 * Parses and checks the header of a safetensors file of `fileBytes` bytes whose
 * beginning is `bytes` (the whole file, or at least its first 8 + N bytes).
 * Throws a SafetensorsError naming the first problem.
 */
export function parseSafetensorsHeader(bytes: Uint8Array, fileBytes = bytes.length): SafetensorsHeader {
  if (fileBytes < 8 || bytes.length < 8) throw new SafetensorsError(`file of ${fileBytes} bytes is shorter than the 8-byte header length`);
  const declared = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (declared > BigInt(MAX_HEADER_BYTES)) throw new SafetensorsError(`header length ${declared} is over the limit of ${MAX_HEADER_BYTES} bytes`);
  const headerBytes = Number(declared);
  if (headerBytes < 2) throw new SafetensorsError(`header length ${headerBytes} is too short for a JSON object`);
  if (8 + headerBytes > fileBytes) {
    throw new SafetensorsError(`header length ${headerBytes} runs past the end of the file (${fileBytes} bytes)`);
  }
  if (8 + headerBytes > bytes.length) throw new SafetensorsError(`only ${bytes.length} bytes given, the header needs ${8 + headerBytes}`);

  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + headerBytes));
  } catch {
    throw new SafetensorsError("header is not valid UTF-8");
  }
  if (!text.startsWith("{")) throw new SafetensorsError("header does not start with '{'");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new SafetensorsError(`header is not valid JSON (${(error as Error).message})`);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) throw new SafetensorsError("header is not a JSON object");

  const dataStart = 8 + headerBytes;
  const dataBytes = fileBytes - dataStart;
  let metadata: Record<string, string> | null = null;
  const entries: TensorEntry[] = [];
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new SafetensorsError("__metadata__ is not an object");
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        if (typeof item !== "string") throw new SafetensorsError(`__metadata__.${key} is ${describe(item)}, not a string`);
      }
      metadata = value as Record<string, string>;
      continue;
    }
    entries.push(parseEntry(name, value, dataStart, dataBytes));
  }

  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let expected = 0;
  for (const entry of entries) {
    if (entry.begin < expected) throw new SafetensorsError(`tensor ${entry.name} overlaps the tensor before it (begins at ${entry.begin}, ${expected} expected)`);
    if (entry.begin > expected) throw new SafetensorsError(`hole in the byte buffer before tensor ${entry.name} (begins at ${entry.begin}, ${expected} expected)`);
    expected = entry.end;
  }
  if (expected !== dataBytes) {
    throw new SafetensorsError(`the tensors cover ${expected} bytes of the ${dataBytes}-byte buffer after the header`);
  }
  return { headerBytes, dataStart, entries, metadata };
}

function parseEntry(name: string, value: unknown, dataStart: number, dataBytes: number): TensorEntry {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new SafetensorsError(`tensor ${name}: entry is ${describe(value)}, not an object`);
  const entry = value as Record<string, unknown>;
  for (const key of Object.keys(entry)) {
    if (key !== "dtype" && key !== "shape" && key !== "data_offsets") throw new SafetensorsError(`tensor ${name}: unexpected field ${key}`);
  }
  const dtype = entry.dtype;
  if (typeof dtype !== "string" || !Object.hasOwn(DTYPE_BYTES, dtype)) throw new SafetensorsError(`tensor ${name}: unknown dtype ${describe(dtype)}`);
  const shape = entry.shape;
  if (!Array.isArray(shape)) throw new SafetensorsError(`tensor ${name}: shape is ${describe(shape)}, not an array`);
  for (const dim of shape) {
    if (typeof dim !== "number" || !Number.isSafeInteger(dim) || dim < 0) throw new SafetensorsError(`tensor ${name}: bad dimension ${describe(dim)} in shape`);
  }
  const offsets = entry.data_offsets;
  if (!Array.isArray(offsets) || offsets.length !== 2) throw new SafetensorsError(`tensor ${name}: data_offsets is not a [begin, end] pair`);
  const [begin, end] = offsets as unknown[];
  for (const offset of [begin, end]) {
    if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset < 0) throw new SafetensorsError(`tensor ${name}: bad offset ${describe(offset)}`);
  }
  if ((end as number) < (begin as number)) throw new SafetensorsError(`tensor ${name}: data_offsets end ${end} is before begin ${begin}`);
  if ((end as number) > dataBytes) throw new SafetensorsError(`tensor ${name}: data_offsets end ${end} is past the end of the ${dataBytes}-byte buffer`);
  const spec: TensorSpec = { name, dtype: dtype as SafetensorsDtype, shape: shape as number[] };
  const size = tensorBytes(spec);
  if (!Number.isSafeInteger(size) || size !== (end as number) - (begin as number)) {
    throw new SafetensorsError(
      `tensor ${name}: ${dtype} ${JSON.stringify(shape)} needs ${size} bytes but data_offsets span ${(end as number) - (begin as number)}`,
    );
  }
  return { ...spec, begin: begin as number, end: end as number, fileOffset: dataStart + (begin as number) };
}

export interface SafetensorsFile extends SafetensorsHeader {
  tensors: Map<string, TensorData & TensorEntry>;
}

/** Parses a whole file held in memory; each tensor's data is a view of `bytes`. */
export function readSafetensors(bytes: Uint8Array): SafetensorsFile {
  const header = parseSafetensorsHeader(bytes);
  const tensors = new Map<string, TensorData & TensorEntry>();
  for (const entry of header.entries) {
    tensors.set(entry.name, { ...entry, data: bytes.subarray(entry.fileOffset, entry.fileOffset + (entry.end - entry.begin)) });
  }
  return { ...header, tensors };
}

/** The values of an F32, F16 or BF16 tensor as float32 (a copy). */
export function tensorToFloat32(tensor: TensorData): Float32Array {
  const count = elementCount(tensor.shape);
  const view = new DataView(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  const values = new Float32Array(count);
  switch (tensor.dtype) {
    case "F32":
      for (let i = 0; i < count; i++) values[i] = view.getFloat32(4 * i, true);
      break;
    case "F16":
      for (let i = 0; i < count; i++) values[i] = float16BitsToFloat32(view.getUint16(2 * i, true));
      break;
    case "BF16":
      for (let i = 0; i < count; i++) values[i] = bfloat16BitsToFloat32(view.getUint16(2 * i, true));
      break;
    default:
      throw new SafetensorsError(`tensor ${tensor.name}: ${tensor.dtype} is not a float dtype`);
  }
  return values;
}
