import { describe, expect, test } from "bun:test";
import { closeSync, ftruncateSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgufError, type GgufMetadata, type GgufValue, ggufArray, ggufString, ggufUint32, metadataNumber, metadataString } from "../../../src/model/gguf/ggufMetadata.ts";
import { parseGguf, readGgufFile, readGgufTensorData } from "../../../src/model/gguf/ggufReader.ts";
import { GGML_TYPE, ggmlTensorBytes } from "../../../src/model/gguf/ggufTypes.ts";
import { type GgufTensorToWrite, encodeGguf, ggufLayout, writeGgufFile } from "../../../src/model/gguf/ggufWriter.ts";

function everyValueType(): GgufMetadata {
  const values: [string, GgufValue][] = [
    ["u8", { type: "uint8", value: 255 }],
    ["i8", { type: "int8", value: -128 }],
    ["u16", { type: "uint16", value: 65535 }],
    ["i16", { type: "int16", value: -32768 }],
    ["u32", { type: "uint32", value: 4294967295 }],
    ["i32", { type: "int32", value: -2147483648 }],
    ["f32", { type: "float32", value: 1.5 }],
    ["f64", { type: "float64", value: Math.PI }],
    ["u64", { type: "uint64", value: 2n ** 64n - 1n }],
    ["i64", { type: "int64", value: -(2n ** 63n) }],
    ["yes", { type: "bool", value: true }],
    ["no", { type: "bool", value: false }],
    ["text", ggufString("héllo ▁ wörld")],
    ["empty", ggufString("")],
    ["strings", ggufArray("string", ["a", "", "ü"])],
    ["floats", ggufArray("float32", [0.5, -2])],
    ["longs", ggufArray("int64", [-1n, 5n])],
    ["bools", ggufArray("bool", [true, false])],
    ["nested", ggufArray("array", [{ itemType: "uint8", items: [1, 2] }, { itemType: "array", items: [{ itemType: "string", items: ["x"] }] }])],
    ["none", ggufArray("int32", [])],
  ];
  return new Map(values);
}

function f32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

function sampleTensors(): GgufTensorToWrite[] {
  const a = f32Bytes([1, 2, 3, 4, 5, 6]);
  const b = new Uint8Array(ggmlTensorBytes(GGML_TYPE.Q8_0, [32, 2])).map((_, i) => i & 0xff);
  return [
    { name: "a.weight", type: GGML_TYPE.F32, dims: [3, 2], data: () => a },
    { name: "b.weight", type: GGML_TYPE.Q8_0, dims: [32, 2], data: () => [b.subarray(0, 10), b.subarray(10)] },
  ];
}

describe("GGUF writer and reader", () => {
  test("round trip of every value type, tensor infos and data, aligned", () => {
    const metadata = everyValueType();
    const file = encodeGguf(metadata, sampleTensors());
    const gguf = parseGguf(file);
    expect(gguf.version).toBe(3);
    expect(gguf.metadata).toEqual(metadata);
    expect([...gguf.metadata.keys()]).toEqual([...metadata.keys()]);
    expect(gguf.alignment).toBe(32);
    expect(gguf.dataStart % 32).toBe(0);
    expect(gguf.tensors.map((t) => [t.name, t.type, t.dims, t.bytes])).toEqual([
      ["a.weight", 0, [3, 2], 24],
      ["b.weight", 8, [32, 2], 68],
    ]);
    for (const tensor of gguf.tensors) expect(tensor.fileOffset % 32).toBe(0);
    const [a, b] = gguf.tensors;
    expect(file.subarray(a!.fileOffset, a!.fileOffset + a!.bytes)).toEqual(f32Bytes([1, 2, 3, 4, 5, 6]));
    expect(file[b!.fileOffset + 67]).toBe(67);
    expect(file.length).toBe(b!.fileOffset + b!.bytes);
  });

  test("a header far over the writer's first buffer (a real vocabulary): every value written where the buffer grew", () => {
    // 50,000 tokens and numbers interleaved: the buffer grows in the middle of strings and of numbers alike.
    const tokens = Array.from({ length: 50_000 }, (_, i) => `tok${i}▁${"x".repeat(i % 13)}`);
    const metadata: GgufMetadata = new Map([
      ["tokenizer.ggml.tokens", ggufArray("string", tokens)],
      ["tokenizer.ggml.token_type", ggufArray("int32", tokens.map((_, i) => (i % 6) + 1))],
      ["tokenizer.ggml.scores", ggufArray("float32", tokens.map((_, i) => -i / 4))],
      ["after", ggufUint32(123_456)],
    ]);
    const gguf = parseGguf(encodeGguf(metadata, sampleTensors()));
    expect(gguf.metadata).toEqual(metadata);
  });

  test("general.alignment is honoured", () => {
    const metadata: GgufMetadata = new Map([["general.alignment", ggufUint32(64)]]);
    const gguf = parseGguf(encodeGguf(metadata, sampleTensors()));
    expect(gguf.alignment).toBe(64);
    for (const tensor of gguf.tensors) expect(tensor.fileOffset % 64).toBe(0);
  });

  test("accessors name the key", () => {
    const metadata = everyValueType();
    expect(metadataString(metadata, "text")).toBe("héllo ▁ wörld");
    expect(metadataNumber(metadata, "u16")).toBe(65535);
    expect(() => metadataString(metadata, "u8")).toThrow("metadata key u8 is a uint8, a string expected");
    expect(() => metadataNumber(metadata, "missing.key")).toThrow("metadata key missing.key is missing");
    expect(() => metadataNumber(metadata, "u64")).toThrow("u64");
  });

  test("writer refuses bad values, naming the key or tensor", () => {
    expect(() => encodeGguf(new Map([["k", { type: "uint8", value: 256 }]]), [])).toThrow("metadata key k");
    expect(() => encodeGguf(new Map([["k", ggufArray("int16", [1, 70000])]]), [])).toThrow("metadata key k[1]");
    const bad = { name: "t", type: GGML_TYPE.Q4_K, dims: [100], data: () => new Uint8Array(0) };
    expect(() => encodeGguf(new Map(), [bad])).toThrow("tensor t: Q4_K needs ne[0] to be a multiple of 256");
    const short = { name: "s", type: GGML_TYPE.F32, dims: [4], data: () => new Uint8Array(8) };
    expect(() => encodeGguf(new Map(), [short])).toThrow("tensor s: 8 bytes given, 16 expected");
    const unknown = { name: "u", type: 4, dims: [32], data: () => new Uint8Array(8) }; // ggml's removed Q4_2
    expect(() => encodeGguf(new Map(), [unknown])).toThrow("tensor u: unsupported ggml tensor type 4");
  });

  test("writeGgufFile writes through a temporary file, leaves nothing on failure", () => {
    const folder = mkdtempSync(join(tmpdir(), "ctxr-gguf-"));
    try {
      const path = join(folder, "m.gguf");
      const size = writeGgufFile(path, everyValueType(), sampleTensors());
      const gguf = readGgufFile(path);
      expect(gguf.fileBytes).toBe(size);
      expect(readGgufTensorData(path, gguf.tensors[0]!)).toEqual(f32Bytes([1, 2, 3, 4, 5, 6]));
      const failing = { name: "x", type: GGML_TYPE.F32, dims: [1], data: (): Uint8Array => { throw new Error("no data for x"); } };
      expect(() => writeGgufFile(join(folder, "bad.gguf"), new Map(), [failing])).toThrow("no data for x");
      expect(readdirSync(folder)).toEqual(["m.gguf"]);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});

describe("GGUF reader validation", () => {
  const good = encodeGguf(everyValueType(), sampleTensors());
  const expectGgufError = (bytes: Uint8Array, pattern: string | RegExp) => {
    let caught: unknown;
    try {
      parseGguf(bytes);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(GgufError);
    expect((caught as Error).message).toMatch(typeof pattern === "string" ? new RegExp(pattern) : pattern);
  };
  const patched = (at: number, bytes: number[]) => {
    const copy = good.slice();
    copy.set(bytes, at);
    return copy;
  };

  test("bad magic and versions", () => {
    expectGgufError(patched(0, [0x47, 0x47, 0x4d, 0x4c]), 'bad magic "GGML"');
    expectGgufError(patched(4, [1, 0, 0, 0]), "unsupported GGUF version 1");
    expectGgufError(patched(4, [0, 0, 0, 3]), "big-endian");
    expect(parseGguf(patched(4, [2, 0, 0, 0])).version).toBe(2);
  });

  test("every truncation of the header is a GgufError, never another error", () => {
    const headerEnd = parseGguf(good).dataStart;
    for (let length = 0; length < good.length; length++) {
      expect(() => parseGguf(good.subarray(0, length))).toThrow(GgufError);
    }
    expectGgufError(good.subarray(0, headerEnd - 40), "file truncated");
    expectGgufError(good.subarray(0, good.length - 1), "tensor b.weight: data .* runs past the end of the file");
  });

  test("absurd counts and lengths are refused before allocating", () => {
    expectGgufError(patched(8, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0]), "tensor count .* cannot fit");
    expectGgufError(patched(16, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]), "metadata count .* cannot fit");
    expectGgufError(patched(16, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), "metadata count .* absurdly large");
    // the first key's length
    expectGgufError(patched(24, [0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]), "metadata key #0");
    // the string array's length: find "strings" key
    const at = Buffer.from(good).indexOf("strings") + 7 + 4 + 4;
    expectGgufError(patched(at, [0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]), "metadata key strings: array of \\d+ string items cannot fit");
  });

  test("flipping any header byte gives a GgufError or a parse (never another error)", () => {
    const headerEnd = parseGguf(good).dataStart;
    for (let at = 0; at < headerEnd; at++) {
      for (const xor of [0x01, 0x80, 0xff]) {
        const copy = good.slice();
        copy[at]! ^= xor;
        try {
          parseGguf(copy);
        } catch (error) {
          if (!(error instanceof GgufError)) throw new Error(`byte ${at} ^ ${xor}: ${String(error)}`);
        }
      }
    }
  });

  test("tensor problems name the tensor", () => {
    const tensorFile = (tensors: GgufTensorToWrite[]) => encodeGguf(new Map(), tensors);
    const one = tensorFile([{ name: "only", type: GGML_TYPE.F32, dims: [8], data: () => new Uint8Array(32) }]);
    const typeAt = Buffer.from(one).indexOf("only") + 4 + 4 + 8;
    const withType = (type: number) => {
      const copy = one.slice();
      new DataView(copy.buffer).setUint32(typeAt, type, true);
      return copy;
    };
    expectGgufError(withType(77), "tensor only: unsupported ggml tensor type 77");
    expectGgufError(withType(GGML_TYPE.Q8_0), "tensor only: Q8_0 needs ne\\[0\\] to be a multiple of 32");
    const misaligned = one.slice();
    new DataView(misaligned.buffer).setBigUint64(typeAt + 4, 4n, true);
    expectGgufError(misaligned, "tensor only: data offset 4 is not a multiple of the alignment 32");
    const two = tensorFile([
      { name: "first", type: GGML_TYPE.F32, dims: [16], data: () => new Uint8Array(64) },
      { name: "second", type: GGML_TYPE.F32, dims: [16], data: () => new Uint8Array(64) },
    ]);
    const secondOffsetAt = Buffer.from(two).indexOf("second") + 6 + 4 + 8 + 4;
    const overlapping = two.slice();
    new DataView(overlapping.buffer).setBigUint64(secondOffsetAt, 32n, true);
    expectGgufError(overlapping, "tensor second: data overlaps tensor first");
    const renamed = tensorFile([
      { name: "same", type: GGML_TYPE.F32, dims: [16], data: () => new Uint8Array(64) },
      { name: "samf", type: GGML_TYPE.F32, dims: [16], data: () => new Uint8Array(64) },
    ]);
    const samfAt = Buffer.from(renamed).indexOf("samf");
    renamed[samfAt + 3] = "e".charCodeAt(0);
    expectGgufError(renamed, "tensor same appears twice");
  });

  test("a file opens without reading its tensor data", () => {
    const folder = mkdtempSync(join(tmpdir(), "ctxr-gguf-"));
    try {
      const path = join(folder, "big.gguf");
      const file = encodeGguf(new Map([["general.name", ggufString("big")]]), [{ name: "w", type: GGML_TYPE.F32, dims: [4], data: () => new Uint8Array(16) }]);
      writeFileSync(path, file);
      expect(readGgufFile(path).tensors[0]!.name).toBe("w");
      expect(() => readGgufFile(join(folder, "missing.gguf"))).toThrow(/cannot open .*missing.gguf/);

      // A 5 GB file (sparse): the header is all that is read.
      const hugePath = join(folder, "huge.gguf");
      const rows = 5 * 1024 * 256; // × 1024 f32 columns = 5 GiB
      const layout = ggufLayout(new Map([["general.name", ggufString("huge")]]), [{ name: "huge", type: GGML_TYPE.F32, dims: [1024, rows] }]);
      const fd = openSync(hugePath, "w");
      writeSync(fd, layout.header);
      ftruncateSync(fd, layout.fileBytes);
      closeSync(fd);
      const started = performance.now();
      const huge = readGgufFile(hugePath);
      expect(performance.now() - started).toBeLessThan(200);
      expect(huge.tensors[0]!.bytes).toBe(1024 * rows * 4);
      expect(huge.fileBytes).toBeGreaterThan(5e9);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
