/**
 * The runner loading qwen3moe files (issue 32): a tiny file loads as Qwen3MoeForCausalLM, answers
 * a prefill and batched decode steps of two sequences (each token's k experts reported by FORWARD
 * bit 4, within range and distinct), and files whose expert metadata disagree with themselves or
 * with their tensors are refused with an error naming the key or the tensor.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { writeTinyQwen3Moe } from "../helpers/qwen3moeTinyModel.ts";

setDefaultTimeout(120_000);

describe("qwen3moe in the runner", () => {
  let executable = "";
  let scratch: { path: string; cleanup(): void };
  beforeAll(() => {
    executable = buildRunner();
    scratch = tempFolder("ctxr-qwen3moe-load-");
  });
  afterAll(() => scratch?.cleanup());

  test("loads, and reports k distinct experts a token per layer in a batch of two sequences", async () => {
    const { gguf } = writeTinyQwen3Moe(`${scratch.path}/good`, { experts: 8, expertsUsed: 3, layers: 2 });
    const runner = await RunnerProcess.start({ executable, model: gguf, blocks: 8, blockSize: 16, threads: 2 });
    try {
      expect(runner.info.architecture).toBe("Qwen3MoeForCausalLM");
      const a = await runner.alloc(2);
      const b = await runner.alloc(2);
      const prompt = [1, 2, 3, 4, 5, 6, 7];
      const first = await runner.forward({ sequences: [{ table: a, tokens: prompt, indices: sequenceRange(0, 7), logitRows: [6] }, { table: b, tokens: prompt.slice(0, 3), indices: sequenceRange(0, 3), logitRows: [2] }], expertRoutes: true });
      const step = await runner.forward({ sequences: [{ table: a, tokens: [8], indices: sequenceRange(7, 1), logitRows: [0] }, { table: b, tokens: [9], indices: sequenceRange(3, 1), logitRows: [0] }], expertRoutes: true });
      for (const result of [first, step])
        for (const routes of result.expertRoutes!) {
          expect(routes.k).toBe(3);
          expect(routes.layers.length).toBe(2);
          for (const layer of routes.layers)
            for (let t = 0; t < layer.length / 3; t++) {
              const chosen = [...layer.subarray(t * 3, t * 3 + 3)];
              expect(new Set(chosen).size).toBe(3);
              for (const e of chosen) expect(e).toBeLessThan(8);
            }
        }
      expect(first.expertRoutes![0]!.layers[0]!.length).toBe(7 * 3);
      // The same tokens at the same positions choose the same experts, whatever else is in the batch.
      expect([...first.expertRoutes![1]!.layers[0]!]).toEqual([...first.expertRoutes![0]!.layers[0]!.subarray(0, 9)]);
      expect(step.logits[0]!.every(Number.isFinite)).toBe(true);
    } finally {
      await runner.shutdown();
    }
  });

  const refusals: [string, Record<string, number>, RegExp][] = [
    ["more experts used than there are", { "qwen3moe.expert_used_count": 9 }, /qwen3moe\.expert_used_count is above expert_count 8/],
    ["an expert size the tensors do not have", { "qwen3moe.expert_feed_forward_length": 48 }, /ffn_gate_exps\.weight has shape \[8, 32, 64\], expected \[8, 48, 64\]/],
    ["an expert count the tensors do not have", { "qwen3moe.expert_count": 16 }, /ffn_gate_inp\.weight has shape \[8, 64\], expected \[16, 64\]/],
  ];
  for (const [name, metadata, message] of refusals)
    test(`refused: ${name}`, async () => {
      const { gguf } = writeTinyQwen3Moe(`${scratch.path}/${name.replace(/\W+/g, "_")}`, { experts: 8, expertsUsed: 2, metadata });
      await expect(RunnerProcess.start({ executable, model: gguf, blocks: 8, blockSize: 16, threads: 1 })).rejects.toThrow(message);
    });
});
