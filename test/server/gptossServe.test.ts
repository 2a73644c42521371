/**
 * `serve --model gpt-oss.gguf` end to end, attention layers: a random gpt-oss file from llama.cpp's
 * gguf-py (scripts/oracle/arch_gptoss.py: sinks, even layers sliding over 32 entries, YaRN, biases)
 * whose experts are zero, so its FFN adds exactly 0; the runner runs the layers without it
 * (CTXR_TEST_WITHOUT_MOE_FFN=1, until it has the mixture-of-experts FFN). A chat whose prompt runs
 * well past the window is answered through the real server (f16 KV cache, prefill in one chunk),
 * and the first answer token's log-probability is llama.cpp's best at the prompt's end.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { llamaLogprobs, writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

describe("serve --model gpt-oss.gguf (attention layers)", () => {
  const scratch = tempFolder("ctxr-gptoss-serve-");
  const file = join(scratch.path, "gptoss.gguf");
  const before = process.env.CTXR_TEST_WITHOUT_MOE_FFN;
  let api: EngineTestServer;
  beforeAll(async () => {
    writeRandomGguf("gptoss", file, { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", "32", "--arch-option", "zero_experts=1"] });
    process.env.CTXR_TEST_WITHOUT_MOE_FFN = "1";
    api = await startEngineServer(file, { kvBlocks: 64, blockSize: 16 });
  }, 120_000);
  afterAll(async () => {
    await api?.close();
    if (before === undefined) delete process.env.CTXR_TEST_WITHOUT_MOE_FFN;
    else process.env.CTXR_TEST_WITHOUT_MOE_FFN = before;
    scratch.cleanup();
  });

  test("answers a chat past the window; its first token's log-probability is llama.cpp's best there", async () => {
    const messages = [{ role: "user", content: "the heart of a stone rests near the shore at noon, then hears the rain. ".repeat(3) }];
    const answer = await api.post("/v1/chat/completions", { model: "gptoss", messages, max_tokens: 4, temperature: 0, logprobs: true });
    expect(answer.status).toBe(200);
    expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);
    const prompt = await api.engine.tokenizeChatPrompt(messages, { addGenerationPrompt: true });
    expect(answer.body.usage.prompt_tokens).toBe(prompt.length);
    expect(prompt.length).toBeGreaterThan(3 * 32);
    const llama = llamaLogprobs(file, prompt, scratch.path);
    const last = llama.rows.subarray((prompt.length - 1) * llama.vocab, prompt.length * llama.vocab);
    const best = Math.max(...last);
    const first = answer.body.choices[0].logprobs.content[0].logprob as number;
    if (process.env.CTXR_ORACLE_LOG) console.log(`gpt-oss served: first token logprob ${first}, llama.cpp's best ${best} (prompt ${prompt.length} tokens)`);
    // f16 KV cache here, f32 in llama.cpp's driver (measured 7e-5 apart).
    expect(Math.abs(first - best)).toBeLessThan(1e-2);
  }, 60_000);
});
