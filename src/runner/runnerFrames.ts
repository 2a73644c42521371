/**
 * The runner protocol's frames (cuda/PROTOCOL.md): op codes and statuses, body writer and reader,
 * request and response frames (length-prefixed, little-endian) and the incremental reader that
 * cuts stdout chunks into frames. Pure; the op bodies are in runnerProtocol.ts.
 *
 * Request frame:  u32 length, u32 op, u32 id, body
 * Response frame: u32 length, u32 id, u32 status, body
 */
export const Op = {
  INFO: 1,
  ALLOC: 2,
  FREE: 3,
  COPY: 4,
  FORWARD: 5,
  EXPORT: 6,
  IMPORT: 7,
  SHUTDOWN: 8,
  MOVE: 9,
  PROFILE: 10,
  RELOCATE: 11,
  KEY_SUMMARY: 12,
  KEY_SCORES: 13,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

export const OP_NAMES: Record<number, string> = Object.fromEntries(Object.entries(Op).map(([name, code]) => [code, name]));

export const Status = {
  OK: 0,
  /** The request was invalid; the runner's state is unchanged. */
  BAD_REQUEST: 1,
  /** ALLOC: fewer blocks free than asked for (nothing allocated). */
  OUT_OF_BLOCKS: 2,
  INTERNAL: 3,
} as const;

/** The id of the unsolicited INFO (or load failure) response the runner writes once loaded. */
export const READY_ID = 0;

/** Frames larger than this are treated as a corrupt stream rather than allocated. */
export const MAX_FRAME_BYTES = 2 ** 31 - 1;

const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A malformed frame or body: the stream can no longer be trusted. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

// ---------------------------------------------------------------------------
// Writing and reading packed little-endian values

type U32Source = ArrayLike<number>;

/** Builds a body from u32/i32/f32 values and arrays; sizes are computed up front by the caller. */
export class BodyWriter {
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  private offset = 0;

  constructor(byteLength: number) {
    this.bytes = new Uint8Array(byteLength);
    this.view = new DataView(this.bytes.buffer);
  }

  u32(value: number): this {
    if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new ProtocolError(`not a u32: ${value}`);
    this.view.setUint32(this.offset, value, true);
    this.offset += 4;
    return this;
  }

  i32(value: number): this {
    if (!Number.isInteger(value) || value < -0x80000000 || value > 0x7fffffff) throw new ProtocolError(`not an i32: ${value}`);
    this.view.setInt32(this.offset, value, true);
    this.offset += 4;
    return this;
  }

  u32s(values: U32Source): this {
    for (let i = 0; i < values.length; i++) this.u32(values[i]!);
    return this;
  }

  i32s(values: U32Source): this {
    for (let i = 0; i < values.length; i++) this.i32(values[i]!);
    return this;
  }

  f32s(values: Float32Array): this {
    if (HOST_LITTLE_ENDIAN) {
      this.bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), this.offset);
      this.offset += values.byteLength;
    } else {
      for (let i = 0; i < values.length; i++) {
        this.view.setFloat32(this.offset, values[i]!, true);
        this.offset += 4;
      }
    }
    return this;
  }

  /** The body, checking that exactly the planned bytes were written. */
  finish(): Uint8Array {
    if (this.offset !== this.bytes.length) throw new ProtocolError(`body size mismatch: wrote ${this.offset} of ${this.bytes.length} bytes`);
    return this.bytes;
  }
}

/** Reads packed little-endian values from a body, with bounds checks naming what was being read. */
export class BodyReader {
  private readonly view: DataView;
  offset = 0;

  constructor(
    readonly bytes: Uint8Array,
    private readonly what: string,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get remaining(): number {
    return this.bytes.length - this.offset;
  }

  private need(bytes: number, field: string): void {
    if (this.offset + bytes > this.bytes.length) {
      throw new ProtocolError(`${this.what}: body too short reading ${field} (${bytes} bytes at offset ${this.offset} of ${this.bytes.length})`);
    }
  }

  u32(field: string): number {
    this.need(4, field);
    const value = this.view.getUint32(this.offset, true);
    this.offset += 4;
    return value;
  }

  u32s(count: number, field: string): Uint32Array {
    this.need(count * 4, field);
    const out = new Uint32Array(count);
    for (let i = 0; i < count; i++) out[i] = this.view.getUint32(this.offset + i * 4, true);
    this.offset += count * 4;
    return out;
  }

  i32s(count: number, field: string): Int32Array {
    this.need(count * 4, field);
    const out = new Int32Array(count);
    for (let i = 0; i < count; i++) out[i] = this.view.getInt32(this.offset + i * 4, true);
    this.offset += count * 4;
    return out;
  }

  f32s(count: number, field: string): Float32Array {
    this.need(count * 4, field);
    let out: Float32Array;
    const at = this.bytes.byteOffset + this.offset;
    if (HOST_LITTLE_ENDIAN && at % 4 === 0) {
      // A view, not a copy (a decode step's logits are 600-800 KB): FrameReader gives every
      // frame its own buffer, which nothing writes after.
      out = new Float32Array(this.bytes.buffer, at, count);
    } else if (HOST_LITTLE_ENDIAN) {
      out = new Float32Array(this.bytes.slice(this.offset, this.offset + count * 4).buffer);
    } else {
      out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = this.view.getFloat32(this.offset + i * 4, true);
    }
    this.offset += count * 4;
    return out;
  }

  /** Throws unless the whole body was consumed. */
  end(): void {
    if (this.offset !== this.bytes.length) throw new ProtocolError(`${this.what}: ${this.bytes.length - this.offset} unexpected trailing bytes`);
  }
}

// ---------------------------------------------------------------------------
// Frames

/** A whole request frame: u32 length, u32 op, u32 id, body. */
export function encodeRequest(op: OpCode, id: number, body: Uint8Array = new Uint8Array(0)): Uint8Array {
  const length = 8 + body.length;
  if (length > MAX_FRAME_BYTES) throw new ProtocolError(`request of ${length} bytes is over the frame limit`);
  const frame = new Uint8Array(4 + length);
  const view = new DataView(frame.buffer);
  view.setUint32(0, length, true);
  view.setUint32(4, op, true);
  view.setUint32(8, id >>> 0, true);
  frame.set(body, 12);
  return frame;
}

export interface ResponseFrame {
  id: number;
  status: number;
  body: Uint8Array;
}

/** A whole response frame (used by tests and fakes): u32 length, u32 id, u32 status, body. */
export function encodeResponse(id: number, status: number, body: Uint8Array = new Uint8Array(0)): Uint8Array {
  const frame = new Uint8Array(12 + body.length);
  const view = new DataView(frame.buffer);
  view.setUint32(0, 8 + body.length, true);
  view.setUint32(4, id >>> 0, true);
  view.setUint32(8, status, true);
  frame.set(body, 12);
  return frame;
}

export interface RequestFrame {
  op: number;
  id: number;
  body: Uint8Array;
}

/**
 * Cuts a byte stream into frames as chunks arrive: push() each chunk and get the
 * frames it completed (zero or more). A frame split across chunks is kept until
 * its last byte arrives. Each returned body is its own copy.
 */
export class FrameReader {
  private buffer = new Uint8Array(64 * 1024);
  private start = 0;
  private end = 0;

  constructor(private readonly maxFrameBytes = MAX_FRAME_BYTES) {}

  /** Bytes received that do not yet form a whole frame. */
  get pending(): number {
    return this.end - this.start;
  }

  /** Raw frames: the 4-byte length prefix removed, the rest (header + body) returned. */
  pushRaw(chunk: Uint8Array): Uint8Array[] {
    this.append(chunk);
    const frames: Uint8Array[] = [];
    for (;;) {
      if (this.end - this.start < 4) break;
      const length = (this.buffer[this.start]! | (this.buffer[this.start + 1]! << 8) | (this.buffer[this.start + 2]! << 16) | (this.buffer[this.start + 3]! << 24)) >>> 0;
      if (length < 8) throw new ProtocolError(`frame length ${length} is shorter than its 8-byte header`);
      if (length > this.maxFrameBytes) throw new ProtocolError(`frame length ${length} is over the limit of ${this.maxFrameBytes} bytes`);
      if (this.end - this.start < 4 + length) {
        this.reserve(4 + length);
        break;
      }
      frames.push(this.buffer.slice(this.start + 4, this.start + 4 + length));
      this.start += 4 + length;
    }
    if (this.start === this.end) this.start = this.end = 0;
    return frames;
  }

  /** Response frames completed by this chunk. */
  push(chunk: Uint8Array): ResponseFrame[] {
    return this.pushRaw(chunk).map((raw) => {
      const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      return { id: view.getUint32(0, true), status: view.getUint32(4, true), body: raw.subarray(8) };
    });
  }

  /** Request frames completed by this chunk (the runner's side; for tests and fakes). */
  pushRequests(chunk: Uint8Array): RequestFrame[] {
    return this.pushRaw(chunk).map((raw) => {
      const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      return { op: view.getUint32(0, true), id: view.getUint32(4, true), body: raw.subarray(8) };
    });
  }

  private append(chunk: Uint8Array): void {
    this.reserve(this.end - this.start + chunk.length);
    this.buffer.set(chunk, this.end);
    this.end += chunk.length;
  }

  /** Makes room for `bytes` unread bytes from `start` (compacting or growing). */
  private reserve(bytes: number): void {
    if (this.start + bytes <= this.buffer.length) return;
    const unread = this.end - this.start;
    if (bytes <= this.buffer.length) {
      this.buffer.copyWithin(0, this.start, this.end);
    } else {
      let size = this.buffer.length;
      while (size < bytes) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.buffer.subarray(this.start, this.end));
      this.buffer = grown;
    }
    this.start = 0;
    this.end = unread;
  }
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** The UTF-8 message of an error response. */
export function decodeText(body: Uint8Array): string {
  return decoder.decode(body);
}

export function encodeText(text: string): Uint8Array {
  return encoder.encode(text);
}
