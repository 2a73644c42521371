/**
 * Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 dequantization (through ggufQuantize's dequantizeValues:
 * quantBlocks32.ts for Q4_1, IQ4_NL and MXFP4, quantQ5_0.ts and quantQ5_1.ts for Q5_0 and Q5_1)
 * against llama.cpp's gguf-py: the blocks and gguf-py's values are those of the
 * runner's C++ test (cuda/test/quant32_gguf_py_fixture.h, written by
 * scripts/oracle/quant32_fixture.py), read from that header.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { dequantizeValues, quantizeValues } from "../../../src/model/gguf/ggufQuantize.ts";
import { GGML_TYPE, ggmlTensorBytes, ggmlTypeInfo } from "../../../src/model/gguf/ggufTypes.ts";
import { e8m0ToFloat32Half } from "../../../src/model/gguf/quantBlocks32.ts";
import { REPO_ROOT } from "../../helpers/cli.ts";

const FIXTURE = readFileSync(join(REPO_ROOT, "cuda", "test", "quant32_gguf_py_fixture.h"), "utf8");

function fixtureArray(name: string): number[] {
  const match = new RegExp(`${name}\\[\\] = \\{([^}]*)\\}`).exec(FIXTURE);
  if (!match) throw new Error(`fixture array ${name} is missing`);
  return match[1]!.split(",").map((text) => {
    const t = text.trim();
    if (t === "__builtin_inff()") return Infinity;
    if (t === "-__builtin_inff()") return -Infinity;
    return Number(t.replace(/f$/, ""));
  });
}

const TYPES = [
  ["Q4_1", GGML_TYPE.Q4_1, 20],
  ["Q5_0", GGML_TYPE.Q5_0, 22],
  ["Q5_1", GGML_TYPE.Q5_1, 24],
  ["IQ4_NL", GGML_TYPE.IQ4_NL, 18],
  ["MXFP4", GGML_TYPE.MXFP4, 17],
] as const;

describe("32-element block formats", () => {
  for (const [name, type, blockBytes] of TYPES) {
    test(`${name} (ggml type ${type}) dequantizes bit for bit as gguf-py`, () => {
      const info = ggmlTypeInfo(type);
      expect([info.name, info.blockSize, info.blockBytes]).toEqual([name, 32, blockBytes]);
      const bytes = Uint8Array.from(fixtureArray(`${name.toLowerCase()}_bytes`));
      const expected = Float32Array.from(fixtureArray(`${name.toLowerCase()}_values`));
      expect(bytes.length % blockBytes).toBe(0);
      expect(expected.length).toBe((bytes.length / blockBytes) * 32);
      const got = dequantizeValues(type, bytes, expected.length);
      for (let i = 0; i < got.length; i++) if (got[i] !== expected[i]) throw new Error(`${name} element ${i}: ${got[i]} vs gguf-py ${expected[i]}`);
    });
  }

  test("rows must hold whole 32-element blocks", () => {
    expect(ggmlTensorBytes(GGML_TYPE.MXFP4, [544, 3])).toBe(17 * 17 * 3);
    expect(() => ggmlTensorBytes(GGML_TYPE.Q5_0, [48])).toThrow("Q5_0 needs ne[0] to be a multiple of 32, got 48");
    expect(() => dequantizeValues(GGML_TYPE.Q4_1, new Uint8Array(19), 32)).toThrow("Q4_1: 32 values take 20 bytes, 19 given");
  });

  test("read, not written: quantizing to them is refused by name", () => {
    expect(() => quantizeValues(GGML_TYPE.Q4_1, new Float32Array(32))).toThrow("cannot quantize to Q4_1 (ggml type 3): ctxr writes F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  });

  test("E8M0 halved scale", () => {
    expect([e8m0ToFloat32Half(128), e8m0ToFloat32Half(127), e8m0ToFloat32Half(0)]).toEqual([1, 0.5, 2 ** -128]);
    expect(Math.fround(e8m0ToFloat32Half(1))).toBe(2 ** -127);
  });
});
