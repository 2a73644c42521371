/**
 * The runner on Qwen3 (per-head q/k RMSNorm before RoPE, head_dim apart from hidden / heads),
 * without llama.cpp: a tiny Qwen3ForCausalLM folder (`ctxr model tiny --qk-norm --head-dim 24`)
 * and the GGUF file `ctxr model quantize` writes from it (arch qwen3) give the logits of
 * src/model/referenceLlama.ts to float rounding, in one prefill and one token a step; a Qwen3
 * file without its q/k norm weights is refused naming the tensor.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { metadataNumber, metadataString } from "../../src/model/gguf/ggufMetadata.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { referenceLlama, referenceLogits } from "../../src/model/referenceLlama.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

const TOKENS = Array.from(new TextEncoder().encode("Qwen3 normalizes each query and key head before rotating it."));

function maxAbsDifference(actual: Float32Array, expected: Float64Array, offset = 0): number {
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[offset + i]! - expected[i]!));
  return worst;
}

describe("qwen3 in the runner against the TypeScript reference", () => {
  let executable = "";
  let model: { path: string; cleanup(): void };
  let scratch: { path: string; cleanup(): void };
  let gguf = "";
  let expected: Float64Array[] = [];
  beforeAll(async () => {
    executable = buildRunner();
    model = tinyModelFolder({ seed: 4, qkNorm: true, headDim: 24, attentionGain: 2 }, "tiny-qwen3");
    scratch = tempFolder("ctxr-qwen3-");
    gguf = join(scratch.path, "tiny-qwen3-f32.gguf");
    await quantizeModel({ input: model.path, output: gguf, type: "f32" });
    const config = JSON.parse(readFileSync(join(model.path, "config.json"), "utf8"));
    expected = referenceLogits(referenceLlama(config, readSafetensors(new Uint8Array(readFileSync(join(model.path, "model.safetensors"))))), TOKENS);
  }, 300_000);
  afterAll(() => {
    model?.cleanup();
    scratch?.cleanup();
  });

  test("the converted file is a qwen3 GGUF with per-layer q/k norms of head_dim", () => {
    const file = readGgufFile(gguf);
    expect(metadataString(file.metadata, "general.architecture")).toBe("qwen3");
    expect(metadataNumber(file.metadata, "qwen3.attention.key_length")).toBe(24);
    const qNorm = file.tensors.find((t) => t.name === "blk.1.attn_q_norm.weight");
    expect(qNorm?.dims).toEqual([24]);
    expect(file.tensors.some((t) => t.name === "blk.0.attn_k_norm.weight")).toBe(true);
  });

  for (const which of ["folder", "gguf"] as const) {
    test(`${which}: one prefill, then one token a step: every logit within 1e-4 of the reference`, async () => {
      const runner = await RunnerProcess.start({ executable, model: which === "folder" ? model.path : gguf, threads: 2, kvDtype: "f32", blocks: 16 });
      try {
        const n = TOKENS.length;
        const table = await runner.alloc(Math.ceil(n / 16));
        const prefill = await runner.forward({ sequences: [{ table, tokens: TOKENS, indices: sequenceRange(0, n), logitRows: sequenceRange(0, n) }] });
        const vocab = expected[0]!.length;
        let worst = 0;
        for (let t = 0; t < n; t++) worst = Math.max(worst, maxAbsDifference(prefill.logits[0]!, expected[t]!, t * vocab));
        expect(worst).toBeLessThanOrEqual(1e-4);
        expect(worst).toBeGreaterThan(0);
        const steps = await runner.alloc(Math.ceil(n / 16));
        const half = n >> 1;
        await runner.forward({ sequences: [{ table: steps, tokens: TOKENS.slice(0, half), indices: sequenceRange(0, half), logitRows: [] }] });
        for (let t = half; t < n; t++) {
          const step = await runner.forward({ sequences: [{ table: steps, tokens: [TOKENS[t]!], indices: [t], logitRows: [0] }] });
          expect(maxAbsDifference(step.logits[0]!, expected[t]!)).toBeLessThanOrEqual(1e-4);
        }
      } finally {
        await runner.shutdown();
      }
    });
  }
});

describe("qwen3 model files the runner refuses", () => {
  test("a Qwen3 folder without self_attn.q_norm: the error names the missing tensor", async () => {
    const executable = buildRunner();
    const model = tinyModelFolder({ seed: 4, headDim: 24 }, "not-qwen3");
    try {
      const configPath = join(model.path, "config.json");
      const config = JSON.parse(readFileSync(configPath, "utf8"));
      await Bun.write(configPath, JSON.stringify({ ...config, architectures: ["Qwen3ForCausalLM"], model_type: "qwen3" }));
      const error = await RunnerProcess.start({ executable, model: model.path, threads: 1, blocks: 4 }).then(
        async (runner) => {
          await runner.shutdown();
          return null;
        },
        (e: Error) => e,
      );
      expect(error?.message).toContain("model.layers.0.self_attn.q_norm.weight");
    } finally {
      model.cleanup();
    }
  });
});
