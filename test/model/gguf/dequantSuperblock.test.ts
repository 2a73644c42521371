/**
 * Q2_K, Q3_K, Q5_K and IQ4_XS dequantization (src/model/gguf/dequantSuperblock.ts and
 * quantQ5K.ts, through dequantizeValues) against llama.cpp's gguf-py on random blocks: the fixture
 * cuda/test/fixtures/superblock_dequant.bin (scripts/oracle/dequant_fixture.py), which the
 * runner's C++ dequantization is checked against too.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { QUANTIZABLE_TYPES, dequantizeValues, quantizeValues } from "../../../src/model/gguf/ggufQuantize.ts";
import { GGML_TYPE, ggmlTypeInfo, ggmlTypeName } from "../../../src/model/gguf/ggufTypes.ts";
import { REPO_ROOT } from "../../helpers/cli.ts";

interface FixtureRecord {
  type: number;
  blocks: Uint8Array;
  values: Float32Array;
}

function readFixture(): FixtureRecord[] {
  const file = readFileSync(join(REPO_ROOT, "cuda/test/fixtures/superblock_dequant.bin"));
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const records: FixtureRecord[] = [];
  for (let at = 0; at < file.length; ) {
    const type = view.getUint32(at, true);
    const blockCount = view.getUint32(at + 4, true);
    const byteCount = view.getUint32(at + 8, true);
    const blocks = new Uint8Array(file.subarray(at + 12, at + 12 + byteCount));
    const values = new Float32Array(blockCount * 256);
    for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(at + 12 + byteCount + 4 * i, true);
    records.push({ type, blocks, values });
    at += 12 + byteCount + 4 * values.length;
  }
  return records;
}

describe("super-block dequantization against gguf-py", () => {
  const records = readFixture();

  test("the fixture holds the four types", () => {
    expect(records.map((r) => r.type).sort((a, b) => a - b)).toEqual([GGML_TYPE.Q2_K, GGML_TYPE.Q3_K, GGML_TYPE.Q5_K, GGML_TYPE.IQ4_XS]);
  });

  for (const record of records) {
    test(`${ggmlTypeInfo(record.type).name}: bit for bit`, () => {
      const got = dequantizeValues(record.type, record.blocks, record.values.length);
      let mismatches = 0;
      for (let i = 0; i < got.length; i++) if (got[i] !== record.values[i]) mismatches++;
      expect(mismatches).toBe(0);
    });
  }

  test("the types read but not written: quantizing to them is a clear error", () => {
    expect(() => quantizeValues(GGML_TYPE.Q2_K, new Float32Array(256))).toThrow("cannot quantize to Q2_K (ggml type 10): ctxr writes F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  });

  test("QUANTIZABLE_TYPES is what quantizeValues writes: the others are refused", () => {
    for (const type of Object.values(GGML_TYPE)) {
      const values = new Float32Array(256).fill(0.5);
      if (QUANTIZABLE_TYPES.includes(type)) expect(dequantizeValues(type, quantizeValues(type, values), 256)[7]).toBeCloseTo(0.5, 2);
      else expect(() => quantizeValues(type, values)).toThrow(`cannot quantize to ${ggmlTypeName(type)} (ggml type ${type})`);
    }
  });

  test("a byte count that does not match the blocks is refused", () => {
    expect(() => dequantizeValues(GGML_TYPE.IQ4_XS, new Uint8Array(135), 256)).toThrow("IQ4_XS: 256 values take 136 bytes, 135 given");
  });
});
