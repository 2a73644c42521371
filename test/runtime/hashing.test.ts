import { describe, expect, test } from "bun:test";
import { wyhash } from "../../src/runtime/deno/wyhash.ts";
import { xxHash64 } from "../../src/runtime/deno/xxHash64.ts";
import { createSha256, wyhash as runtimeWyhash, xxHash64 as runtimeXxHash64 } from "../../src/runtime/hashing.ts";
import { denoHashing } from "../../src/runtime/deno/hashing.ts";
import { createHash } from "node:crypto";
import { runtimeName } from "../../src/runtime/runtimeName.ts";

/** Deterministic bytes (a 32-bit LCG), so that a failure reproduces. */
function bytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let state = seed >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = state >>> 24;
  }
  return out;
}

// Every length through the short-key, 16-byte and 48-byte paths and their edges, then some long ones.
const LENGTHS = [...Array.from({ length: 200 }, (_, i) => i), 255, 256, 1000, 4096, 65_537];

// The reference is Bun.hash itself, so this runs under Bun only.
describe.skipIf(runtimeName !== "bun")("the Deno hashes equal Bun's", () => {
  test("wyhash, seed 0 and 64-bit seeds, every length path", () => {
    for (const length of LENGTHS) {
      const input = bytes(length, length + 1);
      expect(wyhash(input)).toBe(BigInt(Bun.hash.wyhash(input)));
      const seed = 0xfedcba9876543210n ^ BigInt(length);
      expect(wyhash(input, seed)).toBe(BigInt(Bun.hash.wyhash(input, seed)));
    }
  });

  test("Bun.hash is wyhash with seed 0, and strings hash as their UTF-8", () => {
    for (const text of ["", "a", "0\u0000user\u0000hello", "ünïcödé ✓ 𝄞".repeat(9)]) {
      expect(denoHashing.wyhash(text)).toBe(BigInt(Bun.hash(text)));
    }
  });

  test("xxHash64, every length path", () => {
    for (const length of LENGTHS) {
      const input = bytes(length, 7 * length + 3);
      expect(xxHash64(input)).toBe(BigInt(Bun.hash.xxHash64(input)));
    }
  });

  test("views into a larger buffer hash only their bytes", () => {
    const whole = bytes(300, 9);
    const view = whole.subarray(13, 213);
    expect(wyhash(view)).toBe(BigInt(Bun.hash.wyhash(view.slice())));
    expect(xxHash64(view)).toBe(BigInt(Bun.hash.xxHash64(view.slice())));
  });
});

// Values Bun.hash gave (xxHash64 of "" and "a" are the reference implementation's published ones):
// checked on every runtime, so that deno test checks the Deno twins against Bun's numbers too.
const GOLDEN: [input: string, wyhash: bigint, xxHash64: bigint][] = [
  ["", 0x409638ee2bde459n, 0xef46db3751d8e999n],
  ["a", 0x28d2053309d28531n, 0xd24ec4f1a98c6e5bn],
  ["abc", 0x2a4f1d7cb516c72n, 0x44bc2cf5ad770999n],
  ["hello world!", 0xe1be5c789eb0f055n, 0x9bb9a01dc10f4709n],
  ["x".repeat(17), 0x7ba3186dc79f5203n, 0x2215cf593832a5een],
  ["y".repeat(48), 0x89641857d86ae3fan, 0x412eb08a1594d097n],
  ["z".repeat(49), 0x76aa47dc56d0bc26n, 0x3f84d914f0e5446dn],
  ["ctxr ".repeat(40), 0xfa740ffa41bd197cn, 0x31af51383ebea676n],
];

test("the runtime's wyhash and xxHash64 give Bun's values", () => {
  const encoder = new TextEncoder();
  for (const [input, wyhashValue, xxHash64Value] of GOLDEN) {
    expect(runtimeWyhash(input)).toBe(wyhashValue);
    expect(runtimeWyhash(encoder.encode(input))).toBe(wyhashValue);
    expect(runtimeXxHash64(encoder.encode(input))).toBe(xxHash64Value);
  }
});

describe("SHA-256", () => {
  for (const [name, sha256] of [["runtime's", createSha256()], ["Deno's", denoHashing.createSha256()]] as const) {
    test(`the ${name} hasher starts afresh after each digest`, () => {
      const expected = (input: Uint8Array) => createHash("sha256").update(input).digest("hex");
      for (const length of [0, 1, 64, 1000]) {
        const input = bytes(length, length);
        sha256.update(input.subarray(0, length >> 1));
        sha256.update(input.subarray(length >> 1));
        expect(sha256.digest().toString("hex")).toBe(expected(input));
      }
    });
  }
});
