/**
 * Reads a GGUF file's header (v3, and v2, which has the same little-endian layout)
 * without loading tensor data: magic "GGUF", version, tensor count, metadata count,
 * the metadata (every value type, nested arrays too), the tensor infos, and where
 * the data section starts (aligned to `general.alignment`, default 32). Each tensor
 * gets its absolute byte range in the file.
 *
 *   const gguf = readGgufFile("model.gguf");         // reads the header only, in bounded chunks
 *   gguf.metadata.get("general.architecture");        // a GgufValue (see ggufMetadata.ts)
 *   for (const t of gguf.tensors) t.name, t.type, t.dims, t.fileOffset, t.bytes;
 *   readGgufTensorData("model.gguf", t);             // that tensor's raw bytes
 *   parseGguf(bytes)                                  // the same on bytes in memory
 *
 * The bytes are treated as hostile: every count and length is checked against what
 * the file can still hold before anything is allocated, and each problem is a
 * GgufError naming the key or tensor (bad magic, unsupported version, truncation,
 * unknown tensor type, data past the end of the file, overlapping or misaligned
 * tensor data, duplicate names).
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GgmlTypeError, type GgmlTypeInfo, ggmlTensorBytes, ggmlTypeInfo } from "./ggufTypes.ts";
import { type GgufArray, type GgufArrayItem, GgufError, type GgufMetadata, type GgufValue, type GgufValueType, GGUF_VALUE_TYPE_NAMES } from "./ggufMetadata.ts";

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian uint32
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** ggml's GGML_MAX_DIMS. */
export const GGUF_MAX_DIMS = 4;
/** Arrays nested deeper than this are refused (a damaged file could recurse without end). */
export const GGUF_MAX_ARRAY_DEPTH = 8;
/** Longest key or tensor name. */
export const GGUF_MAX_NAME_BYTES = 65535;

export interface GgufTensorInfo {
  name: string;
  /** ne[0..n_dims): ne[0] is the number of columns (contiguous elements). */
  dims: number[];
  type: number;
  typeInfo: GgmlTypeInfo;
  /** Offset relative to the data section, as stored. */
  offset: number;
  /** Absolute offset in the file. */
  fileOffset: number;
  bytes: number;
}

export interface GgufHeader {
  version: number;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Where the data section starts in the file. */
  dataStart: number;
  fileBytes: number;
}

/** Random-access reads of a file's bytes; may return fewer bytes at the end of the file. */
export interface ByteSource {
  readonly size: number;
  read(offset: number, length: number): Uint8Array;
}

export function bytesSource(bytes: Uint8Array): ByteSource {
  return { size: bytes.length, read: (offset, length) => bytes.subarray(offset, Math.min(bytes.length, offset + length)) };
}

const WINDOW_BYTES = 1 << 20;
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Sequential reads over a ByteSource through a window of at most max(1 MiB, one item) bytes. */
class Cursor {
  private window: Uint8Array = new Uint8Array(0);
  private view: DataView = new DataView(this.window.buffer);
  private windowStart = 0;
  position = 0;

  constructor(private readonly source: ByteSource) {}

  get remaining(): number {
    return this.source.size - this.position;
  }

  /** Makes `length` bytes at the position available; `what` names the thing being read. */
  private need(length: number, what: string): number {
    if (length > this.remaining) throw new GgufError(`file truncated: ${what} needs ${length} bytes at offset ${this.position}, the file has ${Math.max(0, this.remaining)} left`);
    const start = this.position - this.windowStart;
    if (start >= 0 && start + length <= this.window.length) return start;
    const chunk = this.source.read(this.position, Math.max(length, Math.min(WINDOW_BYTES, this.remaining)));
    if (chunk.length < length) throw new GgufError(`file truncated: ${what} at offset ${this.position}`);
    this.window = chunk;
    this.view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    this.windowStart = this.position;
    return 0;
  }

  u32(what: string): number {
    const at = this.need(4, what);
    this.position += 4;
    return this.view.getUint32(at, true);
  }

  /** A uint64 that must be a safe integer (counts, lengths, offsets). */
  u64(what: string): number {
    const at = this.need(8, what);
    this.position += 8;
    const value = this.view.getBigUint64(at, true);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new GgufError(`${what} is ${value}, absurdly large`);
    return Number(value);
  }

  scalar(type: GgufValueType, what: string): number | bigint | boolean | string {
    switch (type) {
      case "uint8": { const at = this.need(1, what); this.position += 1; return this.view.getUint8(at); }
      case "int8": { const at = this.need(1, what); this.position += 1; return this.view.getInt8(at); }
      case "uint16": { const at = this.need(2, what); this.position += 2; return this.view.getUint16(at, true); }
      case "int16": { const at = this.need(2, what); this.position += 2; return this.view.getInt16(at, true); }
      case "uint32": return this.u32(what);
      case "int32": { const at = this.need(4, what); this.position += 4; return this.view.getInt32(at, true); }
      case "float32": { const at = this.need(4, what); this.position += 4; return this.view.getFloat32(at, true); }
      case "float64": { const at = this.need(8, what); this.position += 8; return this.view.getFloat64(at, true); }
      case "uint64": { const at = this.need(8, what); this.position += 8; return this.view.getBigUint64(at, true); }
      case "int64": { const at = this.need(8, what); this.position += 8; return this.view.getBigInt64(at, true); }
      case "bool": {
        const at = this.need(1, what);
        this.position += 1;
        const byte = this.view.getUint8(at);
        if (byte > 1) throw new GgufError(`${what}: bool byte is ${byte}, 0 or 1 expected`);
        return byte === 1;
      }
      case "string": return this.string(what, Number.MAX_SAFE_INTEGER);
      case "array": throw new GgufError(`${what}: an array is not a scalar`);
    }
  }

  string(what: string, maxBytes: number): string {
    const length = this.u64(`${what} (string length)`);
    if (length > maxBytes) throw new GgufError(`${what}: string length ${length} is over the limit of ${maxBytes}`);
    const at = this.need(length, what);
    this.position += length;
    try {
      return decoder.decode(this.window.subarray(at, at + length));
    } catch {
      throw new GgufError(`${what}: not valid UTF-8`);
    }
  }
}

/** The fewest bytes one item of a type takes (for checking a count before allocating). */
const MIN_ITEM_BYTES: Record<GgufValueType, number> = {
  uint8: 1, int8: 1, bool: 1, uint16: 2, int16: 2, uint32: 4, int32: 4, float32: 4,
  uint64: 8, int64: 8, float64: 8, string: 8, array: 12,
};

function valueType(id: number, what: string): GgufValueType {
  const type = GGUF_VALUE_TYPE_NAMES[id];
  if (type === undefined) throw new GgufError(`${what}: unknown value type ${id}`);
  return type;
}

function readArray(cursor: Cursor, what: string, depth: number): GgufArray {
  if (depth > GGUF_MAX_ARRAY_DEPTH) throw new GgufError(`${what}: arrays nested deeper than ${GGUF_MAX_ARRAY_DEPTH}`);
  const itemType = valueType(cursor.u32(`${what} (array item type)`), what);
  const length = cursor.u64(`${what} (array length)`);
  if (length * MIN_ITEM_BYTES[itemType] > cursor.remaining) {
    throw new GgufError(`${what}: array of ${length} ${itemType} items cannot fit in the ${cursor.remaining} bytes left in the file`);
  }
  const items: GgufArrayItem[] = new Array(length);
  for (let i = 0; i < length; i++) {
    items[i] = itemType === "array" ? readArray(cursor, `${what}[${i}]`, depth + 1) : cursor.scalar(itemType, `${what}[${i}]`);
  }
  return { itemType, items };
}

function readValue(cursor: Cursor, key: string): GgufValue {
  const what = `metadata key ${key}`;
  const type = valueType(cursor.u32(`${what} (value type)`), what);
  if (type === "array") return { type, value: readArray(cursor, what, 1) };
  return { type, value: cursor.scalar(type, what) } as GgufValue;
}

/** Parses and checks the header; reads only the header's bytes from `source`. */
export function parseGgufHeader(source: ByteSource): GgufHeader {
  const cursor = new Cursor(source);
  const magic = cursor.u32("magic");
  if (magic !== GGUF_MAGIC) {
    const text = Array.from(source.read(0, 4), (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`)).join("");
    throw new GgufError(`bad magic "${text}": not a GGUF file ("GGUF" expected)`);
  }
  const version = cursor.u32("version");
  if (version !== 2 && version !== 3) {
    if (version >= 0x01000000 && (version & 0xffff) === 0) throw new GgufError(`version ${version} looks byte-swapped: big-endian GGUF files are not supported`);
    throw new GgufError(`unsupported GGUF version ${version} (2 and 3 are supported)`);
  }
  const tensorCount = cursor.u64("tensor count");
  const metadataCount = cursor.u64("metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info 8 + 4 + 4 + 8.
  if (metadataCount * 13 > cursor.remaining) throw new GgufError(`metadata count ${metadataCount} cannot fit in a file of ${source.size} bytes`);
  if (tensorCount * 24 > cursor.remaining) throw new GgufError(`tensor count ${tensorCount} cannot fit in a file of ${source.size} bytes`);

  const metadata: GgufMetadata = new Map();
  for (let i = 0; i < metadataCount; i++) {
    const key = cursor.string(`metadata key #${i}`, GGUF_MAX_NAME_BYTES);
    if (metadata.has(key)) throw new GgufError(`metadata key ${key} appears twice`);
    metadata.set(key, readValue(cursor, key));
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const alignmentValue = metadata.get("general.alignment");
  if (alignmentValue !== undefined) {
    if (alignmentValue.type !== "uint32") throw new GgufError(`metadata key general.alignment is a ${alignmentValue.type}, a uint32 expected`);
    alignment = alignmentValue.value;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0) throw new GgufError(`metadata key general.alignment is ${alignment}, not a power of two`);
  }

  const infos: Omit<GgufTensorInfo, "fileOffset">[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = cursor.string(`tensor #${i} name`, GGUF_MAX_NAME_BYTES);
    if (names.has(name)) throw new GgufError(`tensor ${name} appears twice`);
    names.add(name);
    const nDims = cursor.u32(`tensor ${name} n_dims`);
    if (nDims > GGUF_MAX_DIMS) throw new GgufError(`tensor ${name}: ${nDims} dimensions, at most ${GGUF_MAX_DIMS} allowed`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(cursor.u64(`tensor ${name} ne[${d}]`));
    const type = cursor.u32(`tensor ${name} type`);
    const offset = cursor.u64(`tensor ${name} offset`);
    let typeInfo: GgmlTypeInfo;
    let bytes: number;
    try {
      typeInfo = ggmlTypeInfo(type);
      bytes = ggmlTensorBytes(type, dims);
    } catch (error) {
      if (error instanceof GgmlTypeError) throw new GgufError(`tensor ${name}: ${error.message}`);
      throw error;
    }
    if (offset % alignment !== 0) throw new GgufError(`tensor ${name}: data offset ${offset} is not a multiple of the alignment ${alignment}`);
    infos.push({ name, dims, type, typeInfo, offset, bytes });
  }

  const dataStart = Math.ceil(cursor.position / alignment) * alignment;
  const tensors = infos.map((info) => ({ ...info, fileOffset: dataStart + info.offset }));
  for (const tensor of tensors) {
    if (tensor.fileOffset + tensor.bytes > source.size) {
      throw new GgufError(`tensor ${tensor.name}: data [${tensor.fileOffset}, ${tensor.fileOffset + tensor.bytes}) runs past the end of the file (${source.size} bytes)`);
    }
  }
  const byOffset = [...tensors].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const before = byOffset[i - 1]!;
    const tensor = byOffset[i]!;
    if (tensor.offset < before.offset + before.bytes) throw new GgufError(`tensor ${tensor.name}: data overlaps tensor ${before.name}`);
  }
  return { version, metadata, tensors, alignment, dataStart, fileBytes: source.size };
}

/** Parses a whole GGUF file held in memory (the header; tensor bytes stay in `bytes`). */
export function parseGguf(bytes: Uint8Array): GgufHeader {
  return parseGgufHeader(bytesSource(bytes));
}

/** A ByteSource over an open file descriptor. */
export function fileSource(fd: number): ByteSource {
  const size = fstatSync(fd).size;
  return {
    size,
    read(offset, length) {
      const buffer = new Uint8Array(Math.max(0, Math.min(length, size - offset)));
      let done = 0;
      while (done < buffer.length) {
        const n = readSync(fd, buffer, done, buffer.length - done, offset + done);
        if (n === 0) break;
        done += n;
      }
      return buffer.subarray(0, done);
    },
  };
}

/** Opens `path` and reads its header only (a many-GB file opens in milliseconds). */
export function readGgufFile(path: string): GgufHeader {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    throw new GgufError(`cannot open ${path}: ${(error as Error).message}`);
  }
  try {
    return parseGgufHeader(fileSource(fd));
  } catch (error) {
    if (error instanceof GgufError) throw new GgufError(`${path}: ${error.message.replace(/^gguf: /, "")}`);
    throw error;
  } finally {
    closeSync(fd);
  }
}

/** One tensor's raw bytes, read from the file. */
export function readGgufTensorData(path: string, tensor: Pick<GgufTensorInfo, "name" | "fileOffset" | "bytes">): Uint8Array {
  const fd = openSync(path, "r");
  try {
    const bytes = fileSource(fd).read(tensor.fileOffset, tensor.bytes);
    if (bytes.length !== tensor.bytes) throw new GgufError(`${path}: tensor ${tensor.name}: file truncated (${bytes.length} of ${tensor.bytes} bytes)`);
    return bytes;
  } finally {
    closeSync(fd);
  }
}
