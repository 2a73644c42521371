/**
 * `serve --model gpt-oss.gguf` end to end, attention layers: a random gpt-oss file from llama.cpp's
 * gguf-py (scripts/oracle/arch_gptoss.py: sinks, even layers sliding over 32 entries, YaRN, biases)
 * whose experts are zero, so its mixture-of-experts FFN adds exactly 0 and the first answer token
 * can be checked against llama.cpp's on the attention alone. A chat whose prompt runs
 * well past the window is answered through the real server (f16 KV cache, prefill in one chunk),
 * and the first answer token's log-probability is llama.cpp's best at the prompt's end. Over a
 * conversation the prefix cache (full-attention blocks plus window checkpoints of the sliding
 * layers) serves ≥ 95% of the earlier turns, and the answers are those of a server that keeps
 * every position's KV and caches nothing. Chunk reuse (`documents`): reused at the positions it was
 * computed at, and in another order with every reused token recomputed (prophet, cachecraft: their
 * attention statistics include the sinks), the answers are the keep-everything server's full
 * prefill's.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { llamaLogprobs, writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

describe("serve --model gpt-oss.gguf (attention layers)", () => {
  const scratch = tempFolder("ctxr-gptoss-serve-");
  const file = join(scratch.path, "gptoss.gguf");
  let api: EngineTestServer;
  let everything: EngineTestServer;
  let chunks: EngineTestServer;
  beforeAll(async () => {
    writeRandomGguf("gptoss", file, { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", "32", "--arch-option", "zero_experts=1"] });
    api = await startEngineServer(file, { kvBlocks: 256, blockSize: 16 });
    everything = await startEngineServer(file, { kvBlocks: 256, blockSize: 16, kvGroups: 1, prefixCache: false });
    // The automatic prefix cache off: a repeated prompt is served by the chunk cache's exact-prefix variants.
    chunks = await startEngineServer(file, { kvBlocks: 256, blockSize: 16, prefixCache: false, prefillChunk: 64 });
  }, 120_000);
  afterAll(async () => {
    await api?.close();
    await everything?.close();
    await chunks?.close();
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

  test("a conversation: turn n finds ≥ 95% of the earlier turns cached and answers as the keep-everything server does", async () => {
    expect(api.engine.runner.info.kv_groups?.[1]).toMatchObject({ kind: "sliding_window", sliding_window: 32, layers: [0, 2] });
    const chat = async (server: EngineTestServer, messages: { role: string; content: string }[]) => {
      const answer = await server.post("/v1/chat/completions", { model: "gptoss", messages, max_tokens: 4, temperature: 0, logprobs: true });
      expect(answer.status).toBe(200);
      const choice = answer.body.choices[0];
      return {
        content: choice.message.content as string,
        cached: (answer.body.usage.prompt_tokens_details?.cached_tokens ?? 0) as number,
        logprobs: (choice.logprobs.content as { token: string; logprob: number }[]).map((e) => [e.token, e.logprob] as const),
      };
    };
    const messages: { role: string; content: string }[] = [];
    for (let turn = 1; turn <= 3; turn++) {
      const earlier = messages.length === 0 ? 0 : (await api.engine.tokenizeChatPrompt(messages, { addGenerationPrompt: false })).length;
      messages.push({ role: "user", content: `turn ${turn}: ` + "a stone rests near the shore and hears the rain ".repeat(4 + turn) });
      const got = await chat(api, messages);
      const want = await chat(everything, messages);
      if (turn > 1) expect(got.cached).toBeGreaterThanOrEqual(0.95 * earlier);
      expect(got.content).toBe(want.content);
      expect(got.logprobs.map(([token]) => token)).toEqual(want.logprobs.map(([token]) => token));
      got.logprobs.forEach(([, logprob], i) => expect(Math.abs(logprob - want.logprobs[i]![1])).toBeLessThan(2e-3));
      messages.push({ role: "assistant", content: got.content });
    }
  }, 120_000);

  test("chunk reuse (documents): exact-prefix reuse and recomputed reordering answer as the full prefill does", async () => {
    const words = ["stone", "shore", "rain", "heart", "noon", "the", "near", "rests", "hears", "a", "of", "then"];
    const documents = [1, 2, 3].map((seed) => ({ id: `d${seed}`, text: Array.from({ length: 40 }, (_, i) => words[(i * (seed + 5) + seed) % words.length]).join(" ") }));
    const ask = async (server: EngineTestServer, order: number[], ctxr: Record<string, unknown> = {}) => {
      const answer = await server.post("/v1/chat/completions", {
        model: "gptoss", messages: [{ role: "user", content: "where does the stone rest" }], documents: order.map((i) => documents[i]!), max_tokens: 4, temperature: 0, logprobs: true, ctxr,
      });
      expect(answer.status).toBe(200);
      const choice = answer.body.choices[0];
      return {
        logprobs: (choice.logprobs.content as { token: string; logprob: number }[]).map((e) => [e.token, e.logprob] as const),
        usage: answer.body.usage.ctxr as { prompt_tokens_prefix_reused: number; prompt_tokens_chunk_reused: number; prompt_tokens_recomputed: number },
      };
    };
    const same = (got: Awaited<ReturnType<typeof ask>>, want: Awaited<ReturnType<typeof ask>>) => {
      expect(got.logprobs.map(([token]) => token)).toEqual(want.logprobs.map(([token]) => token));
      got.logprobs.forEach(([, logprob], i) => expect(Math.abs(logprob - want.logprobs[i]![1])).toBeLessThan(2e-3));
    };
    const first = await ask(chunks, [0, 1, 2]);
    expect(first.usage.prompt_tokens_prefix_reused + first.usage.prompt_tokens_chunk_reused).toBe(0);
    same(first, await ask(everything, [0, 1, 2], { policy: "full" }));
    const again = await ask(chunks, [0, 1, 2]);
    expect(again.usage.prompt_tokens_prefix_reused).toBeGreaterThan(3 * 32);
    same(again, first);
    for (const [order, policy] of [[[2, 0, 1], "prophet"], [[1, 2, 0], "cachecraft"]] as const) {
      const moved = await ask(chunks, [...order], { policy, recompute_ratio: 1 });
      expect(moved.usage.prompt_tokens_recomputed).toBeGreaterThan(3 * 32);
      same(moved, await ask(everything, [...order], { policy: "full" }));
    }
  }, 120_000);
});
