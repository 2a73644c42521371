import { describe, expect, test } from "bun:test";
import {
  DEFAULT_KV_PAGE_SIZE,
  KV_CACHE_MAGIC,
  KV_CACHE_PREAMBLE_BYTES,
  KvCacheFileError,
  type KvCacheFileProblem,
  decodeKvCacheFile,
  encodeKvCacheFile,
  kvCacheHeaderEnd,
  readKvCacheFileHeader,
  verifyKvCacheFile,
} from "../../src/kv/kvCacheFile.ts";
import { expectSameKv, randomKv } from "./kvFixtures.ts";

const MODEL = "a".repeat(64);
const expected = (layers: number, kvWidth: number) => ({ modelIdentity: MODEL, layers, kvWidth });
const META = { chunkHash: "abc", tokenCount: 5, prefix: ["x", "y"], nested: { cci: 0.25, list: [1, -0.5, null, true] } };

function problemOf(run: () => unknown): KvCacheFileProblem {
  let caught: unknown;
  try {
    run();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(KvCacheFileError);
  return (caught as KvCacheFileError).problem;
}

describe("kvCacheFile round trip", () => {
  const cases: [layers: number, kvWidth: number, count: number, pageSize: number][] = [
    [1, 4, 1, 16],
    [3, 8, 16, 16],
    [3, 8, 17, 16],
    [4, 6, 37, 16],
    [2, 5, 37, 7],
    [2, 3, 5, 1],
    [2, 3, 5, 100],
    [2, 3, 0, 16],
  ];
  for (const [layers, kvWidth, count, pageSize] of cases) {
    test(`${layers} layers, kv width ${kvWidth}, ${count} tokens, pages of ${pageSize}: bit-exact`, () => {
      const data = randomKv(layers, kvWidth, count, layers * 1000 + count);
      const file = encodeKvCacheFile(data, { ...expected(layers, kvWidth), meta: META, pageSize, key: "variant/1" });
      const decoded = decodeKvCacheFile(file, { ...expected(layers, kvWidth), key: "variant/1" });
      expectSameKv(decoded.data, data);
      expect(decoded.meta).toEqual(META);
      expect(decoded.header).toMatchObject({ format: 1, model: MODEL, layers, kv_width: kvWidth, count, page_size: pageSize, dtype: "f32", key: "variant/1" });
      expect(decoded.fileBytes).toBe(file.length);
      expect(decoded.headerEnd % 8).toBe(0);
      expect(file.length).toBe(decoded.headerEnd + 4 * count + layers * 2 * count * kvWidth * 4 + 8);
    });
  }

  test("-0, subnormals and NaN keep their bits; decoded arrays do not share the file's buffer", () => {
    const data = randomKv(1, 4, 3);
    const raw = new Uint32Array(data.layers[0]!.k.buffer);
    raw[0] = 0x80000000; // -0
    raw[1] = 0x00000001; // smallest subnormal
    raw[2] = 0x7fc00000; // the canonical NaN
    const file = encodeKvCacheFile(data, { ...expected(1, 4), meta: {} });
    const decoded = decodeKvCacheFile(file, expected(1, 4));
    expectSameKv(decoded.data, data);
    expect(Object.is(decoded.data.layers[0]!.k[0], -0)).toBe(true);
    expect(decoded.data.layers[0]!.k.buffer).not.toBe(file.buffer);
    file.fill(0);
    expectSameKv(decoded.data, data);
  });

  test("the default page size is 16, the key is optional", () => {
    const file = encodeKvCacheFile(randomKv(1, 2, 3), { ...expected(1, 2), meta: {} });
    const { header } = decodeKvCacheFile(file, expected(1, 2));
    expect(header.page_size).toBe(DEFAULT_KV_PAGE_SIZE);
    expect(header.key).toBeUndefined();
  });

  test("encodes from views into larger buffers, decodes from an unaligned view", () => {
    const data = randomKv(2, 3, 5);
    const big = new Uint8Array(4 + 2 * 5 * 3 * 4 * 2);
    const k = new Float32Array(big.buffer, 4, 15);
    k.set(data.layers[0]!.k);
    const shifted = { ...data, layers: [{ k, v: data.layers[0]!.v }, data.layers[1]!] };
    const file = encodeKvCacheFile(shifted, { ...expected(2, 3), meta: {} });
    const padded = new Uint8Array(file.length + 3);
    padded.set(file, 3);
    expectSameKv(decodeKvCacheFile(padded.subarray(3), expected(2, 3)).data, data);
  });
});

describe("kvCacheFile layout", () => {
  test("magic, header length, JSON, header checksum, positions, then page-first K and V rows, then the checksum", () => {
    const layers = 2;
    const kvWidth = 2;
    const count = 3;
    const pageSize = 2;
    // K value = 1000·layer + 10·token + column, V the same negated: easy to find.
    const data = {
      positions: new Int32Array([7, 8, 9]),
      layers: Array.from({ length: layers }, (_, layer) => {
        const k = new Float32Array(count * kvWidth);
        for (let t = 0; t < count; t++) for (let c = 0; c < kvWidth; c++) k[t * kvWidth + c] = 1000 * layer + 10 * t + c + 1;
        return { k, v: k.map((x) => -x) };
      }),
    };
    const file = encodeKvCacheFile(data, { ...expected(layers, kvWidth), meta: { a: 1 }, pageSize });
    expect(new TextDecoder().decode(file.subarray(0, 8))).toBe(KV_CACHE_MAGIC);
    const view = new DataView(file.buffer);
    const headerLength = view.getUint32(8, true);
    const json = JSON.parse(new TextDecoder().decode(file.subarray(12, 12 + headerLength)));
    expect(json).toEqual({ format: 1, model: MODEL, layers, kv_width: kvWidth, count, page_size: pageSize, dtype: "f32", meta: { a: 1 } });
    const headerEnd = kvCacheHeaderEnd(file.subarray(0, KV_CACHE_PREAMBLE_BYTES));
    expect(headerEnd).toBe(12 + headerLength + 8);
    expect(view.getBigUint64(headerEnd - 8, true)).toBe(BigInt(Bun.hash.xxHash64(file.subarray(0, headerEnd - 8))));
    expect([0, 1, 2].map((i) => view.getInt32(headerEnd + 4 * i, true))).toEqual([7, 8, 9]);
    const floats: number[] = [];
    for (let at = headerEnd + 12; at < file.length - 8; at += 4) floats.push(view.getFloat32(at, true));
    expect(floats).toEqual([
      // page 0 (tokens 0-1): layer 0 K, layer 0 V, layer 1 K, layer 1 V
      1, 2, 11, 12, -1, -2, -11, -12, 1001, 1002, 1011, 1012, -1001, -1002, -1011, -1012,
      // page 1 (token 2)
      21, 22, -21, -22, 1021, 1022, -1021, -1022,
    ]);
    expect(view.getBigUint64(file.length - 8, true)).toBe(BigInt(Bun.hash.xxHash64(file.subarray(0, file.length - 8))));
  });

  test("readKvCacheFileHeader needs only the header bytes and the file's size", () => {
    const file = encodeKvCacheFile(randomKv(2, 4, 20), { ...expected(2, 4), meta: META, key: "k" });
    const headerEnd = kvCacheHeaderEnd(file);
    const layout = readKvCacheFileHeader(file.slice(0, headerEnd), file.length, expected(2, 4));
    expect(layout.header.meta).toEqual(META);
    expect(layout.header.key).toBe("k");
    expect(problemOf(() => readKvCacheFileHeader(file.slice(0, headerEnd - 1), file.length, expected(2, 4)))).toBe("truncated");
    expect(problemOf(() => readKvCacheFileHeader(file.slice(0, headerEnd), file.length - 1, expected(2, 4)))).toBe("truncated");
    expect(problemOf(() => readKvCacheFileHeader(file.slice(0, headerEnd), file.length + 1, expected(2, 4)))).toBe("trailing");
  });
});

describe("kvCacheFile damage", () => {
  const data = randomKv(2, 3, 5, 42);
  const file = encodeKvCacheFile(data, { ...expected(2, 3), meta: { n: 1 }, pageSize: 2, key: "v1" });

  test("every single flipped bit anywhere is rejected", () => {
    const problems = new Set<KvCacheFileProblem>();
    const headerEnd = kvCacheHeaderEnd(file);
    for (let byte = 0; byte < file.length; byte++) {
      for (let bit = 0; bit < 8; bit++) {
        const damaged = file.slice();
        damaged[byte]! ^= 1 << bit;
        const problem = problemOf(() => decodeKvCacheFile(damaged, expected(2, 3)));
        problems.add(problem);
        if (byte < 8) expect(problem).toBe("magic");
        else if (byte >= headerEnd && byte < file.length - 8) expect(problem).toBe("checksum");
        else if (byte >= file.length - 8) expect(problem).toBe("checksum");
      }
    }
    expect([...problems].sort()).toEqual(["checksum", "header", "magic", "truncated"]);
  });

  test("every truncation and appended bytes are rejected", () => {
    for (let length = 0; length < file.length; length++) {
      expect(["truncated", "magic"]).toContain(problemOf(() => decodeKvCacheFile(file.subarray(0, length), expected(2, 3))));
    }
    expect(problemOf(() => decodeKvCacheFile(new TextEncoder().encode("garbage"), expected(2, 3)))).toBe("magic");
    expect(problemOf(() => decodeKvCacheFile(new TextEncoder().encode("CTXR"), expected(2, 3)))).toBe("truncated");
    for (const extra of [1, 7, 8, 100]) {
      const longer = new Uint8Array(file.length + extra);
      longer.set(file);
      expect(problemOf(() => decodeKvCacheFile(longer, expected(2, 3)))).toBe("trailing");
    }
  });

  test("another model, geometry or key is rejected", () => {
    expect(problemOf(() => decodeKvCacheFile(file, { ...expected(2, 3), modelIdentity: "b".repeat(64) }))).toBe("model");
    expect(problemOf(() => decodeKvCacheFile(file, expected(3, 3)))).toBe("geometry");
    expect(problemOf(() => decodeKvCacheFile(file, expected(2, 4)))).toBe("geometry");
    expect(problemOf(() => decodeKvCacheFile(file, { ...expected(2, 3), key: "v2" }))).toBe("key");
    expect(decodeKvCacheFile(file, { ...expected(2, 3), key: "v1" }).header.key).toBe("v1");
  });

  test("messages name the problem", () => {
    const damaged = file.slice();
    damaged[file.length - 20]! ^= 4;
    expect(() => decodeKvCacheFile(damaged, expected(2, 3))).toThrow("checksum mismatch");
    expect(() => decodeKvCacheFile(file.subarray(0, file.length - 1), expected(2, 3))).toThrow(/truncated: \d+ of \d+ bytes/);
    expect(() => decodeKvCacheFile(new TextEncoder().encode("CTXRKV02........"), expected(2, 3))).toThrow("bad magic");
    expect(() => decodeKvCacheFile(file, { ...expected(2, 3), modelIdentity: "b" })).toThrow("another model");
    expect(() => decodeKvCacheFile(file, expected(2, 4))).toThrow("written for 2 layers of kv width 3, this model has 2 of 4");
  });

  test("a header with a valid checksum but bad fields is rejected (format, dtype)", () => {
    const rewrite = (change: (json: Record<string, unknown>) => void): Uint8Array => {
      const headerEnd = kvCacheHeaderEnd(file);
      const json = JSON.parse(new TextDecoder().decode(file.subarray(12, headerEnd - 8)));
      change(json);
      const text = new TextEncoder().encode(JSON.stringify(json));
      const out = new Uint8Array(12 + text.length + 8);
      out.set(file.subarray(0, 8));
      new DataView(out.buffer).setUint32(8, text.length, true);
      out.set(text, 12);
      new DataView(out.buffer).setBigUint64(12 + text.length, BigInt(Bun.hash.xxHash64(out.subarray(0, 12 + text.length))), true);
      return out;
    };
    expect(problemOf(() => readKvCacheFileHeader(rewrite((j) => (j.format = 2)), 1e6, expected(2, 3)))).toBe("format");
    expect(problemOf(() => readKvCacheFileHeader(rewrite((j) => (j.dtype = "f16")), 1e6, expected(2, 3)))).toBe("format");
    expect(problemOf(() => readKvCacheFileHeader(rewrite((j) => (j.count = -1)), 1e6, expected(2, 3)))).toBe("header");
    expect(problemOf(() => readKvCacheFileHeader(rewrite((j) => (j.page_size = 0)), 1e6, expected(2, 3)))).toBe("header");
    expect(problemOf(() => readKvCacheFileHeader(rewrite((j) => (j.meta = [1])), 1e6, expected(2, 3)))).toBe("header");
  });

  test("verifyKvCacheFile checks everything without decoding", () => {
    expect(verifyKvCacheFile(file, expected(2, 3)).header.count).toBe(5);
    const damaged = file.slice();
    damaged[kvCacheHeaderEnd(file) + 1]! ^= 0x80;
    expect(problemOf(() => verifyKvCacheFile(damaged, expected(2, 3)))).toBe("checksum");
  });
});

describe("kvCacheFile encoding refuses bad input", () => {
  test("KvData not of the declared geometry", () => {
    const data = randomKv(2, 3, 4);
    expect(problemOf(() => encodeKvCacheFile(data, { ...expected(3, 3), meta: {} }))).toBe("geometry");
    expect(problemOf(() => encodeKvCacheFile(data, { ...expected(2, 4), meta: {} }))).toBe("geometry");
    expect(problemOf(() => encodeKvCacheFile({ ...data, positions: new Int32Array(3) }, { ...expected(2, 3), meta: {} }))).toBe("geometry");
  });

  test("meta not a JSON object, bad page size", () => {
    const data = randomKv(1, 3, 4);
    expect(problemOf(() => encodeKvCacheFile(data, { ...expected(1, 3), meta: [1, 2] }))).toBe("header");
    expect(problemOf(() => encodeKvCacheFile(data, { ...expected(1, 3), meta: { big: 1n } }))).toBe("header");
    expect(problemOf(() => encodeKvCacheFile(data, { ...expected(1, 3), meta: {}, pageSize: 0 }))).toBe("header");
  });
});
