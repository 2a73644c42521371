/**
 * Well-formed UTF-8 across tokens: a token may hold part of a character (byte-level and
 * byte-fallback vocabularies split characters into bytes), so whether it may come next depends on
 * the partial character the output ends with. Grammar engines are lenient here (xgrammar lets
 * lone and misplaced bytes through), and text decoded from malformed UTF-8 turns into U+FFFD —
 * not the JSON string, nor the length, the grammar agreed to. Pure: byte tables and a tracker.
 */

/** The partial character the output ends with: continuation bytes still due, and the range of the next one. */
export interface Utf8State {
  due: number;
  low: number;
  high: number;
}

export const UTF8_COMPLETE: Utf8State = { due: 0, low: 0x80, high: 0xbf };

/** The state after `byte`, or null when it makes the text malformed (RFC 3629: no overlongs, surrogates or code points past U+10FFFF). */
export function nextUtf8State(state: Utf8State, byte: number): Utf8State | null {
  if (state.due > 0) {
    if (byte < state.low || byte > state.high) return null;
    return state.due === 1 ? UTF8_COMPLETE : { due: state.due - 1, low: 0x80, high: 0xbf };
  }
  if (byte < 0x80) return UTF8_COMPLETE;
  if (byte >= 0xc2 && byte <= 0xdf) return { due: 1, low: 0x80, high: 0xbf };
  if (byte === 0xe0) return { due: 2, low: 0xa0, high: 0xbf };
  if ((byte >= 0xe1 && byte <= 0xec) || byte === 0xee || byte === 0xef) return { due: 2, low: 0x80, high: 0xbf };
  if (byte === 0xed) return { due: 2, low: 0x80, high: 0x9f };
  if (byte === 0xf0) return { due: 3, low: 0x90, high: 0xbf };
  if (byte >= 0xf1 && byte <= 0xf3) return { due: 3, low: 0x80, high: 0xbf };
  if (byte === 0xf4) return { due: 3, low: 0x80, high: 0x8f };
  return null;
}

/** The state after a token's bytes, or null when they make the text malformed. */
export function afterBytes(state: Utf8State, bytes: Uint8Array): Utf8State | null {
  let current: Utf8State | null = state;
  for (let i = 0; i < bytes.length && current !== null; i++) current = nextUtf8State(current, bytes[i]!);
  return current;
}

/** Every token's bytes, and which tokens cannot follow a complete character (a bitmask, bit set: forbidden). */
export class Utf8TokenTable {
  readonly forbiddenAtBoundary: Int32Array;

  /** `bytes[id]`: the token's bytes (special tokens: none). */
  constructor(readonly bytes: readonly Uint8Array[]) {
    this.forbiddenAtBoundary = new Int32Array(Math.ceil(bytes.length / 32));
    bytes.forEach((tokenBytes, id) => {
      if (afterBytes(UTF8_COMPLETE, tokenBytes) === null) this.forbiddenAtBoundary[id >> 5]! |= 1 << (id & 31);
    });
  }

  /** Tokens that cannot follow `state` (for a partial character; at a boundary use forbiddenAtBoundary). */
  isForbidden(state: Utf8State, id: number): boolean {
    const tokenBytes = this.bytes[id];
    return tokenBytes !== undefined && afterBytes(state, tokenBytes) === null;
  }
}
