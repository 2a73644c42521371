/**
 * Sparse decode (`ctxr.kv_budget`) through `serve --model` on models with sliding-window layers
 * (two KV cache groups): a random gpt-oss file from llama.cpp's gguf-py (even layers slide over 32
 * entries) and a tiny Gemma 3 (layers 0, 1 and 3 slide). On a prompt of about 300 tokens a small
 * budget is answered and every decode step after the first reads a page subset of the
 * full-attention layers (usage's sparse_decode_steps), with other logits than dense decode; a
 * budget of 1 is dense decode exactly; a sparse and a dense request decoded in one batch leave the
 * dense one's answer as it is alone. The runner side (selected pages for the full layers, the true
 * window for the sliding ones) is checked against a direct computation in
 * test/runner/twoGroupSparseDecode.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { writeTinyGemma3 } from "../helpers/gemma3TinyModel.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

const WINDOW = 32;
const BLOCK = 16;
const MAX_TOKENS = 8;

/** A user message of about 300 tokens. */
function longMessage(seed: number): string {
  const words = ["the", "heart", "of", "a", "stone", "rests", "near", "the", "shore", "at", "noon", "then", "hears", "rain"];
  return Array.from({ length: 100 }, (_, i) => words[(i * (seed + 3) + seed) % words.length]!).join(" ");
}

interface Answer {
  tokens: string[];
  logprobs: number[];
  completion: number;
  sparseSteps: number | undefined;
  promptTokens: number;
}

const MODELS: { name: string; write(dir: string): string }[] = [
  {
    name: "gptoss",
    write: (dir) => writeRandomGguf("gptoss", join(dir, "gptoss.gguf"), { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", String(WINDOW)] }),
  },
  { name: "gemma3", write: (dir) => writeTinyGemma3(dir, { window: WINDOW, layers: 4, pattern: [true, true, false, true], seed: 5 }).gguf },
];

for (const model of MODELS) {
  describe(`serve --model ${model.name}: sparse decode with two KV groups`, () => {
    const scratch = tempFolder(`ctxr-${model.name}-sparse-`);
    let api: EngineTestServer;
    beforeAll(async () => {
      api = await startEngineServer(model.write(scratch.path), { kvBlocks: 256, blockSize: BLOCK, prefixCache: false });
    }, 120_000);
    afterAll(async () => {
      await api?.close();
      scratch.cleanup();
    });

    async function ask(seed: number, ctxr?: Record<string, unknown>): Promise<Answer> {
      const body = { model: model.name, messages: [{ role: "user", content: longMessage(seed) }], max_tokens: MAX_TOKENS, ignore_eos: true, temperature: 0, logprobs: true, ...(ctxr ? { ctxr } : {}) };
      const answer = await api.post("/v1/chat/completions", body);
      expect(answer.body.error?.message).toBeUndefined();
      expect(answer.status).toBe(200);
      const content = answer.body.choices[0].logprobs.content as { token: string; logprob: number }[];
      return {
        tokens: content.map((e) => e.token),
        logprobs: content.map((e) => e.logprob),
        completion: answer.body.usage.completion_tokens,
        sparseSteps: answer.body.usage.ctxr?.sparse_decode_steps,
        promptTokens: answer.body.usage.prompt_tokens,
      };
    }

    test("the model keeps two KV groups", () => {
      expect(api.engine.runner.info.kv_groups?.[1]).toMatchObject({ kind: "sliding_window", sliding_window: WINDOW });
    });

    test("a small KV budget is answered; every step after the first reads a page subset, with other logits than dense decode", async () => {
      const sparse = await ask(1, { kv_budget: 0.1 });
      const dense = await ask(1);
      // About 20 pages: 1 sink + 2 window + 2 selected ones leave most out.
      expect(sparse.promptTokens).toBeGreaterThan(250);
      expect(sparse.completion).toBe(MAX_TOKENS);
      expect(sparse.sparseSteps).toBe(MAX_TOKENS - 1);
      expect(dense.sparseSteps).toBeUndefined();
      // The first token comes from the (dense) prefill: the same as dense decode's.
      expect(sparse.tokens[0]).toBe(dense.tokens[0]!);
      expect(Math.abs(sparse.logprobs[0]! - dense.logprobs[0]!)).toBeLessThan(1e-5);
      const firstSparse = sparse.tokens[1] === dense.tokens[1] ? Math.abs(sparse.logprobs[1]! - dense.logprobs[1]!) : Infinity;
      expect(firstSparse).toBeGreaterThan(1e-4);
    }, 120_000);

    test("kv_budget 1 is dense decode", async () => {
      const one = await ask(2, { kv_budget: 1 });
      const dense = await ask(2);
      expect(one.sparseSteps).toBeUndefined();
      expect(one.tokens).toEqual(dense.tokens);
      one.logprobs.forEach((logprob, i) => expect(logprob).toBe(dense.logprobs[i]!));
    }, 120_000);

    test("a sparse and a dense request decoded in one batch: the dense one answers as it does alone", async () => {
      const alone = await ask(3);
      const sparseAlone = await ask(4, { kv_budget: 0.1 });
      const batchedBefore = api.engine.scheduler.stats.batchedDecodeSteps;
      const [dense, sparse] = await Promise.all([ask(3), ask(4, { kv_budget: 0.1 })]);
      expect(api.engine.scheduler.stats.batchedDecodeSteps).toBeGreaterThan(batchedBefore);
      expect(dense.tokens).toEqual(alone.tokens);
      dense.logprobs.forEach((logprob, i) => expect(Math.abs(logprob - alone.logprobs[i]!)).toBeLessThan(1e-4));
      expect(sparse.sparseSteps).toBe(MAX_TOKENS - 1);
      expect(sparse.tokens).toEqual(sparseAlone.tokens);
    }, 120_000);
  });
}
