/**
 * GGUF files through the real CPU runner: the tiny models written as GGUF (llama.cpp's names,
 * the llama q/k row permutation, rope_freqs for llama3 scaling, tied output, qwen2 biases) give
 * the same logits as the same weights as safetensors; a folder holding one .gguf loads; damaged
 * or unsupported files fail to load with an error naming the tensor or key.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import type { TinyModelOptions } from "../../src/model/tinyModel.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, TINY_REFERENCE, tinyModelFolder } from "../helpers/engineKit.ts";
import { maxAbsDifference, promptLogits } from "../helpers/promptLogits.ts";
import { ggufFromModelFolder, type TinyGgufType } from "../helpers/ggufTinyModel.ts";

setDefaultTimeout(120_000);

// CTXR_TEST_RUNNER: a runner built elsewhere (while developing), instead of cuda/build's.
let executable = "";
beforeAll(() => {
  executable = process.env.CTXR_TEST_RUNNER ?? buildRunner();
}, 300_000);

const prompt = TINY_REFERENCE.prompt_ids;

const variants: { name: string; options: Partial<TinyModelOptions>; type: TinyGgufType }[] = [
  { name: "llama f32", options: {}, type: "f32" },
  { name: "llama f16 (GQA, 2 layers)", options: { dtype: "f16" }, type: "f16" },
  { name: "llama f32, llama3 rope scaling (rope_freqs), tied output", options: { ropeScaling: "llama3", tieEmbeddings: true }, type: "f32" },
  { name: "qwen2 f32 with q/k/v biases", options: { qkvBias: true }, type: "f32" },
  { name: "qwen2 f16 with biases, tied output", options: { qkvBias: true, dtype: "f16", tieEmbeddings: true }, type: "f16" },
];

describe("GGUF and safetensors give the same logits", () => {
  for (const v of variants) {
    test(v.name, async () => {
      const model = tinyModelFolder({ ...v.options, seed: 3 });
      try {
        const gguf = join(model.path, "..", "tiny.gguf");
        writeFileSync(gguf, ggufFromModelFolder(model.path, v.type));
        const expected = await promptLogits(executable, model.path);
        const actual = await promptLogits(executable, gguf);
        // The same weights; only the metadata's float32 rms epsilon (1e-5 → 9.99999975e-6) differs.
        const worst = maxAbsDifference(actual, expected);
        expect(worst).toBeLessThanOrEqual(1e-5);
        // Not vacuous: the logits are far from zero (an unpermuted q/k moves them by ~3).
        expect(Math.max(...expected.map(Math.abs))).toBeGreaterThan(0.01);
      } finally {
        model.cleanup();
      }
    });
  }

  test("a folder holding one .gguf and no safetensors loads it", async () => {
    const model = tinyModelFolder({ seed: 3 });
    const folder = tempFolder("ctxr-gguf-");
    try {
      const dir = join(folder.path, "m");
      mkdirSync(dir);
      writeFileSync(join(dir, "model-f32.gguf"), ggufFromModelFolder(model.path, "f32"));
      expect(maxAbsDifference(await promptLogits(executable, dir), await promptLogits(executable, model.path))).toBeLessThanOrEqual(1e-5);
    } finally {
      model.cleanup();
      folder.cleanup();
    }
  });
});

// Prompt logits (every row), then greedy decode one token a step, logits of every step.
async function greedyRun(model: string, prompt: number[], steps: number): Promise<{ logits: Float32Array[]; tokens: number[] }> {
  const runner = await RunnerProcess.start({ executable, model, blocks: 8, threads: 2 });
  try {
    const p = prompt.length;
    const table = await runner.alloc(Math.ceil((p + steps) / 16));
    const first = await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, p), logitRows: sequenceRange(0, p) }] });
    const rows = first.logits[0]!; // [p][vocab]
    const vocab = rows.length / p;
    const logits = [rows];
    const tokens = [argmax(rows.subarray((p - 1) * vocab))];
    for (let k = 1; k < steps; k++) {
      const step = await runner.forward({ sequences: [{ table, tokens: [tokens[k - 1]!], indices: [p + k - 1], logitRows: [0] }] });
      logits.push(step.logits[0]!);
      tokens.push(argmax(step.logits[0]!));
    }
    return { logits, tokens };
  } finally {
    await runner.shutdown();
  }
}

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

// The runner reads F16 weights in place (widened in registers, cuda/src/cpu/half_linear.h): the
// prompt (GEMM path) and the single-token steps (row dot products) of an F16 GGUF of an f32
// model stay within what rounding the weights to half precision moves the logits by.
test("an F16 GGUF of an f32 model: the same greedy tokens, logits within half-precision rounding", async () => {
  const model = tinyModelFolder({ seed: 1 });
  try {
    const gguf = join(model.path, "..", "tiny-f16.gguf");
    writeFileSync(gguf, ggufFromModelFolder(model.path, "f16"));
    const long = [...prompt, ...prompt, ...prompt]; // 39 tokens: more than the row dot products take
    const expected = await greedyRun(model.path, long, 8);
    const actual = await greedyRun(gguf, long, 8);
    expect(actual.tokens).toEqual(expected.tokens);
    expect(actual.logits.length).toBe(expected.logits.length);
    let worst = 0, scale = 0;
    expected.logits.forEach((row, i) => {
      worst = Math.max(worst, maxAbsDifference(actual.logits[i]!, row));
      scale = Math.max(scale, ...row.map(Math.abs));
    });
    // Weights rounded to 11 significant bits (relative 2⁻¹²): measured worst 0.0049 at scale 3.7.
    expect(worst).toBeLessThanOrEqual(1e-2 * scale);
    expect(worst).toBeGreaterThan(0); // the weights were rounded: not the f32 model by mistake
  } finally {
    model.cleanup();
  }
});

describe("damaged GGUF files are refused before any weight is used", () => {
  let good: Uint8Array;
  let folder: { path: string; cleanup(): void };
  beforeAll(() => {
    const model = tinyModelFolder({ seed: 3 });
    good = ggufFromModelFolder(model.path, "f32");
    model.cleanup();
    folder = tempFolder("ctxr-gguf-bad-");
  });
  afterAll(() => folder.cleanup());

  function loadError(bytes: Uint8Array, name: string): string {
    const path = join(folder.path, name);
    writeFileSync(path, bytes);
    const run = Bun.spawnSync([executable, "--model", path, "--blocks", "4"], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    expect(run.exitCode).not.toBe(0);
    return run.stderr.toString();
  }
  // Offset of a tensor's info in the header: its name as a GGUF string.
  function tensorInfoAt(name: string): number {
    const needle = new TextEncoder().encode(name);
    for (let i = 0; i + needle.length < good.length; i++) {
      if (good.subarray(i, i + needle.length).every((b, j) => b === needle[j]) && good[i - 8] === needle.length) return i + needle.length;
    }
    throw new Error(`no tensor info ${name}`);
  }

  test("truncated: the tensor running past the end is named", () => {
    expect(loadError(good.subarray(0, good.length - 100), "truncated.gguf")).toMatch(/tensor blk\.1\.ffn_down\.weight: data .* runs past the end of the file/);
  });
  test("truncated header", () => {
    expect(loadError(good.subarray(0, 200), "header.gguf")).toMatch(/truncated file/);
  });
  test("an unsupported tensor type is named with the tensor", () => {
    const bytes = good.slice();
    const at = tensorInfoAt("blk.0.attn_v.weight");
    const view = new DataView(bytes.buffer);
    const dims = view.getUint32(at, true);
    view.setUint32(at + 4 + 8 * dims, 16, true); // IQ2_XXS
    expect(loadError(bytes, "type.gguf")).toMatch(/tensor blk\.0\.attn_v\.weight: type IQ2_XXS is not supported/);
  });
  test("a super-block type on rows that are not whole 256-blocks is named", () => {
    const bytes = good.slice();
    const at = tensorInfoAt("blk.0.attn_v.weight");
    const view = new DataView(bytes.buffer);
    const dims = view.getUint32(at, true);
    view.setUint32(at + 4 + 8 * dims, 23, true); // IQ4_XS on the tiny model's 64 columns
    expect(loadError(bytes, "iq4xs.gguf")).toMatch(/tensor blk\.0\.attn_v\.weight: 64 columns are not a multiple of the IQ4_XS block \(256\)/);
  });
  test("a misaligned tensor offset is named", () => {
    const bytes = good.slice();
    const at = tensorInfoAt("blk.0.ffn_up.weight");
    const view = new DataView(bytes.buffer);
    const dims = view.getUint32(at, true);
    const offsetAt = at + 4 + 8 * dims + 4;
    view.setBigUint64(offsetAt, view.getBigUint64(offsetAt, true) + 4n, true);
    expect(loadError(bytes, "aligned.gguf")).toMatch(/tensor blk\.0\.ffn_up\.weight: data offset \d+ is not aligned to 32/);
  });
  test("an absurd tensor count", () => {
    const bytes = good.slice();
    new DataView(bytes.buffer).setBigUint64(8, 1n << 40n, true);
    expect(loadError(bytes, "count.gguf")).toMatch(/absurd tensor count/);
  });
  test("a missing metadata key is named", () => {
    const bytes = good.slice();
    const key = new TextEncoder().encode("llama.block_count");
    for (let i = 0; i + key.length < bytes.length; i++)
      if (bytes.subarray(i, i + key.length).every((b, j) => b === key[j])) {
        bytes[i + 6] = "X".charCodeAt(0); // llama.Xlock_count
        break;
      }
    expect(loadError(bytes, "key.gguf")).toMatch(/metadata llama\.block_count is missing/);
  });
  test("a wrong shape is named", () => {
    const bytes = good.slice();
    // ffn_down [ne0 = 128, ne1 = 64] → [64, 128]: the same bytes, the transposed shape.
    const at = tensorInfoAt("blk.1.ffn_down.weight");
    const view = new DataView(bytes.buffer);
    const ne0 = view.getBigUint64(at + 4, true), ne1 = view.getBigUint64(at + 12, true);
    view.setBigUint64(at + 4, ne1, true);
    view.setBigUint64(at + 12, ne0, true);
    expect(loadError(bytes, "shape.gguf")).toMatch(/tensor blk\.1\.ffn_down\.weight has shape \[128, 64\], expected \[64, 128\]/);
  });
});
