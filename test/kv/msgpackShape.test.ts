/**
 * The msgpack shape check run before a KV-event payload is decoded: it accepts what the decoder
 * reads (every type, random values), counts values and heap objects as decoding would make them,
 * and refuses lies about lengths, deep nesting and too many values without building anything.
 */
import { describe, expect, test } from "bun:test";
import { decode, encode } from "@msgpack/msgpack";
import { msgpackShapeProblem, type MsgpackShapeLimits } from "../../src/kv/msgpackShape.ts";
import { seededRandom } from "../helpers/randomContexts.ts";

const roomy: MsgpackShapeLimits = { maxValues: 1e9, maxObjects: 1e9, maxDepth: 1000 };

function randomValue(random: () => number, depth: number): unknown {
  const pick = Math.floor(random() * (depth > 4 ? 9 : 12));
  switch (pick) {
    case 0:
      return null;
    case 1:
      return random() < 0.5;
    case 2:
      return Math.floor(random() * 256) - 128;
    case 3:
      return Math.floor(random() * 2 ** 31) * (random() < 0.5 ? -1 : 1);
    case 4:
      return random() * 1e6;
    case 5:
      return BigInt.asUintN(64, BigInt(Math.floor(random() * 2 ** 52)) << 12n);
    case 6:
      return "s".repeat(Math.floor(random() * 300));
    case 7:
      return new Uint8Array(Math.floor(random() * 70_000 * random() * random()));
    case 8:
      return -BigInt(Math.floor(random() * 2 ** 52)) << 8n;
    case 9:
      return Array.from({ length: Math.floor(random() * 20) }, () => randomValue(random, depth + 1));
    case 10:
      return Object.fromEntries(Array.from({ length: Math.floor(random() * 20) }, (_, i) => [`k${i}`, randomValue(random, depth + 1)]));
    default:
      return Array.from({ length: Math.floor(random() * 70_000 * random() * random() * random()) }, (_, i) => i);
  }
}

describe("msgpackShapeProblem", () => {
  test("random values of every type (and every width) pass, as the decoder reads them", () => {
    const random = seededRandom(27);
    for (let i = 0; i < 300; i++) {
      const bytes = encode(randomValue(random, 0), { useBigInt64: true });
      expect(() => decode(bytes, { useBigInt64: true })).not.toThrow();
      expect(msgpackShapeProblem(bytes, roomy)).toBeNull();
    }
    // Extensions (fixext and ext8/16/32) and the 16- and 32-bit lengths.
    for (const size of [1, 2, 4, 8, 16, 3, 300, 70_000]) expect(msgpackShapeProblem(Uint8Array.from([...encodeExt(size)]), roomy)).toBeNull();
    expect(msgpackShapeProblem(encode({ a: Array.from({ length: 70_000 }, () => 1) }), roomy)).toBeNull();
  });

  test("values and heap objects are counted as decoding makes them", () => {
    const limits = (maxValues: number, maxObjects: number) => ({ maxValues, maxObjects, maxDepth: 10 });
    const bytes = encode([1, 2, "x", { a: 3n }, new Uint8Array(2)], { useBigInt64: true });
    // Values: the array, 1, 2, "x", the map, "a", 3n, the bytes = 8; objects: array, "x", map, "a", 3n (uint64), bytes = 6.
    expect(msgpackShapeProblem(bytes, limits(8, 6))).toBeNull();
    expect(msgpackShapeProblem(bytes, limits(7, 6))).toBe("more than 7 values");
    expect(msgpackShapeProblem(bytes, limits(8, 5))).toContain("more than 5 maps, arrays");
  });

  test("15M empty maps, 1M-deep nesting and length claims of 2^32 are refused without decoding", () => {
    const maps = new Uint8Array(5 + 15_000_000).fill(0x80);
    maps.set([0xdd, 0x00, 0xe4, 0xe1, 0xc0]);
    const started = performance.now();
    expect(msgpackShapeProblem(maps, { maxValues: 4 << 20, maxObjects: 1 << 20, maxDepth: 16 })).toContain("more than 1048576 maps");
    expect(msgpackShapeProblem(new Uint8Array(1_000_000).fill(0x91), { maxValues: 4 << 20, maxObjects: 1 << 20, maxDepth: 16 })).toBe("nested deeper than 16 levels");
    expect(performance.now() - started).toBeLessThan(2000);
    expect(msgpackShapeProblem(Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff, 0x01), roomy)).toContain("a length beyond the payload");
    expect(msgpackShapeProblem(Uint8Array.of(0xdf, 0xff, 0xff, 0xff, 0xff), roomy)).toContain("a length beyond the payload");
    expect(msgpackShapeProblem(Uint8Array.of(0xc6, 0xff, 0xff, 0xff, 0xff, 0x01), roomy)).toBe("truncated msgpack");
    expect(msgpackShapeProblem(Uint8Array.of(0xdb, 0x00, 0x00), roomy)).toBe("truncated msgpack");
    expect(msgpackShapeProblem(Uint8Array.of(0xcf, 0x00), roomy)).toBe("truncated msgpack");
    expect(msgpackShapeProblem(Uint8Array.of(), roomy)).toBe("truncated msgpack");
    expect(msgpackShapeProblem(Uint8Array.of(0xc1), roomy)).toBe("byte 0xc1 at 0 starts no msgpack value");
  });
});

/** An extension value of `size` data bytes, in the narrowest form msgpack has for it. */
function encodeExt(size: number): Uint8Array {
  const fixed: Record<number, number> = { 1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8 };
  const head = fixed[size] !== undefined ? [fixed[size]!, 1] : size < 256 ? [0xc7, size, 1] : size < 65536 ? [0xc8, size >> 8, size & 0xff, 1] : [0xc9, size >>> 24, (size >> 16) & 0xff, (size >> 8) & 0xff, size & 0xff, 1];
  return Uint8Array.from([...head, ...new Uint8Array(size)]);
}
