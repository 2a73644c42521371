import { describe, expect, test } from "bun:test";
import { CHUNK_HASH_HEX_LENGTH, chunkHash } from "../../src/kv/chunkHash.ts";

describe("chunkHash", () => {
  test("is the first 32 hex characters of SHA-256 over u32 little-endian token ids", () => {
    // Python: hashlib.sha256(struct.pack('<3I', 1, 2, 0xffffffff)).hexdigest()[:32]
    expect(chunkHash([1, 2, 0xffffffff])).toBe("0a1ce634879f6a487527c9a185b1a4a3");
    expect(chunkHash([])).toBe("e3b0c44298fc1c149afbf4c8996fb924");
    expect(chunkHash([1, 2, 3]).length).toBe(CHUNK_HASH_HEX_LENGTH);
    expect(chunkHash([1, 2, 3])).toMatch(/^[0-9a-f]{32}$/);
  });

  test("depends on the token ids and their order, not on the array type", () => {
    expect(chunkHash([2, 1])).toBe("7b2ed67587fcbc411fcb4b71b1cef1ef");
    expect(chunkHash([1, 2])).not.toBe(chunkHash([2, 1]));
    expect(chunkHash(Uint32Array.of(5, 6, 7))).toBe(chunkHash([5, 6, 7]));
    expect(chunkHash(Int32Array.of(5, 6, 7))).toBe(chunkHash([5, 6, 7]));
    // u32 encoding: [256] is not [0, 1] nor [1, 0] byte-wise concatenations.
    expect(chunkHash([256])).not.toBe(chunkHash([0, 1]));
    expect(chunkHash([0])).not.toBe(chunkHash([]));
  });

  test("rejects ids that are not u32 integers", () => {
    expect(() => chunkHash([-1])).toThrow(RangeError);
    expect(() => chunkHash([1.5])).toThrow(RangeError);
    expect(() => chunkHash([2 ** 32])).toThrow(RangeError);
    expect(() => chunkHash([Number.NaN])).toThrow(RangeError);
  });
});
