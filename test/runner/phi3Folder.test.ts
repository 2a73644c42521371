/**
 * Phi-3 from a Hugging Face folder through the real CPU runner: the fused projections load
 * (a Phi-3 folder made of a tiny Llama's weights gives the Llama's logits); LongRoPE with partial
 * rotary (Phi-4-mini's shape) from config.json gives the logits of the same folder converted to
 * GGUF by `ctxr model quantize` (whose phi3 path is checked against llama.cpp in
 * test/model/phi3LlamaOracle.test.ts); bad LongRoPE configs fail to load naming the field.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, TINY_REFERENCE, tinyModelFolder } from "../helpers/engineKit.ts";
import { maxAbsDifference, promptLogits } from "../helpers/promptLogits.ts";
import { phi3FolderFromLlama } from "../helpers/phi3Folder.ts";

setDefaultTimeout(120_000);

let executable = "";
const scratch = tempFolder("ctxr-phi3-folder-");
let llama: { path: string; cleanup(): void };
beforeAll(() => {
  executable = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  // head_dim 16: LongRoPE over 12 rotated dimensions has 6 factors.
  llama = tinyModelFolder({ seed: 5, hidden: 64, heads: 4, kvHeads: 2, intermediate: 96, layers: 2 }, "tiny-phi3-base");
}, 300_000);
afterAll(() => {
  llama?.cleanup();
  scratch.cleanup();
});

const prompt = TINY_REFERENCE.prompt_ids;

const LONGROPE = {
  partial_rotary_factor: 0.75,
  max_position_embeddings: 4096,
  original_max_position_embeddings: 64,
  rope_scaling: { type: "longrope", long_factor: [1, 1.5, 2.5, 4, 8, 16], short_factor: [1, 1.1, 1.2, 1.3, 1.4, 1.5] },
};

describe("Phi-3 folders", () => {
  test("fused qkv_proj and gate_up_proj give the Llama folder's logits", async () => {
    const phi3 = phi3FolderFromLlama(llama.path, join(scratch.path, "plain"));
    const expected = await promptLogits(executable, llama.path);
    expect(maxAbsDifference(await promptLogits(executable, phi3), expected)).toBeLessThanOrEqual(1e-6);
    expect(Math.max(...expected.map(Math.abs))).toBeGreaterThan(0.01);
  });

  test("LongRoPE and partial rotary: the folder gives its GGUF conversion's logits, long factors past the original context", async () => {
    const phi3 = phi3FolderFromLlama(llama.path, join(scratch.path, "longrope"), LONGROPE);
    const gguf = join(scratch.path, "longrope.gguf");
    await quantizeModel({ input: phi3, output: gguf, type: "f32" });
    const plain = await promptLogits(executable, phi3FolderFromLlama(llama.path, join(scratch.path, "plain2")));
    for (const blocks of [8, 2]) {  // 128 tokens > 64: long factors; 32 <= 64: short ones
      const folder = await promptLogits(executable, phi3, blocks);
      // Only the metadata's float32 rms epsilon and attention factor differ.
      expect(maxAbsDifference(await promptLogits(executable, gguf, blocks), folder)).toBeLessThanOrEqual(1e-4);
      expect(maxAbsDifference(folder, plain)).toBeGreaterThan(0.05);
    }
    expect(maxAbsDifference(await promptLogits(executable, phi3, 8), await promptLogits(executable, phi3, 2))).toBeGreaterThan(0.05);
  });

  test("LongRoPE and partial rotary: a chunk relocated to new positions is the chunk prefilled there; EXPORT's K has no rotation", async () => {
    const phi3 = phi3FolderFromLlama(llama.path, join(scratch.path, "relocate"), LONGROPE);
    const runner = await RunnerProcess.start({ executable, model: phi3, blocks: 64, threads: 2, kvDtype: "f32" });
    try {
      const chunk = prompt.slice(0, 20);
      const n = chunk.length;
      const prefill = async (table: number[], position: number) =>
        runner.forward({ sequences: [{ table, tokens: chunk, positions: sequenceRange(position, n), indices: sequenceRange(0, n), logitRows: [n - 1] }] });
      const next = async (table: number[], position: number) =>
        (await runner.forward({ sequences: [{ table, tokens: [chunk[0]!], positions: [position], indices: [n], logitRows: [0] }] })).logits[0]!;
      const [source, there, moved] = [await runner.alloc(2), await runner.alloc(2), await runner.alloc(2)];
      await prefill(source, 3);
      await prefill(there, 700);
      await runner.relocate({ srcTable: source, srcStart: 0, count: n, dstTable: moved, dstStart: 0, positions: sequenceRange(700, n) });
      const [a, b, c] = [await runner.export({ table: source, start: 0, count: n }), await runner.export({ table: there, start: 0, count: n }), await runner.export({ table: moved, start: 0, count: n })];
      for (let l = 0; l < a.layers.length; l++) {
        // Unrotated K does not depend on where the chunk sat (attention is relative), nor does V.
        expect(maxAbsDifference(a.layers[l]!.k, b.layers[l]!.k)).toBeLessThanOrEqual(1e-4);
        expect(maxAbsDifference(c.layers[l]!.k, b.layers[l]!.k)).toBeLessThanOrEqual(1e-4);
      }
      expect(maxAbsDifference(await next(moved, 700 + n), await next(there, 700 + n))).toBeLessThanOrEqual(1e-4);
      // Not vacuous: left at the old positions, the keys give other logits.
      expect(maxAbsDifference(await next(source, 700 + n), await next(there, 700 + n))).toBeGreaterThan(1e-2);
    } finally {
      await runner.shutdown();
    }
  });

  test("damaged phi3 GGUF files are refused naming the tensor or key", async () => {
    const phi3 = phi3FolderFromLlama(llama.path, join(scratch.path, "to-damage"), LONGROPE);
    const gguf = join(scratch.path, "to-damage.gguf");
    await quantizeModel({ input: phi3, output: gguf, type: "f32" });
    const good = new Uint8Array(readFileSync(gguf));
    const at = (text: string) => {
      const needle = new TextEncoder().encode(text);
      for (let i = 0; i + needle.length < good.length; i++) if (good.subarray(i, i + needle.length).every((b, j) => b === needle[j])) return i;
      throw new Error(`no ${text}`);
    };
    const loadError = (bytes: Uint8Array, name: string) => {
      const path = join(scratch.path, name);
      writeFileSync(path, bytes);
      const run = Bun.spawnSync([executable, "--model", path, "--blocks", "4"], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
      expect(run.exitCode).not.toBe(0);
      return run.stderr.toString();
    };
    const oneFactorTensor = good.slice();
    oneFactorTensor[at("rope_factors_long.weight") + 15] = "X".charCodeAt(0); // rope_factors_lonX.weight
    expect(loadError(oneFactorTensor, "one-factor.gguf")).toMatch(/rope_factors_long\.weight and rope_factors_short\.weight come together/);
    const oddRotary = good.slice();
    const key = "phi3.rope.dimension_count";
    new DataView(oddRotary.buffer).setUint32(at(key) + key.length + 4, 13, true); // after the key: type, then the value
    expect(loadError(oddRotary, "odd-rotary.gguf")).toMatch(/metadata phi3\.rope\.dimension_count must be even and at most the head size 16/);
    const noQkv = good.slice();
    noQkv[at("blk.1.attn_qkv.weight") + 9] = "X".charCodeAt(0); // blk.1.attn_Xkv.weight
    expect(loadError(noQkv, "no-qkv.gguf")).toMatch(/no tensor for model\.layers\.1\.self_attn\.qkv_proj\.weight/);
  });

  test("bad LongRoPE configs fail to load naming the field", async () => {
    for (const [name, changes, message] of [
      ["short", { ...LONGROPE, rope_scaling: { ...LONGROPE.rope_scaling, long_factor: [1, 2] } }, "rope_scaling.long_factor must be an array of 6 numbers"],
      ["yarn", { rope_scaling: { type: "yarn", factor: 2 } }, "yarn is not supported for Phi3ForCausalLM"],
    ] as const) {
      const folder = phi3FolderFromLlama(llama.path, join(scratch.path, `bad-${name}`), changes);
      await expect(promptLogits(executable, folder)).rejects.toThrow(message);
    }
  });
});
