/** XXH64 with seed 0 in BigInt arithmetic: the same values as Bun.hash.xxHash64. */
const MASK = (1n << 64n) - 1n;
const PRIME1 = 0x9e3779b185ebca87n;
const PRIME2 = 0xc2b2ae3d27d4eb4fn;
const PRIME3 = 0x165667b19e3779f9n;
const PRIME4 = 0x85ebca77c2b2ae63n;
const PRIME5 = 0x27d4eb2f165667c5n;

function rotl(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & MASK;
}

function round(acc: bigint, lane: bigint): bigint {
  return (rotl((acc + lane * PRIME2) & MASK, 31n) * PRIME1) & MASK;
}

function mergeRound(acc: bigint, value: bigint): bigint {
  return (((acc ^ round(0n, value)) * PRIME1) & MASK) + PRIME4 & MASK;
}

export function xxHash64(input: Uint8Array, seed: bigint = 0n): bigint {
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  const length = input.length;
  let at = 0;
  let hash: bigint;
  if (length >= 32) {
    let v1 = (seed + PRIME1 + PRIME2) & MASK;
    let v2 = (seed + PRIME2) & MASK;
    let v3 = seed;
    let v4 = (seed - PRIME1) & MASK;
    for (; at + 32 <= length; at += 32) {
      v1 = round(v1, view.getBigUint64(at, true));
      v2 = round(v2, view.getBigUint64(at + 8, true));
      v3 = round(v3, view.getBigUint64(at + 16, true));
      v4 = round(v4, view.getBigUint64(at + 24, true));
    }
    hash = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & MASK;
    hash = mergeRound(hash, v1);
    hash = mergeRound(hash, v2);
    hash = mergeRound(hash, v3);
    hash = mergeRound(hash, v4);
  } else {
    hash = (seed + PRIME5) & MASK;
  }
  hash = (hash + BigInt(length)) & MASK;
  for (; at + 8 <= length; at += 8) {
    hash ^= round(0n, view.getBigUint64(at, true));
    hash = (rotl(hash, 27n) * PRIME1 + PRIME4) & MASK;
  }
  if (at + 4 <= length) {
    hash ^= (BigInt(view.getUint32(at, true)) * PRIME1) & MASK;
    hash = (rotl(hash, 23n) * PRIME2 + PRIME3) & MASK;
    at += 4;
  }
  for (; at < length; at++) {
    hash ^= (BigInt(input[at]!) * PRIME5) & MASK;
    hash = (rotl(hash, 11n) * PRIME1) & MASK;
  }
  hash ^= hash >> 33n;
  hash = (hash * PRIME2) & MASK;
  hash ^= hash >> 29n;
  hash = (hash * PRIME3) & MASK;
  hash ^= hash >> 32n;
  return hash;
}
