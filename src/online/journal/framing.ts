/**
 * Line framing of journal records and snapshots.
 *
 * One frame a line: `<crc>\t<seq>\t<json>\n`, where
 *  - `<crc>` is the CRC-32 of the bytes of `<seq>\t<json>` as 8 lowercase hex digits,
 *  - `<seq>` is the record's sequence number in decimal (the snapshot's covered seq in a
 *    snapshot file),
 *  - `<json>` is the value as JSON (JSON.stringify never emits a raw newline).
 * A frame is valid only when it ends with `\n`, its checksum matches and its JSON parses,
 * so a torn write, a flipped bit or a stray line is always detected.
 */
import { crc32 } from "./crc32.ts";

const TAB = 0x09;
const NEWLINE = 0x0a;
const HEX = "0123456789abcdef";
/** `<crc>\t` */
const CRC_FIELD_BYTES = 9;
/** Sequence numbers stay below 2^53 (16 decimal digits). */
const MAX_SEQ_DIGITS = 16;

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** A growable byte buffer that frames are encoded into. */
export class ByteBuffer {
  bytes: Uint8Array;
  length = 0;

  constructor(capacity = 64 * 1024) {
    this.bytes = new Uint8Array(capacity);
  }

  /** Makes room for `extra` more bytes after `length`. */
  reserve(extra: number): void {
    const needed = this.length + extra;
    if (needed <= this.bytes.length) return;
    let capacity = this.bytes.length * 2;
    while (capacity < needed) capacity *= 2;
    const grown = new Uint8Array(capacity);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
  }

  /** The encoded bytes (a view, valid until the next write). */
  view(): Uint8Array {
    return this.bytes.subarray(0, this.length);
  }
}

/** Appends the frame of (seq, json) to `buffer`; `json` is already JSON text. */
export function encodeFrame(buffer: ByteBuffer, seq: number, json: string): void {
  if (!Number.isSafeInteger(seq) || seq < 0) throw new RangeError(`frame seq must be a non-negative safe integer, got ${seq}`);
  // UTF-8 takes at most 3 bytes per UTF-16 code unit.
  buffer.reserve(CRC_FIELD_BYTES + MAX_SEQ_DIGITS + 1 + json.length * 3 + 1);
  const bytes = buffer.bytes;
  const start = buffer.length;
  let p = start + CRC_FIELD_BYTES;
  p = writeDecimal(bytes, p, seq);
  bytes[p++] = TAB;
  p += encoder.encodeInto(json, bytes.subarray(p)).written;
  let crc = crc32(bytes, start + CRC_FIELD_BYTES, p);
  for (let i = 7; i >= 0; i--) {
    bytes[start + i] = HEX.charCodeAt(crc & 0xf);
    crc >>>= 4;
  }
  bytes[start + 8] = TAB;
  bytes[p++] = NEWLINE;
  buffer.length = p;
}

/** The frame of (seq, value) as bytes. */
export function frameBytes(seq: number, value: unknown): Uint8Array {
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError("value is not JSON-serialisable");
  const buffer = new ByteBuffer(json.length * 3 + 32);
  encodeFrame(buffer, seq, json);
  return buffer.view();
}

function writeDecimal(bytes: Uint8Array, at: number, value: number): number {
  const digits = String(value);
  for (let i = 0; i < digits.length; i++) bytes[at + i] = digits.charCodeAt(i);
  return at + digits.length;
}

export type BadFrameReason = "torn tail" | "checksum mismatch" | "malformed frame";

export interface Frame {
  seq: number;
  value: unknown;
  /** Byte offset of the frame's first byte. */
  offset: number;
  /** Byte offset just past its newline. */
  end: number;
}

export interface BadFrame {
  offset: number;
  bytes: number;
  reason: BadFrameReason;
}

export interface ParsedFrames {
  frames: Frame[];
  /** Invalid lines in file order; an unterminated last line is a "torn tail". */
  bad: BadFrame[];
}

/** Splits `bytes` into lines and validates each as a frame; never throws on bad input. */
export function parseFrames(bytes: Uint8Array): ParsedFrames {
  const frames: Frame[] = [];
  const bad: BadFrame[] = [];
  let start = 0;
  while (start < bytes.length) {
    const newline = bytes.indexOf(NEWLINE, start);
    if (newline < 0) {
      bad.push({ offset: start, bytes: bytes.length - start, reason: "torn tail" });
      break;
    }
    const result = parseLine(bytes, start, newline);
    if (typeof result === "string") bad.push({ offset: start, bytes: newline + 1 - start, reason: result });
    else frames.push({ seq: result.seq, value: result.value, offset: start, end: newline + 1 });
    start = newline + 1;
  }
  return { frames, bad };
}

/** Validates the line bytes[start, end) (without its newline). */
function parseLine(bytes: Uint8Array, start: number, end: number): { seq: number; value: unknown } | BadFrameReason {
  if (end - start < CRC_FIELD_BYTES + 3 || bytes[start + 8] !== TAB) return "malformed frame";
  let expected = 0;
  for (let i = start; i < start + 8; i++) {
    const digit = hexValue(bytes[i]!);
    if (digit < 0) return "malformed frame";
    expected = expected * 16 + digit;
  }
  const payload = start + CRC_FIELD_BYTES;
  if (crc32(bytes, payload, end) !== expected) return "checksum mismatch";
  let seq = 0;
  let p = payload;
  while (p < end && p - payload <= MAX_SEQ_DIGITS && bytes[p]! >= 0x30 && bytes[p]! <= 0x39) seq = seq * 10 + (bytes[p++]! - 0x30);
  if (p === payload || p - payload > MAX_SEQ_DIGITS || bytes[p] !== TAB || !Number.isSafeInteger(seq)) return "malformed frame";
  try {
    return { seq, value: JSON.parse(decoder.decode(bytes.subarray(p + 1, end))) };
  } catch {
    return "malformed frame";
  }
}

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  if (byte >= 0x61 && byte <= 0x66) return byte - 0x61 + 10;
  return -1;
}
