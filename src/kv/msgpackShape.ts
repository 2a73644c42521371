/**
 * A msgpack value's shape checked before it is decoded, pure: how many values it holds, how many
 * of them become heap objects once decoded, and how deep it nests. Decoding materialises every
 * value, and a small payload can claim a lot: one byte per empty map makes 15M JavaScript objects
 * (about 0.9 GB) of a 15 MiB payload. The scan walks the bytes without building anything, with an
 * explicit stack (no recursion), and stops at the first limit passed, so its own cost is at most
 * one linear pass.
 */

export interface MsgpackShapeLimits {
  /** Values of any kind (every number, nil, string, container...). */
  maxValues: number;
  /** Values that decode to a heap object: maps, arrays, strings, bytes, extensions, 64-bit integers (BigInt). */
  maxObjects: number;
  /** Containers open at once. */
  maxDepth: number;
}

/** Why the bytes cannot be decoded within the limits (or are not one msgpack value); null when they can. */
export function msgpackShapeProblem(bytes: Uint8Array, limits: MsgpackShapeLimits): string | null {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length;
  let at = 0;
  let values = 0;
  let objects = 0;
  /** Values still to read in the container being read (1: the top-level value). */
  let pending = 1;
  const open: number[] = [];
  for (;;) {
    if (pending === 0) {
      if (open.length === 0) return null;
      pending = open.pop()!;
      continue;
    }
    pending--;
    if (at >= end) return "truncated msgpack";
    const type = bytes[at++]!;
    if (++values > limits.maxValues) return `more than ${limits.maxValues} values`;
    let children = 0;
    let skip = 0;
    let object = true;
    const length = (width: 1 | 2 | 4): number | null => {
      if (at + width > end) return null;
      const n = width === 1 ? bytes[at]! : width === 2 ? view.getUint16(at, false) : view.getUint32(at, false);
      at += width;
      return n;
    };
    if (type <= 0x7f || type >= 0xe0) object = false;
    else if (type <= 0x8f) children = 2 * (type & 0x0f);
    else if (type <= 0x9f) children = type & 0x0f;
    else if (type <= 0xbf) skip = type & 0x1f;
    else {
      switch (type) {
        case 0xc0:
        case 0xc2:
        case 0xc3:
          object = false;
          break;
        case 0xc4:
        case 0xd9: // bin8, str8
        case 0xc5:
        case 0xda: // bin16, str16
        case 0xc6:
        case 0xdb: {
          // bin32, str32
          const n = length(type === 0xc4 || type === 0xd9 ? 1 : type === 0xc5 || type === 0xda ? 2 : 4);
          if (n === null) return "truncated msgpack";
          skip = n;
          break;
        }
        case 0xc7:
        case 0xc8:
        case 0xc9: {
          const n = length(type === 0xc7 ? 1 : type === 0xc8 ? 2 : 4);
          if (n === null) return "truncated msgpack";
          skip = n + 1; // the extension type byte
          break;
        }
        case 0xca:
        case 0xcb:
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xd0:
        case 0xd1:
        case 0xd2:
          object = false;
          skip = type === 0xca || type === 0xce || type === 0xd2 ? 4 : type === 0xcb ? 8 : type === 0xcd || type === 0xd1 ? 2 : 1;
          break;
        case 0xcf:
        case 0xd3:
          skip = 8; // uint64, int64: a BigInt
          break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8:
          skip = 1 + (1 << (type - 0xd4));
          break;
        case 0xdc:
        case 0xdd:
        case 0xde:
        case 0xdf: {
          const n = length(type === 0xdc || type === 0xde ? 2 : 4);
          if (n === null) return "truncated msgpack";
          children = type >= 0xde ? 2 * n : n;
          break;
        }
        default:
          return `byte 0x${type.toString(16)} at ${at - 1} starts no msgpack value`;
      }
    }
    if (object && ++objects > limits.maxObjects) return `more than ${limits.maxObjects} maps, arrays, strings, byte strings or 64-bit integers`;
    if (skip > 0) {
      if (skip > end - at) return "truncated msgpack";
      at += skip;
    }
    if (children > 0) {
      // Each value takes at least one byte: a length claim beyond the bytes left is a lie.
      if (children > end - at) return "truncated msgpack (a length beyond the payload)";
      if (open.length >= limits.maxDepth) return `nested deeper than ${limits.maxDepth} levels`;
      open.push(pending);
      pending = children;
    }
  }
}
