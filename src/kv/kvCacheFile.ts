/**
 * The chunk-cache file: one variant of a chunk's KV (K without RoPE, V) as bytes,
 * for the disk tier. Pure encoding and decoding; no I/O here (diskKvTier.ts does
 * that). Little-endian throughout.
 *
 *   "CTXRKV01"                 8 bytes of magic
 *   u32 N                      the JSON header's length (padding included)
 *   N bytes of UTF-8 JSON      {format, model, layers, kv_width, count, page_size,
 *                              dtype: "f32", key?, meta}, padded with spaces so
 *                              that the positions start at a multiple of 8
 *   u64 header checksum        xxHash64 of everything before it (magic to header)
 *   i32 positions[count]
 *   pages                      for each page of page_size tokens (the last one may
 *                              be shorter), for each layer: the page's K rows, then
 *                              its V rows (f32, kv_width values a row)
 *   u64 checksum               xxHash64 of everything before it
 *
 * The header checksum lets a reader trust the header (the variant's metadata, the
 * key, the sizes) from the file's first bytes alone, and tell a truncated file
 * from a damaged one; the trailer covers every byte before it, so any flipped
 * bit, truncation or appended byte is caught (xxHash64: a random change goes
 * unnoticed with probability 2^-64). Page-first lets a reader place whole pages
 * (the runner's 16-token blocks) as they arrive.
 */
import type { KvData, LayerKv } from "../runner/runnerProtocol.ts";
import { xxHash64 } from "../runtime/hashing.ts";

export const KV_CACHE_MAGIC = "CTXRKV01";
export const KV_CACHE_FORMAT_VERSION = 1;
/** Tokens a page by default (the runner's block size). */
export const DEFAULT_KV_PAGE_SIZE = 16;
/** Headers larger than this are treated as damage rather than allocated. */
export const MAX_KV_HEADER_BYTES = 16 * 1024 * 1024;
/** Magic and header length: what must be read to learn the header's length. */
export const KV_CACHE_PREAMBLE_BYTES = 12;
const CHECKSUM_BYTES = 8;
const PAYLOAD_ALIGNMENT = 8;

const MAGIC_BYTES = new TextEncoder().encode(KV_CACHE_MAGIC);
const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** What was wrong with a file; the message says it in words. */
export type KvCacheFileProblem =
  | "magic" // not a chunk-cache file
  | "truncated" // shorter than its header says
  | "trailing" // longer than its header says
  | "header" // header length, checksum, JSON or fields bad
  | "format" // another format version or dtype
  | "checksum" // the trailer does not match the bytes
  | "model" // written for another model
  | "geometry" // another number of layers or kv width, or KvData not of the declared shape
  | "key"; // written for another key

export class KvCacheFileError extends Error {
  constructor(
    readonly problem: KvCacheFileProblem,
    message: string,
  ) {
    super(`chunk cache file: ${message}`);
    this.name = "KvCacheFileError";
  }
}

/** What a file must have been written for. */
export interface KvCacheExpectation {
  modelIdentity: string;
  layers: number;
  kvWidth: number;
  /** When given, the file's key must be this one. */
  key?: string;
}

/** The parsed JSON header. */
export interface KvCacheFileHeader {
  format: number;
  model: string;
  layers: number;
  kv_width: number;
  count: number;
  page_size: number;
  dtype: "f32";
  key?: string;
  meta: Record<string, unknown>;
}

export interface EncodeKvCacheFileOptions {
  modelIdentity: string;
  layers: number;
  kvWidth: number;
  /** The variant's metadata: a plain JSON-serialisable object. */
  meta: object;
  /** Tokens a page (default DEFAULT_KV_PAGE_SIZE). */
  pageSize?: number;
  /** The name the file is stored under (the disk tier's variant id). */
  key?: string;
}

/** Where the parts of a file lie, from its header. */
export interface KvCacheFileLayout {
  header: KvCacheFileHeader;
  /** Bytes from the start to the end of the header checksum (where the positions start). */
  headerEnd: number;
  /** The whole file's size. */
  fileBytes: number;
}

export interface DecodedKvCacheFile extends KvCacheFileLayout {
  data: KvData;
  meta: Record<string, unknown>;
}

function hash(bytes: Uint8Array): bigint {
  return BigInt.asUintN(64, xxHash64(bytes));
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** The size of a file of `count` tokens whose header ends (checksum included) at `headerEnd`. */
function fileBytesFor(headerEnd: number, layers: number, kvWidth: number, count: number): number {
  return headerEnd + 4 * count + layers * 2 * count * kvWidth * 4 + CHECKSUM_BYTES;
}

/** Byte-swaps 4-byte words in place (for big-endian hosts only). */
function swap32(bytes: Uint8Array): void {
  for (let i = 0; i + 3 < bytes.length; i += 4) {
    const a = bytes[i]!;
    const b = bytes[i + 1]!;
    bytes[i] = bytes[i + 3]!;
    bytes[i + 1] = bytes[i + 2]!;
    bytes[i + 2] = b;
    bytes[i + 3] = a;
  }
}

function byteView(values: Float32Array | Int32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

/** Checks that `data` holds `count` tokens of `layers` × kv_width K and V values. */
function checkData(data: KvData, layers: number, kvWidth: number): number {
  const count = data.positions.length;
  if (data.layers.length !== layers) throw new KvCacheFileError("geometry", `${data.layers.length} layers of K/V for a model of ${layers}`);
  data.layers.forEach((layer: LayerKv, i: number) => {
    if (layer.k.length !== count * kvWidth || layer.v.length !== count * kvWidth) {
      throw new KvCacheFileError("geometry", `layer ${i} K/V must hold ${count} × ${kvWidth} values each, got ${layer.k.length} and ${layer.v.length}`);
    }
  });
  return count;
}

/** Encodes one variant as a whole file. `data` is not modified or kept. */
export function encodeKvCacheFile(data: KvData, options: EncodeKvCacheFileOptions): Uint8Array {
  const { modelIdentity, layers, kvWidth, meta, key } = options;
  const pageSize = options.pageSize ?? DEFAULT_KV_PAGE_SIZE;
  if (typeof modelIdentity !== "string" || modelIdentity === "") throw new KvCacheFileError("header", "the model identity must be a non-empty string");
  if (!isPositiveInteger(layers) || !isPositiveInteger(kvWidth)) throw new KvCacheFileError("geometry", `bad geometry: ${layers} layers, kv width ${kvWidth}`);
  if (!isPositiveInteger(pageSize)) throw new KvCacheFileError("header", `bad page size ${pageSize}`);
  if (key !== undefined && typeof key !== "string") throw new KvCacheFileError("header", "the key must be a string");
  if (!isPlainObject(meta)) throw new KvCacheFileError("header", "meta must be a JSON object");
  const count = checkData(data, layers, kvWidth);

  const header: KvCacheFileHeader = {
    format: KV_CACHE_FORMAT_VERSION,
    model: modelIdentity,
    layers,
    kv_width: kvWidth,
    count,
    page_size: pageSize,
    dtype: "f32",
    ...(key === undefined ? {} : { key }),
    meta: meta as Record<string, unknown>,
  };
  let json: string;
  try {
    json = JSON.stringify(header);
  } catch (error) {
    throw new KvCacheFileError("header", `meta is not JSON-serialisable (${(error as Error).message})`);
  }
  const text = new TextEncoder().encode(json);
  // Pad so that preamble + header + checksum (where the positions start) is a multiple of 8.
  const unpadded = KV_CACHE_PREAMBLE_BYTES + text.length + CHECKSUM_BYTES;
  const headerLength = text.length + ((PAYLOAD_ALIGNMENT - (unpadded % PAYLOAD_ALIGNMENT)) % PAYLOAD_ALIGNMENT);
  if (headerLength > MAX_KV_HEADER_BYTES) throw new KvCacheFileError("header", `header of ${headerLength} bytes is over the limit of ${MAX_KV_HEADER_BYTES}`);
  const headerEnd = KV_CACHE_PREAMBLE_BYTES + headerLength + CHECKSUM_BYTES;
  const fileBytes = fileBytesFor(headerEnd, layers, kvWidth, count);
  if (!Number.isSafeInteger(fileBytes) || fileBytes > 2 ** 53) throw new KvCacheFileError("geometry", "file too large");

  const file = new Uint8Array(fileBytes);
  const view = new DataView(file.buffer);
  file.set(MAGIC_BYTES, 0);
  view.setUint32(8, headerLength, true);
  file.set(text, KV_CACHE_PREAMBLE_BYTES);
  file.fill(0x20, KV_CACHE_PREAMBLE_BYTES + text.length, KV_CACHE_PREAMBLE_BYTES + headerLength);
  view.setBigUint64(headerEnd - CHECKSUM_BYTES, hash(file.subarray(0, headerEnd - CHECKSUM_BYTES)), true);

  let offset = headerEnd;
  file.set(byteView(data.positions), offset);
  offset += 4 * count;
  const rowBytes = 4 * kvWidth;
  for (let first = 0; first < count; first += pageSize) {
    const tokens = Math.min(pageSize, count - first);
    const from = first * rowBytes;
    const to = from + tokens * rowBytes;
    for (const layer of data.layers) {
      file.set(byteView(layer.k).subarray(from, to), offset);
      offset += to - from;
      file.set(byteView(layer.v).subarray(from, to), offset);
      offset += to - from;
    }
  }
  if (!HOST_LITTLE_ENDIAN) swap32(file.subarray(headerEnd, offset));
  view.setBigUint64(offset, hash(file.subarray(0, offset)), true);
  return file;
}

/**
 * The number of bytes from the start of a file to the end of its header checksum,
 * from its first KV_CACHE_PREAMBLE_BYTES bytes (checks the magic and the header
 * length's bound).
 */
export function kvCacheHeaderEnd(preamble: Uint8Array): number {
  for (let i = 0; i < Math.min(preamble.length, MAGIC_BYTES.length); i++) {
    if (preamble[i] !== MAGIC_BYTES[i]) throw new KvCacheFileError("magic", `bad magic (not a ${KV_CACHE_MAGIC} file)`);
  }
  if (preamble.length < MAGIC_BYTES.length) throw new KvCacheFileError("truncated", `${preamble.length} bytes is shorter than the magic`);
  if (preamble.length < KV_CACHE_PREAMBLE_BYTES) throw new KvCacheFileError("truncated", `${preamble.length} bytes is shorter than the header length field`);
  const headerLength = new DataView(preamble.buffer, preamble.byteOffset, KV_CACHE_PREAMBLE_BYTES).getUint32(8, true);
  if (headerLength > MAX_KV_HEADER_BYTES) throw new KvCacheFileError("header", `header length ${headerLength} is over the limit of ${MAX_KV_HEADER_BYTES}`);
  return KV_CACHE_PREAMBLE_BYTES + headerLength + CHECKSUM_BYTES;
}

function parseHeader(text: string): KvCacheFileHeader {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new KvCacheFileError("header", `header is not valid JSON (${(error as Error).message})`);
  }
  if (!isPlainObject(json)) throw new KvCacheFileError("header", "header is not a JSON object");
  if (json.format !== KV_CACHE_FORMAT_VERSION) throw new KvCacheFileError("format", `format version ${JSON.stringify(json.format)}, ${KV_CACHE_FORMAT_VERSION} expected`);
  if (json.dtype !== "f32") throw new KvCacheFileError("format", `dtype ${JSON.stringify(json.dtype)}, "f32" expected`);
  if (typeof json.model !== "string") throw new KvCacheFileError("header", "header has no model identity");
  for (const field of ["layers", "kv_width", "page_size"] as const) {
    if (!isPositiveInteger(json[field])) throw new KvCacheFileError("header", `header field ${field} is ${JSON.stringify(json[field])}, not a positive integer`);
  }
  const count = json.count;
  if (typeof count !== "number" || !Number.isSafeInteger(count) || count < 0) throw new KvCacheFileError("header", `header field count is ${JSON.stringify(count)}`);
  if (json.key !== undefined && typeof json.key !== "string") throw new KvCacheFileError("header", "header field key is not a string");
  if (!isPlainObject(json.meta)) throw new KvCacheFileError("header", "header field meta is not a JSON object");
  return json as unknown as KvCacheFileHeader;
}

function checkExpected(header: KvCacheFileHeader, expected: KvCacheExpectation): void {
  if (header.model !== expected.modelIdentity) {
    throw new KvCacheFileError("model", `written for another model (${header.model.slice(0, 16)}…, this one is ${expected.modelIdentity.slice(0, 16)}…)`);
  }
  if (header.layers !== expected.layers || header.kv_width !== expected.kvWidth) {
    throw new KvCacheFileError(
      "geometry",
      `written for ${header.layers} layers of kv width ${header.kv_width}, this model has ${expected.layers} of ${expected.kvWidth}`,
    );
  }
  if (expected.key !== undefined && header.key !== expected.key) {
    throw new KvCacheFileError("key", `written for key ${JSON.stringify(header.key ?? null)}, not ${JSON.stringify(expected.key)}`);
  }
}

/**
 * Reads and checks the header of a file of `fileBytes` bytes from its beginning
 * `prefix` (at least kvCacheHeaderEnd(prefix) bytes, or the whole file): magic,
 * header checksum, fields, the model and geometry expected, and that the file has
 * exactly the size the header implies. The payload is not checked (see
 * verifyKvCacheFile). Throws a KvCacheFileError naming the first problem.
 */
export function readKvCacheFileHeader(prefix: Uint8Array, fileBytes: number, expected: KvCacheExpectation): KvCacheFileLayout {
  const headerEnd = kvCacheHeaderEnd(prefix);
  if (fileBytes < headerEnd) throw new KvCacheFileError("truncated", `file of ${fileBytes} bytes ends inside its ${headerEnd}-byte header`);
  if (prefix.length < headerEnd) throw new KvCacheFileError("truncated", `only ${prefix.length} bytes given, the header needs ${headerEnd}`);
  const stored = new DataView(prefix.buffer, prefix.byteOffset + headerEnd - CHECKSUM_BYTES, CHECKSUM_BYTES).getBigUint64(0, true);
  if (stored !== hash(prefix.subarray(0, headerEnd - CHECKSUM_BYTES))) throw new KvCacheFileError("header", "header checksum mismatch");
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(prefix.subarray(KV_CACHE_PREAMBLE_BYTES, headerEnd - CHECKSUM_BYTES));
  } catch {
    throw new KvCacheFileError("header", "header is not valid UTF-8");
  }
  const header = parseHeader(text);
  checkExpected(header, expected);
  const size = fileBytesFor(headerEnd, header.layers, header.kv_width, header.count);
  if (fileBytes < size) throw new KvCacheFileError("truncated", `truncated: ${fileBytes} of ${size} bytes`);
  if (fileBytes > size) throw new KvCacheFileError("trailing", `${fileBytes - size} bytes after the end of the file (${size} bytes)`);
  return { header, headerEnd, fileBytes };
}

/** Checks a whole file: its header (readKvCacheFileHeader) and the trailer checksum. */
export function verifyKvCacheFile(bytes: Uint8Array, expected: KvCacheExpectation): KvCacheFileLayout {
  const layout = readKvCacheFileHeader(bytes, bytes.length, expected);
  const end = bytes.length - CHECKSUM_BYTES;
  const stored = new DataView(bytes.buffer, bytes.byteOffset + end, CHECKSUM_BYTES).getBigUint64(0, true);
  if (stored !== hash(bytes.subarray(0, end))) throw new KvCacheFileError("checksum", "checksum mismatch (the file is damaged)");
  return layout;
}

/**
 * Decodes a whole file after checking all of it (verifyKvCacheFile): the KV as
 * fresh arrays (nothing refers to `bytes`) and the variant's metadata.
 */
export function decodeKvCacheFile(bytes: Uint8Array, expected: KvCacheExpectation): DecodedKvCacheFile {
  const layout = verifyKvCacheFile(bytes, expected);
  const { layers, kv_width: kvWidth, count, page_size: pageSize } = layout.header;
  let offset = layout.headerEnd;
  const positions = new Int32Array(count);
  byteView(positions).set(bytes.subarray(offset, offset + 4 * count));
  offset += 4 * count;
  const out: LayerKv[] = [];
  for (let layer = 0; layer < layers; layer++) out.push({ k: new Float32Array(count * kvWidth), v: new Float32Array(count * kvWidth) });
  const targets = out.map(({ k, v }) => ({ k: byteView(k), v: byteView(v) }));
  const rowBytes = 4 * kvWidth;
  for (let first = 0; first < count; first += pageSize) {
    const pageBytes = Math.min(pageSize, count - first) * rowBytes;
    const at = first * rowBytes;
    for (const target of targets) {
      target.k.set(bytes.subarray(offset, offset + pageBytes), at);
      offset += pageBytes;
      target.v.set(bytes.subarray(offset, offset + pageBytes), at);
      offset += pageBytes;
    }
  }
  if (!HOST_LITTLE_ENDIAN) {
    swap32(byteView(positions));
    for (const target of targets) {
      swap32(target.k);
      swap32(target.v);
    }
  }
  return { ...layout, data: { positions, layers: out }, meta: layout.header.meta };
}
