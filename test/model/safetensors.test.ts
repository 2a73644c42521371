import { describe, expect, test } from "bun:test";
import { float32ToBfloat16Bits, float32ToFloat16Bits } from "../../src/model/halfFloats.ts";
import {
  BUFFER_ALIGNMENT,
  DTYPE_BYTES,
  SafetensorsError,
  type TensorData,
  encodeSafetensors,
  parseSafetensorsHeader,
  readSafetensors,
  safetensorsLayout,
  tensorToFloat32,
} from "../../src/model/safetensors.ts";

function f32Tensor(name: string, shape: number[], values: number[]): TensorData {
  return { name, dtype: "F32", shape, data: new Uint8Array(new Float32Array(values).buffer) };
}

function u16Tensor(name: string, dtype: "F16" | "BF16", shape: number[], values: number[]): TensorData {
  const convert = dtype === "F16" ? float32ToFloat16Bits : float32ToBfloat16Bits;
  return { name, dtype, shape, data: new Uint8Array(new Uint16Array(values.map(convert)).buffer) };
}

/** A file with a hand-written header (space-padded like the writer's) and `dataBytes` bytes after it. */
function fileWithHeader(header: unknown, dataBytes: number, headerText?: string): Uint8Array {
  const text = new TextEncoder().encode(headerText ?? JSON.stringify(header));
  const file = new Uint8Array(8 + text.length + dataBytes);
  new DataView(file.buffer).setBigUint64(0, BigInt(text.length), true);
  file.set(text, 8);
  return file;
}

function expectRejected(file: Uint8Array, message: string): void {
  let caught: unknown;
  try {
    parseSafetensorsHeader(file);
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(SafetensorsError);
  expect((caught as Error).message).toContain(message);
}

describe("safetensors writer and reader", () => {
  const tensors: TensorData[] = [
    f32Tensor("a.weight", [2, 3], [1, 2, 3, 4, 5, 6]),
    u16Tensor("b.half", "F16", [3], [0.5, -1, 65504]),
    f32Tensor("c.bias", [1], [-7.25]),
    u16Tensor("d.brain", "BF16", [2, 1], [1.5, -0.125]),
    { name: "e.bytes", dtype: "U8", shape: [3], data: new Uint8Array([1, 2, 3]) },
    f32Tensor("f.empty", [0, 4], []),
  ];
  const file = encodeSafetensors(tensors, { format: "pt" });

  test("round trip: names, dtypes, shapes, values and metadata", () => {
    const read = readSafetensors(file);
    expect(read.metadata).toEqual({ format: "pt" });
    expect([...read.tensors.keys()].sort()).toEqual(tensors.map((t) => t.name).sort());
    for (const tensor of tensors) {
      const got = read.tensors.get(tensor.name)!;
      expect(got.dtype).toBe(tensor.dtype);
      expect(got.shape).toEqual(tensor.shape);
      expect([...got.data]).toEqual([...tensor.data]);
    }
    expect([...tensorToFloat32(read.tensors.get("a.weight")!)]).toEqual([1, 2, 3, 4, 5, 6]);
    expect([...tensorToFloat32(read.tensors.get("b.half")!)]).toEqual([0.5, -1, 65504]);
    expect([...tensorToFloat32(read.tensors.get("d.brain")!)]).toEqual([1.5, -0.125]);
    expect(() => tensorToFloat32(read.tensors.get("e.bytes")!)).toThrow("not a float dtype");
  });

  test("the header is 8-byte aligned and every tensor is aligned to its element size, contiguously", () => {
    const header = parseSafetensorsHeader(file);
    expect(header.dataStart % BUFFER_ALIGNMENT).toBe(0);
    expect((header.headerBytes + 8) % BUFFER_ALIGNMENT).toBe(0);
    // The padding is spaces after the JSON.
    const text = new TextDecoder().decode(file.subarray(8, header.dataStart));
    expect(text.trimEnd()).toBe(text.slice(0, text.lastIndexOf("}") + 1));
    let expected = 0;
    for (const entry of header.entries) {
      expect(entry.begin).toBe(expected);
      expect(entry.fileOffset % DTYPE_BYTES[entry.dtype]).toBe(0);
      expected = entry.end;
    }
    expect(header.dataStart + expected).toBe(file.length);
    // Larger elements first, then the given order.
    expect(header.entries.map((e) => e.name)).toEqual(["a.weight", "c.bias", "f.empty", "b.half", "d.brain", "e.bytes"]);
  });

  test("the layout's header is the file's beginning", () => {
    const layout = safetensorsLayout(tensors, { format: "pt" });
    expect([...file.subarray(0, layout.header.length)]).toEqual([...layout.header]);
    expect(layout.fileBytes).toBe(file.length);
  });

  test("the writer refuses bad tensors", () => {
    expect(() => encodeSafetensors([f32Tensor("x", [2], [1, 2]), f32Tensor("x", [1], [1])])).toThrow("given twice");
    expect(() => encodeSafetensors([f32Tensor("__metadata__", [1], [1])])).toThrow("__metadata__");
    expect(() => encodeSafetensors([f32Tensor("x", [3], [1, 2])])).toThrow("8 bytes given, 12 expected");
    expect(() => safetensorsLayout([{ name: "x", dtype: "F32", shape: [-1] }])).toThrow("bad dimension");
    expect(() => safetensorsLayout([{ name: "x", dtype: "F99" as "F32", shape: [1] }])).toThrow("unknown dtype");
  });
});

describe("safetensors reader rejects damaged files with clear errors", () => {
  const good = { w: { dtype: "F32", shape: [2], data_offsets: [0, 8] } };

  test("a valid hand-written file parses", () => {
    expect(parseSafetensorsHeader(fileWithHeader(good, 8)).entries.map((e) => e.name)).toEqual(["w"]);
  });

  const cases: [string, () => Uint8Array, string][] = [
    ["shorter than 8 bytes", () => new Uint8Array(5), "shorter than the 8-byte header length"],
    [
      "header length over the limit",
      () => {
        const file = new Uint8Array(16);
        new DataView(file.buffer).setBigUint64(0, 2n ** 40n, true);
        return file;
      },
      "over the limit",
    ],
    [
      "header length past the end",
      () => {
        const file = fileWithHeader(good, 8);
        new DataView(file.buffer).setBigUint64(0, BigInt(file.length), true);
        return file;
      },
      "runs past the end of the file",
    ],
    ["not UTF-8", () => fileWithHeader(null, 0, "{\"\xff\": 1}").map((b, i) => (i === 10 ? 0xff : b)), "not valid UTF-8"],
    ["not starting with {", () => fileWithHeader(null, 0, ' {"w": 1}'), "does not start with '{'"],
    ["truncated JSON", () => fileWithHeader(null, 0, '{"w": {"dtype": "F32"'), "not valid JSON"],
    ["not an object", () => fileWithHeader(null, 0, "{}").map((b, i) => (i === 8 ? 0x5b : i === 9 ? 0x5d : b)), "does not start with '{'"],
    ["unknown dtype", () => fileWithHeader({ w: { dtype: "F128", shape: [1], data_offsets: [0, 16] } }, 16), "tensor w: unknown dtype \"F128\""],
    ["negative dimension", () => fileWithHeader({ w: { dtype: "F32", shape: [-2], data_offsets: [0, 8] } }, 8), "bad dimension -2"],
    ["fractional dimension", () => fileWithHeader({ w: { dtype: "F32", shape: [1.5], data_offsets: [0, 8] } }, 8), "bad dimension 1.5"],
    ["shape not an array", () => fileWithHeader({ w: { dtype: "F32", shape: 2, data_offsets: [0, 8] } }, 8), "shape is 2, not an array"],
    ["offsets not a pair", () => fileWithHeader({ w: { dtype: "F32", shape: [2], data_offsets: [0] } }, 8), "not a [begin, end] pair"],
    ["end before begin", () => fileWithHeader({ w: { dtype: "F32", shape: [0], data_offsets: [8, 0] } }, 8), "end 0 is before begin 8"],
    ["size mismatch", () => fileWithHeader({ w: { dtype: "F32", shape: [3], data_offsets: [0, 8] } }, 8), "needs 12 bytes but data_offsets span 8"],
    ["past the buffer", () => fileWithHeader({ w: { dtype: "F32", shape: [4], data_offsets: [0, 16] } }, 8), "past the end of the 8-byte buffer"],
    [
      "a hole",
      () => fileWithHeader({ w: { dtype: "F32", shape: [1], data_offsets: [4, 8] } }, 8),
      "hole in the byte buffer before tensor w",
    ],
    [
      "an overlap",
      () =>
        fileWithHeader(
          { a: { dtype: "F32", shape: [2], data_offsets: [0, 8] }, b: { dtype: "F32", shape: [1], data_offsets: [4, 8] } },
          8,
        ),
      "overlaps",
    ],
    ["bytes after the last tensor", () => fileWithHeader(good, 12), "cover 8 bytes of the 12-byte buffer"],
    ["an unexpected field", () => fileWithHeader({ w: { ...good.w, extra: 1 } }, 8), "unexpected field extra"],
    ["metadata not strings", () => fileWithHeader({ __metadata__: { format: 1 }, ...good }, 8), "__metadata__.format is 1, not a string"],
    ["an entry that is not an object", () => fileWithHeader({ w: [1, 2] }, 0), "entry is an array, not an object"],
    [
      // JSON keeps the last of two equal keys; the first one's bytes then form a hole.
      "a duplicated name",
      () => fileWithHeader(null, 8, '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'),
      "hole",
    ],
  ];
  for (const [name, make, message] of cases) {
    test(name, () => expectRejected(make(), message));
  }

  test("a file cut short inside the tensors is rejected, and so is every truncation of a real file", () => {
    const file = encodeSafetensors([f32Tensor("a", [4], [1, 2, 3, 4]), f32Tensor("b", [2], [5, 6])]);
    for (let length = 0; length < file.length; length++) {
      expect(() => parseSafetensorsHeader(file.subarray(0, length))).toThrow(SafetensorsError);
    }
  });

  test("a header read on its own needs the file size and enough bytes", () => {
    const file = encodeSafetensors([f32Tensor("a", [4], [1, 2, 3, 4])]);
    const header = parseSafetensorsHeader(file);
    expect(parseSafetensorsHeader(file.subarray(0, header.dataStart), file.length).entries[0]!.name).toBe("a");
    expect(() => parseSafetensorsHeader(file.subarray(0, header.dataStart - 1), file.length)).toThrow("the header needs");
  });
});
