/**
 * Wyhash (final version 4, as Zig's std.hash.Wyhash, which Bun.hash uses), in BigInt arithmetic:
 * the same 64-bit values as Bun.hash.wyhash, so that keys computed under Deno match Bun's.
 * Slower than Bun's native one (about a microsecond for short keys), which only Deno pays.
 */
const MASK = (1n << 64n) - 1n;
const SECRET = [0xa0761d6478bd642fn, 0xe7037ed1a0b428dbn, 0x8ebc6af09c88c6e3n, 0x589965cc75374cc3n] as const;

function mum(a: bigint, b: bigint): [bigint, bigint] {
  const product = a * b;
  return [product & MASK, (product >> 64n) & MASK];
}

function mix(a: bigint, b: bigint): bigint {
  const [low, high] = mum(a, b);
  return low ^ high;
}

export function wyhash(input: Uint8Array, seed: bigint = 0n): bigint {
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  const read8 = (at: number) => view.getBigUint64(at, true);
  const read4 = (at: number) => BigInt(view.getUint32(at, true));
  const length = input.length;
  seed = BigInt.asUintN(64, seed);
  let state0 = seed ^ mix(seed ^ SECRET[0], SECRET[1]);
  let a: bigint;
  let b: bigint;
  if (length <= 16) {
    if (length >= 4) {
      const end = length - 4;
      const quarter = (length >> 3) << 2;
      a = (read4(0) << 32n) | read4(quarter);
      b = (read4(end) << 32n) | read4(end - quarter);
    } else if (length > 0) {
      a = (BigInt(input[0]!) << 16n) | (BigInt(input[length >> 1]!) << 8n) | BigInt(input[length - 1]!);
      b = 0n;
    } else {
      a = 0n;
      b = 0n;
    }
  } else {
    let at = 0;
    if (length >= 48) {
      let state1 = state0;
      let state2 = state0;
      for (; at + 48 < length; at += 48) {
        state0 = mix(read8(at) ^ SECRET[1], read8(at + 8) ^ state0);
        state1 = mix(read8(at + 16) ^ SECRET[2], read8(at + 24) ^ state1);
        state2 = mix(read8(at + 32) ^ SECRET[3], read8(at + 40) ^ state2);
      }
      state0 ^= state1 ^ state2;
    }
    for (; at + 16 < length; at += 16) state0 = mix(read8(at) ^ SECRET[1], read8(at + 8) ^ state0);
    a = read8(length - 16);
    b = read8(length - 8);
  }
  [a, b] = mum(a ^ SECRET[1], b ^ state0);
  return mix(a ^ SECRET[0] ^ BigInt(length), b ^ SECRET[1]);
}
