/**
 * Writes GGUF v3 files: the header (metadata of every value type, tensor infos), then
 * each tensor's bytes at an offset aligned to `general.alignment` (32 unless the
 * metadata sets it), padded with zeros. Tensor data is produced on demand, one tensor
 * at a time, so a large model is never held whole in memory; the file goes to a
 * temporary sibling that is renamed over the target on success and removed on failure.
 *
 *   writeGgufFile("out.gguf", metadata, [
 *     { name: "token_embd.weight", type: GGML_TYPE.Q8_0, dims: [hidden, vocab], data: () => bytes },
 *   ]);
 *   encodeGguf(metadata, tensorsWithBytes)   // the same file as bytes in memory (tests)
 *   await writeGgufFileAsync(path, metadata, tensors)  // data() returns a Promise; the next
 *                                            // tensor's data is under way while one is written
 */
import { GGUF_VALUE_TYPE, type GgufArray, GgufError, type GgufMetadata, type GgufValueType, checkGgufItem } from "./ggufMetadata.ts";
import { GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_DIMS } from "./ggufReader.ts";
import { GgmlTypeError, ggmlTensorBytes } from "./ggufTypes.ts";
import { writeAll, writeFileAtomically, writeFileAtomicallyAsync } from "../../files/atomicFile.ts";

export interface GgufTensorToWrite {
  name: string;
  type: number;
  /** ne[0..]: ne[0] is the number of columns. */
  dims: readonly number[];
  /** The tensor's bytes, whole or in chunks; called once, when the tensor is written. */
  data(): Uint8Array | Iterable<Uint8Array>;
}

export interface GgufLayout {
  header: Uint8Array;
  alignment: number;
  /** Each tensor's offset relative to the data section, and its bytes. */
  tensors: { name: string; offset: number; bytes: number }[];
  fileBytes: number;
}

const encoder = new TextEncoder();

/** Little-endian bytes appended into a growing buffer. */
class ByteWriter {
  private buffer = new Uint8Array(1 << 16);
  private view = new DataView(this.buffer.buffer);
  length = 0;

  private reserve(bytes: number): number {
    if (this.length + bytes > this.buffer.length) {
      const grown = new Uint8Array(Math.max(this.buffer.length * 2, this.length + bytes));
      grown.set(this.buffer.subarray(0, this.length));
      this.buffer = grown;
      this.view = new DataView(grown.buffer);
    }
    const at = this.length;
    this.length += bytes;
    return at;
  }

  // Each reserves first: `this.view.set…(this.reserve(n), …)` would evaluate `this.view` before
  // reserve() replaces it when the buffer grows, and write into the old buffer.
  u8(v: number) { const at = this.reserve(1); this.view.setUint8(at, v); }
  i8(v: number) { const at = this.reserve(1); this.view.setInt8(at, v); }
  u16(v: number) { const at = this.reserve(2); this.view.setUint16(at, v, true); }
  i16(v: number) { const at = this.reserve(2); this.view.setInt16(at, v, true); }
  u32(v: number) { const at = this.reserve(4); this.view.setUint32(at, v, true); }
  i32(v: number) { const at = this.reserve(4); this.view.setInt32(at, v, true); }
  f32(v: number) { const at = this.reserve(4); this.view.setFloat32(at, v, true); }
  f64(v: number) { const at = this.reserve(8); this.view.setFloat64(at, v, true); }
  u64(v: bigint | number) { const at = this.reserve(8); this.view.setBigUint64(at, BigInt(v), true); }
  i64(v: bigint) { const at = this.reserve(8); this.view.setBigInt64(at, v, true); }
  string(text: string) {
    const bytes = encoder.encode(text);
    this.u64(bytes.length);
    const at = this.reserve(bytes.length);
    this.buffer.set(bytes, at);
  }
  pad(alignment: number) { this.reserve((alignment - (this.length % alignment)) % alignment); }
  bytes(): Uint8Array { return this.buffer.slice(0, this.length); }
}

function writeItem(out: ByteWriter, type: GgufValueType, item: unknown): void {
  switch (type) {
    case "uint8": return out.u8(item as number);
    case "int8": return out.i8(item as number);
    case "uint16": return out.u16(item as number);
    case "int16": return out.i16(item as number);
    case "uint32": return out.u32(item as number);
    case "int32": return out.i32(item as number);
    case "float32": return out.f32(item as number);
    case "float64": return out.f64(item as number);
    case "uint64": return out.u64(item as bigint);
    case "int64": return out.i64(item as bigint);
    case "bool": return out.u8(item ? 1 : 0);
    case "string": return out.string(item as string);
    case "array": {
      const array = item as GgufArray;
      out.u32(GGUF_VALUE_TYPE[array.itemType]);
      out.u64(array.items.length);
      for (const element of array.items) writeItem(out, array.itemType, element);
    }
  }
}

/** Plans the file: header bytes (padded to the alignment) and each tensor's offset. */
export function ggufLayout(metadata: GgufMetadata, tensors: readonly Omit<GgufTensorToWrite, "data">[]): GgufLayout {
  const alignmentValue = metadata.get("general.alignment");
  let alignment = GGUF_DEFAULT_ALIGNMENT;
  if (alignmentValue !== undefined) {
    if (alignmentValue.type !== "uint32" || alignmentValue.value === 0 || (alignmentValue.value & (alignmentValue.value - 1)) !== 0) {
      throw new GgufError("metadata key general.alignment must be a uint32 power of two");
    }
    alignment = alignmentValue.value;
  }
  const out = new ByteWriter();
  out.u32(GGUF_MAGIC);
  out.u32(3);
  out.u64(tensors.length);
  out.u64(metadata.size);
  for (const [key, value] of metadata) {
    if (key === "") throw new GgufError("a metadata key may not be empty");
    checkGgufItem(value.type, value.value, `metadata key ${key}`);
    out.string(key);
    out.u32(GGUF_VALUE_TYPE[value.type]);
    writeItem(out, value.type, value.value);
  }
  const names = new Set<string>();
  const placed: GgufLayout["tensors"] = [];
  let offset = 0;
  for (const tensor of tensors) {
    if (tensor.name === "") throw new GgufError("a tensor name may not be empty");
    if (names.has(tensor.name)) throw new GgufError(`tensor ${tensor.name} given twice`);
    names.add(tensor.name);
    if (tensor.dims.length > GGUF_MAX_DIMS) throw new GgufError(`tensor ${tensor.name}: ${tensor.dims.length} dimensions, at most ${GGUF_MAX_DIMS} allowed`);
    let bytes: number;
    try {
      bytes = ggmlTensorBytes(tensor.type, tensor.dims);
    } catch (error) {
      if (error instanceof GgmlTypeError) throw new GgufError(`tensor ${tensor.name}: ${error.message}`);
      throw error;
    }
    out.string(tensor.name);
    out.u32(tensor.dims.length);
    for (const dim of tensor.dims) out.u64(dim);
    out.u32(tensor.type);
    out.u64(offset);
    placed.push({ name: tensor.name, offset, bytes });
    offset = Math.ceil((offset + bytes) / alignment) * alignment;
  }
  out.pad(alignment);
  const header = out.bytes();
  const last = placed[placed.length - 1];
  return { header, alignment, tensors: placed, fileBytes: header.length + (last ? last.offset + last.bytes : 0) };
}

/** The file's bytes in order: header, then each tensor's data and its padding. */
export function* ggufChunks(metadata: GgufMetadata, tensors: readonly GgufTensorToWrite[]): Generator<Uint8Array> {
  const layout = ggufLayout(metadata, tensors);
  yield layout.header;
  let position = 0;
  for (let i = 0; i < tensors.length; i++) {
    const tensor = tensors[i]!;
    const place = layout.tensors[i]!;
    if (place.offset > position) yield new Uint8Array(place.offset - position);
    let written = 0;
    const data = tensor.data();
    for (const chunk of data instanceof Uint8Array ? [data] : data) {
      written += chunk.length;
      if (written > place.bytes) throw new GgufError(`tensor ${tensor.name}: more than the ${place.bytes} bytes its type and dims take`);
      yield chunk;
    }
    if (written !== place.bytes) throw new GgufError(`tensor ${tensor.name}: ${written} bytes given, ${place.bytes} expected`);
    position = place.offset + place.bytes;
  }
}

/** The whole file in memory (small files, tests). */
export function encodeGguf(metadata: GgufMetadata, tensors: readonly GgufTensorToWrite[]): Uint8Array {
  const chunks = [...ggufChunks(metadata, tensors)];
  const file = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0));
  let offset = 0;
  for (const chunk of chunks) {
    file.set(chunk, offset);
    offset += chunk.length;
  }
  return file;
}

/**
 * Writes the file through a temporary sibling renamed on success (removed on failure);
 * returns its size. Errors from the data callbacks come through as they are.
 */
export function writeGgufFile(path: string, metadata: GgufMetadata, tensors: readonly GgufTensorToWrite[]): number {
  let written = 0;
  writeFileAtomically(path, (fd) => {
    for (const chunk of ggufChunks(metadata, tensors)) {
      writeAll(fd, chunk);
      written += chunk.length;
    }
  });
  return written;
}

export interface GgufTensorToWriteAsync extends Omit<GgufTensorToWrite, "data"> {
  /** The tensor's bytes; called once, while the tensor before it is being written. */
  data(): Promise<Uint8Array>;
}

/** writeGgufFile with asynchronous tensor data, one tensor ahead of the one being written. */
export async function writeGgufFileAsync(path: string, metadata: GgufMetadata, tensors: readonly GgufTensorToWriteAsync[]): Promise<number> {
  const layout = ggufLayout(metadata, tensors);
  let written = 0;
  await writeFileAtomicallyAsync(path, async (fd) => {
    const write = (bytes: Uint8Array) => {
      writeAll(fd, bytes);
      written += bytes.length;
    };
    write(layout.header);
    let next: Promise<Uint8Array> | null = tensors.length > 0 ? tensors[0]!.data() : null;
    let position = 0;
    try {
      for (let i = 0; i < tensors.length; i++) {
        const data = await next!;
        next = i + 1 < tensors.length ? tensors[i + 1]!.data() : null;
        const place = layout.tensors[i]!;
        if (data.length !== place.bytes) throw new GgufError(`tensor ${tensors[i]!.name}: ${data.length} bytes given, ${place.bytes} expected`);
        if (place.offset > position) write(new Uint8Array(place.offset - position));
        write(data);
        position = place.offset + place.bytes;
      }
    } finally {
      next?.catch(() => {}); // a failure ahead of a failure: the first one is reported
    }
  });
  return written;
}
