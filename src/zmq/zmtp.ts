/**
 * The ZeroMQ wire protocol, ZMTP 3.1 with NULL security (rfc.zeromq.org 23 and 37), the part
 * ctxr's sockets need (PUB and ROUTER that bind, SUB and DEALER that connect), pure: the
 * greeting, frames, commands (READY, SUBSCRIBE, CANCEL, PING/PONG) and READY's metadata.
 *
 * ctxr speaks it itself because the `zeromq` npm addon cannot run under Bun (it calls libuv's
 * uv_poll_init_socket, which Bun does not implement), and a single compiled binary could not
 * carry a native addon anyway.
 */

export const GREETING_BYTES = 64;
const SIGNATURE_BYTES = 10;

const FLAG_MORE = 0x01;
const FLAG_LONG = 0x02;
const FLAG_COMMAND = 0x04;

export class ZmtpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ZmtpError";
  }
}

/** Our greeting: ZMTP 3.1, mechanism NULL, as-server 0 (NULL has no roles). */
export function greeting(): Uint8Array {
  const out = new Uint8Array(GREETING_BYTES);
  out[0] = 0xff;
  // Padding: a ZMTP 1.0 peer reads it as the length of an empty identity, plus one.
  out[8] = 0x01;
  out[9] = 0x7f;
  out[10] = 3;
  out[11] = 1;
  out.set(new TextEncoder().encode("NULL"), 12);
  return out;
}

export interface PeerGreeting {
  major: number;
  minor: number;
  mechanism: string;
}

/** Whether the first bytes seen can start a ZMTP 3 greeting (checked as soon as they arrive). */
export function signatureMismatch(bytes: Uint8Array): string | null {
  if (bytes.length >= 1 && bytes[0] !== 0xff) return "not a ZMTP peer (bad signature)";
  if (bytes.length >= SIGNATURE_BYTES && (bytes[9]! & 1) === 0) return "ZMTP 1.0 peers are not supported (3.0 or later is)";
  if (bytes.length > SIGNATURE_BYTES && bytes[SIGNATURE_BYTES]! < 3) return `ZMTP ${bytes[SIGNATURE_BYTES]} peers are not supported (3.0 or later is)`;
  return null;
}

export function parseGreeting(bytes: Uint8Array): PeerGreeting {
  if (bytes.length < GREETING_BYTES) throw new ZmtpError(`greeting: ${bytes.length} of ${GREETING_BYTES} bytes`);
  const mismatch = signatureMismatch(bytes);
  if (mismatch !== null) throw new ZmtpError(mismatch);
  const mechanism = new TextDecoder().decode(bytes.subarray(12, 32)).replace(/\0+$/, "");
  return { major: bytes[10]!, minor: bytes[11]!, mechanism };
}

export interface Frame {
  body: Uint8Array;
  more: boolean;
  command: boolean;
  /** Over the reader's limit and skipped (`body` is empty). */
  oversized?: true;
}

export function encodeFrame(body: Uint8Array, more: boolean, command = false): Uint8Array {
  const long = body.length > 255;
  const header = long ? 9 : 2;
  const out = new Uint8Array(header + body.length);
  out[0] = (more ? FLAG_MORE : 0) | (long ? FLAG_LONG : 0) | (command ? FLAG_COMMAND : 0);
  if (long) new DataView(out.buffer).setBigUint64(1, BigInt(body.length), false);
  else out[1] = body.length;
  out.set(body, header);
  return out;
}

/** A multipart message: every frame but the last has MORE set. */
export function encodeMessage(frames: readonly Uint8Array[]): Uint8Array {
  return Buffer.concat(frames.map((frame, i) => encodeFrame(frame, i < frames.length - 1)));
}

/** A command frame: name length, name, data. */
export function encodeCommand(name: string, data: Uint8Array = new Uint8Array(0)): Uint8Array {
  const nameBytes = new TextEncoder().encode(name);
  const body = new Uint8Array(1 + nameBytes.length + data.length);
  body[0] = nameBytes.length;
  body.set(nameBytes, 1);
  body.set(data, 1 + nameBytes.length);
  return encodeFrame(body, false, true);
}

export function parseCommand(body: Uint8Array): { name: string; data: Uint8Array } {
  if (body.length < 1 || body.length < 1 + body[0]!) throw new ZmtpError("command frame shorter than its name");
  const end = 1 + body[0]!;
  return { name: new TextDecoder().decode(body.subarray(1, end)), data: body.subarray(end) };
}

/** READY's metadata: name length (1 byte), name, value length (4 bytes, big-endian), value. */
export function encodeMetadata(properties: Readonly<Record<string, Uint8Array>>): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const [name, value] of Object.entries(properties)) {
    const nameBytes = new TextEncoder().encode(name);
    const head = new Uint8Array(1 + nameBytes.length + 4);
    head[0] = nameBytes.length;
    head.set(nameBytes, 1);
    new DataView(head.buffer).setUint32(1 + nameBytes.length, value.length, false);
    parts.push(head, value);
  }
  return Buffer.concat(parts);
}

/** Metadata properties by lower-cased name (names are case-insensitive). */
export function parseMetadata(data: Uint8Array): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  while (at < data.length) {
    const nameLength = data[at]!;
    if (at + 1 + nameLength + 4 > data.length) throw new ZmtpError("metadata: truncated property name");
    const name = new TextDecoder().decode(data.subarray(at + 1, at + 1 + nameLength)).toLowerCase();
    const valueLength = view.getUint32(at + 1 + nameLength, false);
    const start = at + 1 + nameLength + 4;
    if (start + valueLength > data.length) throw new ZmtpError(`metadata: truncated value of ${name}`);
    out.set(name, data.subarray(start, start + valueLength));
    at = start + valueLength;
  }
  return out;
}

export function readyCommand(socketType: string): Uint8Array {
  return encodeCommand("READY", encodeMetadata({ "Socket-Type": new TextEncoder().encode(socketType) }));
}

/** A heartbeat: PING with a TTL of 0 (the peer keeps no timer of its own) and no context. */
export function pingCommand(): Uint8Array {
  return encodeCommand("PING", new Uint8Array(2));
}

/**
 * A subscription to messages whose first frame starts with `prefix`: the SUBSCRIBE command for a
 * ZMTP 3.1 peer, a message of 1 then the prefix for a 3.0 one.
 */
export function subscription(prefix: Uint8Array, peerMinor: number): Uint8Array {
  if (peerMinor >= 1) return encodeCommand("SUBSCRIBE", prefix);
  return encodeFrame(Buffer.concat([Uint8Array.of(1), prefix]), false);
}

/** The answer to a PING: PONG with the ping's context (what follows its 2-byte TTL). */
export function pongCommand(pingData: Uint8Array): Uint8Array {
  return encodeCommand("PONG", pingData.subarray(Math.min(2, pingData.length)));
}

/**
 * Splits a byte stream into frames. A frame longer than `maxFrameBytes` is refused (ZmtpError),
 * or, with `skipOversized`, stands as an empty frame marked `oversized` while its bytes are
 * discarded as they arrive (a subscriber drops one message and keeps its connection).
 *
 * Each frame's body is copied once, from the chunks as they arrive, into a buffer of its exact
 * size (known from its header); nothing else of a chunk is kept. Joining the chunks first and
 * then copying the body out held three copies of a large frame until the collector ran, and a
 * run of 15 MiB messages grew the process by hundreds of megabytes.
 */
export class FrameReader {
  /** The header being read: flags, then a 1- or 8-byte size. */
  private readonly head = new Uint8Array(9);
  private headFilled = 0;
  /** The body being filled, with its frame's flags. */
  private body: Uint8Array | null = null;
  private bodyFilled = 0;
  private bodyFlags = 0;
  /** Bytes of an oversized frame still to discard. */
  private skipping = 0;

  constructor(
    private readonly maxFrameBytes: number,
    private readonly skipOversized = false,
  ) {}

  push(chunk: Uint8Array): Frame[] {
    const frames: Frame[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.skipping > 0) {
        const skipped = Math.min(this.skipping, chunk.length - at);
        this.skipping -= skipped;
        at += skipped;
      } else if (this.body !== null) {
        const taken = Math.min(this.body.length - this.bodyFilled, chunk.length - at);
        this.body.set(chunk.subarray(at, at + taken), this.bodyFilled);
        this.bodyFilled += taken;
        at += taken;
        if (this.bodyFilled === this.body.length) {
          frames.push(frameOf(this.bodyFlags, this.body));
          this.body = null;
        }
      } else {
        this.head[this.headFilled++] = chunk[at++]!;
        const exactSize = this.headerSize();
        if (exactSize === null) continue;
        const size = Number(exactSize);
        const flags = this.head[0]!;
        this.headFilled = 0;
        if (size > this.maxFrameBytes) {
          if (!this.skipOversized || size > Number.MAX_SAFE_INTEGER) throw new ZmtpError(`a ${exactSize}-byte frame is over the ${this.maxFrameBytes}-byte limit`);
          frames.push({ ...frameOf(flags, new Uint8Array(0)), oversized: true });
          this.skipping = size;
        } else if (chunk.length - at >= size) {
          // A copy (a socket's chunks are Buffers, whose slice() is a view).
          frames.push(frameOf(flags, Uint8Array.prototype.slice.call(chunk, at, at + size)));
          at += size;
        } else {
          this.body = new Uint8Array(size);
          this.bodyFilled = 0;
          this.bodyFlags = flags;
        }
      }
    }
    return frames;
  }

  /** The size once the header is whole, else null; refuses reserved flag bits at the first byte. */
  private headerSize(): bigint | null {
    const flags = this.head[0]!;
    if (this.headFilled === 1) {
      if ((flags & ~(FLAG_MORE | FLAG_LONG | FLAG_COMMAND)) !== 0) throw new ZmtpError(`frame flags 0x${flags.toString(16)} have reserved bits set`);
      return null;
    }
    if ((flags & FLAG_LONG) === 0) return BigInt(this.head[1]!);
    if (this.headFilled < 9) return null;
    return new DataView(this.head.buffer, 1, 8).getBigUint64(0, false);
  }
}

function frameOf(flags: number, body: Uint8Array): Frame {
  const command = (flags & FLAG_COMMAND) !== 0;
  return { body, more: !command && (flags & FLAG_MORE) !== 0, command };
}
