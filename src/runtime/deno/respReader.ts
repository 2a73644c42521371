/**
 * RESP3 replies (Redis's wire format) parsed from a byte stream, whole replies at a time. Pure:
 * no I/O. Bulk strings come back as bytes; maps as plain objects (keys as text), as Bun's client
 * gives them; an error reply as a RespError value (the caller rejects with it).
 */
export class RespError extends Error {}

export type RespValue = string | number | bigint | boolean | null | Uint8Array | RespError | RespValue[] | { [key: string]: RespValue };

/** Not enough bytes yet for a whole reply. */
const INCOMPLETE = Symbol("incomplete");

const decoder = new TextDecoder();

export class RespReader {
  private buffer = new Uint8Array(0);
  private offset = 0;

  /** Appends bytes as they arrive. */
  push(chunk: Uint8Array): void {
    const rest = this.buffer.subarray(this.offset);
    const joined = new Uint8Array(rest.length + chunk.length);
    joined.set(rest, 0);
    joined.set(chunk, rest.length);
    this.buffer = joined;
    this.offset = 0;
  }

  /** The next whole reply, or undefined when more bytes are needed. Push messages (>) are skipped. */
  next(): RespValue | undefined {
    for (;;) {
      const start = this.offset;
      const value = this.value();
      if (value === INCOMPLETE) {
        this.offset = start;
        return undefined;
      }
      if (value !== PUSH) return value;
    }
  }

  private line(): string | typeof INCOMPLETE {
    for (let i = this.offset; i + 1 < this.buffer.length; i++) {
      if (this.buffer[i] === 13 && this.buffer[i + 1] === 10) {
        const text = decoder.decode(this.buffer.subarray(this.offset, i));
        this.offset = i + 2;
        return text;
      }
    }
    return INCOMPLETE;
  }

  private bytes(length: number): Uint8Array | typeof INCOMPLETE {
    if (this.offset + length + 2 > this.buffer.length) return INCOMPLETE;
    const bytes = this.buffer.slice(this.offset, this.offset + length);
    this.offset += length + 2;
    return bytes;
  }

  private value(): RespValue | typeof INCOMPLETE | typeof PUSH {
    if (this.offset >= this.buffer.length) return INCOMPLETE;
    const type = String.fromCharCode(this.buffer[this.offset]!);
    this.offset++;
    const head = this.line();
    if (head === INCOMPLETE) return INCOMPLETE;
    switch (type) {
      case "+":
        return head;
      case "-":
        return new RespError(head);
      case ":":
        return Number(head);
      case ",":
        return head === "inf" ? Infinity : head === "-inf" ? -Infinity : Number(head);
      case "(":
        return BigInt(head);
      case "#":
        return head === "t";
      case "_":
        return null;
      case "$":
      case "=":
      case "!": {
        const length = Number(head);
        if (length < 0) return null;
        const bytes = this.bytes(length);
        if (bytes === INCOMPLETE) return INCOMPLETE;
        if (type === "!") return new RespError(decoder.decode(bytes));
        // A verbatim string starts with its format and a colon ("txt:").
        return type === "=" ? bytes.subarray(4) : bytes;
      }
      case "*":
      case "~":
      case ">": {
        const count = Number(head);
        if (count < 0) return null;
        const items: RespValue[] = [];
        for (let i = 0; i < count; i++) {
          const item = this.value();
          if (item === INCOMPLETE) return INCOMPLETE;
          items.push(item as RespValue);
        }
        return type === ">" ? PUSH : items;
      }
      case "%":
      case "|": {
        const count = Number(head);
        const map: { [key: string]: RespValue } = {};
        for (let i = 0; i < count; i++) {
          const key = this.value();
          if (key === INCOMPLETE) return INCOMPLETE;
          const value = this.value();
          if (value === INCOMPLETE) return INCOMPLETE;
          map[key instanceof Uint8Array ? decoder.decode(key) : String(key)] = value as RespValue;
        }
        // An attribute (|) annotates the reply that follows it.
        return type === "|" ? this.value() : map;
      }
      default:
        throw new Error(`Redis sent an unknown reply type ${JSON.stringify(type)}`);
    }
  }
}

const PUSH = Symbol("push");

/** A command as RESP: an array of bulk strings. */
export function encodeCommand(parts: readonly (string | Uint8Array)[]): Uint8Array {
  const encoder = new TextEncoder();
  const chunks: Uint8Array[] = [encoder.encode(`*${parts.length}\r\n`)];
  for (const part of parts) {
    const bytes = typeof part === "string" ? encoder.encode(part) : part;
    chunks.push(encoder.encode(`$${bytes.length}\r\n`), bytes, encoder.encode("\r\n"));
  }
  const out = new Uint8Array(chunks.reduce((total, chunk) => total + chunk.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/** Bulk strings as text, all through the reply (what Bun's client's send gives). */
export function withText(value: RespValue): RespValue {
  if (value instanceof Uint8Array) return decoder.decode(value);
  if (Array.isArray(value)) return value.map(withText);
  if (value !== null && typeof value === "object" && !(value instanceof RespError)) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, withText(item)]));
  }
  return value;
}
