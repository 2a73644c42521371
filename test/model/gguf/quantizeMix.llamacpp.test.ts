/**
 * `ctxr model quantize` against llama.cpp's own quantizer (issue 29, item 3): random-weight
 * llama files written by llama.cpp's gguf-py (scripts/oracle/random_gguf.py), quantized to
 * Q4_K_M and Q5_K_M by llama-quantize (llama_ref quantize) and by ctxr, must agree tensor for
 * tensor in type, and (ctxr's quantizers being ggml's reference ones) in bytes; llama.cpp's
 * log-probabilities on ctxr's file stay within its own quantization error of the F32 file;
 * gguf-py dequantizes ctxr's Q5_0/Q5_1/Q5_K/Q4_K/Q6_K/Q8_0 tensors to ctxr's own values.
 *
 * llama.cpp comes from the shared oracle (test/helpers/llamaOracle.ts, tools/llama-oracle), which
 * the test command sets up.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dequantizeValues } from "../../../src/model/gguf/ggufQuantize.ts";
import { readGgufFile, readGgufTensorData } from "../../../src/model/gguf/ggufReader.ts";
import { ggmlElementCount, ggmlTypeName } from "../../../src/model/gguf/ggufTypes.ts";
import { quantizeModel } from "../../../src/model/gguf/quantizeModel.ts";
import type { QuantizeType } from "../../../src/model/gguf/quantizeTypePlan.ts";
import { runProgram } from "../../helpers/cli.ts";
import { LLAMA_FTYPES, llamaLogprobs as llamaLogprobRows, llamaOracle, llamaQuantize, writeRandomGguf, type LlamaFileType, type RandomGgufOptions } from "../../helpers/llamaOracle.ts";

const PYTHON = "/usr/bin/python3";

const FTYPES: Record<string, { llama: LlamaFileType; ctxr: QuantizeType }> = {
  Q4_K_M: { llama: "Q4_K_M", ctxr: "q4_k_m" },
  Q5_K_M: { llama: "Q5_K_M", ctxr: "q5_k_m" },
};

interface Shape {
  label: string;
  options: RandomGgufOptions;
}

const SHAPES: Shape[] = [
  // ffn 544: ffn_down rows are not whole 256-blocks (Q5_0/Q5_1, and Q8_0 where Q6_K was wanted); 8 layers: use_more_bits picks 0, 3, 6, 7; GQA 4
  { label: "8 layers, ffn 544, 1 kv head", options: { hidden: 256, ffn: 544, layers: 8, heads: 4, kvHeads: 1 } },
  // 12 layers: llama.cpp counts layers in numeric order (blk.10 after blk.9); no GQA
  { label: "12 layers, 4 kv heads of 4", options: { hidden: 256, ffn: 512, layers: 12, heads: 4, kvHeads: 4 } },
  // hidden 544: every input row and the output's rows are not whole 256-blocks (output Q8_0)
  { label: "hidden 544", options: { hidden: 544, ffn: 512, layers: 2, heads: 4, kvHeads: 2 } },
];

const work = mkdtempSync(join(tmpdir(), "ctxr-quantize-mix-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function run(command: string[], what: string): string {
  const result = runProgram(command);
  if (result.code !== 0) throw new Error(`${what} failed (exit ${result.code}):\n${result.stderr.trim()}`);
  return result.stdout;
}

/** llama.cpp's log-probability of each next id (ids.length − 1 values). */
function llamaLogprobs(path: string, ids: number[]): number[] {
  const { rows, vocab } = llamaLogprobRows(path, ids, work);
  return ids.slice(1).map((id, p) => rows[p * vocab + id]!);
}

/** Each tensor's ggml type name and stored bytes, by tensor name. */
function tensorsOf(path: string): Map<string, { type: string; bytes: Uint8Array }> {
  const gguf = readGgufFile(path);
  return new Map(gguf.tensors.map((t) => [t.name, { type: ggmlTypeName(t.type), bytes: readGgufTensorData(path, t) }]));
}

/** max and mean |a − b| */
function absDifferences(a: number[], b: number[]): { max: number; mean: number } {
  expect(a).toHaveLength(b.length);
  const differences = a.map((value, i) => Math.abs(value - b[i]!));
  return { max: Math.max(...differences), mean: differences.reduce((sum, d) => sum + d, 0) / differences.length };
}

/** 128 token ids below 266 (the random files' byte tokens and merges), fixed. */
const IDS = Array.from({ length: 128 }, (_, i) => (i * 97 + 13) % 266);

describe("ctxr's K-quant mixes against llama.cpp's (llama_ref)", () => {
  SHAPES.forEach((shape, index) => {
    const f32 = join(work, `shape${index}.f32.gguf`);
    for (const [ftypeName, ftype] of Object.entries(FTYPES)) {
      test(`${shape.label}: ${ftypeName} types and bytes tensor for tensor; logprobs within llama.cpp's own error`, async () => {
        if (!existsSync(f32)) writeRandomGguf("llama", f32, shape.options);
        const theirs = join(work, `shape${index}.${ftype.ctxr}.llama.gguf`);
        const ours = join(work, `shape${index}.${ftype.ctxr}.ctxr.gguf`);
        llamaQuantize(f32, theirs, ftype.llama);
        await quantizeModel({ input: f32, output: ours, type: ftype.ctxr, threads: 2 });

        const expected = tensorsOf(theirs);
        const actual = tensorsOf(ours);
        expect([...actual.keys()].sort()).toEqual([...expected.keys()].sort());
        const typesOf = (tensors: typeof actual) => Object.fromEntries([...tensors].map(([name, t]) => [name, t.type]));
        expect(typesOf(actual)).toEqual(typesOf(expected));
        const differing = [...expected].filter(([name, t]) => !Buffer.from(t.bytes).equals(Buffer.from(actual.get(name)!.bytes))).map(([name]) => name);
        expect(differing).toEqual([]);
        expect(readGgufFile(ours).metadata.get("general.file_type")).toEqual({ type: "uint32", value: LLAMA_FTYPES[ftype.llama] });

        const reference = llamaLogprobs(f32, IDS);
        const llamaError = absDifferences(llamaLogprobs(theirs, IDS), reference);
        const ctxrError = absDifferences(llamaLogprobs(ours, IDS), reference);
        const show = (e: { max: number; mean: number }) => `max ${e.max.toFixed(4)} mean ${e.mean.toFixed(4)}`;
        console.log(`${shape.label} ${ftypeName}: |Δ logprob| vs F32 over ${IDS.length - 1} positions (llama.cpp computing): llama.cpp's file ${show(llamaError)}, ctxr's ${show(ctxrError)}`);
        expect(llamaError.mean).toBeGreaterThan(0); // really quantized
        expect(ctxrError.max).toBeLessThanOrEqual(llamaError.max * 1.05 + 1e-4);
        expect(ctxrError.mean).toBeLessThanOrEqual(llamaError.mean * 1.05 + 1e-4);
      }, 120_000);
    }
  });

  test("gguf-py dequantizes ctxr's Q5_0, Q5_1, Q5_K, Q4_K, Q6_K and Q8_0 tensors to ctxr's own values", () => {
    const files = [join(work, "shape0.q4_k_m.ctxr.gguf"), join(work, "shape0.q5_k_m.ctxr.gguf")].filter(existsSync);
    expect(files).toHaveLength(2); // written by the tests above
    const seen = new Set<string>();
    for (const file of files) {
      const gguf = readGgufFile(file);
      const script = [
        "import sys, numpy as np",
        `sys.path.insert(0, ${JSON.stringify(llamaOracle().ggufPy)})`,
        "from gguf import GGUFReader, quants",
        "r = GGUFReader(sys.argv[1])",
        "for t in r.tensors:",
        "    v = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)",
        "    open(sys.argv[2] + '/' + t.name + '.f32', 'wb').write(v.tobytes())",
      ].join("\n");
      const out = mkdtempSync(join(work, "dequantized-"));
      run([PYTHON, "-c", script, file, out], "gguf-py dequantize");
      for (const info of gguf.tensors) {
        const ours = dequantizeValues(info.type, readGgufTensorData(file, info), ggmlElementCount(info.dims));
        const theirs = new Float32Array(readFileSync(join(out, `${info.name}.f32`)).buffer.slice(0));
        expect(theirs.length).toBe(ours.length);
        const firstDifference = ours.findIndex((value, i) => value !== theirs[i]);
        if (firstDifference >= 0) throw new Error(`${info.name} (${ggmlTypeName(info.type)}): value ${firstDifference} is ${ours[firstDifference]} here, ${theirs[firstDifference]} in gguf-py`);
        seen.add(ggmlTypeName(info.type));
      }
    }
    expect([...seen].sort()).toEqual(["F32", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"]);
  }, 120_000);
});
