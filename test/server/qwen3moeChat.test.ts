/**
 * `serve --model` on a mixture-of-experts file (qwen3moe, issue 32 item 1): it loads (it used to be
 * refused), renders the file's own Qwen3 chat template, and answers; chunk reuse (`documents`)
 * works unchanged, since the attention is Qwen3's: the second request reuses the documents' KV,
 * and a reordered request with every reused token recomputed answers as the full prefill of that
 * order does. A server test over HTTP on an ephemeral port.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyQwen3Moe } from "../helpers/qwen3moeTinyModel.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

const DOCUMENTS = [
  { id: "a", text: "the stone rests near the shore of the lake, then the rain hears the noon" },
  { id: "b", text: "a heart of stone at noon rests in the rain near the shore then" },
  { id: "c", text: "then the shore hears a stone of the heart, rain at noon near the lake" },
];
const MESSAGES = [{ role: "user", content: "where does the stone rest" }];

interface Answer {
  content: string;
  tokens: string[];
  logprobs: number[];
  ctxr: { prompt_tokens_prefix_reused: number; prompt_tokens_chunk_reused: number; prompt_tokens_recomputed: number };
}

async function ask(api: EngineTestServer, order: number[], ctxr: Record<string, unknown> = {}): Promise<Answer> {
  const answer = await api.post("/v1/chat/completions", {
    model: "qwen3moe",
    messages: MESSAGES,
    documents: order.map((i) => DOCUMENTS[i]!),
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    chat_template_kwargs: { enable_thinking: false },
    ctxr,
  });
  expect(answer.status, answer.text).toBe(200);
  const choice = answer.body.choices[0];
  const entries = choice.logprobs.content as { token: string; logprob: number }[];
  return { content: choice.message.content ?? "", tokens: entries.map((e) => e.token), logprobs: entries.map((e) => e.logprob), ctxr: answer.body.usage.ctxr };
}

describe("serve --model qwen3moe", () => {
  let dir = "";
  let api: EngineTestServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-qwen3moe-"));
    const model = writeTinyQwen3Moe(dir, { experts: 8, expertsUsed: 2 });
    api = await startEngineServer(model.gguf, { kvBlocks: 256, blockSize: 16, prefixCache: false });
  }, 120_000);
  afterAll(async () => {
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("the runner loads the experts and the chat template is the file's Qwen3 one", async () => {
    expect(api.engine.runner.info.architecture).toBe("Qwen3MoeForCausalLM");
    const answer = await api.post("/v1/chat/completions", { model: "qwen3moe", messages: MESSAGES, max_tokens: 4, temperature: 0 });
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);
    // Qwen3's template: <|im_start|>user ... <|im_end|>\n<|im_start|>assistant\n (5 words of text, ~20 tokens).
    expect(answer.body.usage.prompt_tokens).toBeGreaterThan(10);
  }, 60_000);

  test("documents: cached, reused, and recomputed in another order as its full prefill answers", async () => {
    const first = await ask(api, [0, 1, 2]);
    expect(first.ctxr.prompt_tokens_prefix_reused + first.ctxr.prompt_tokens_chunk_reused).toBe(0);
    const again = await ask(api, [0, 1, 2]);
    expect(again.ctxr.prompt_tokens_prefix_reused + again.ctxr.prompt_tokens_chunk_reused).toBeGreaterThan(30);
    expect(again.tokens).toEqual(first.tokens);
    again.logprobs.forEach((l, i) => expect(Math.abs(l - first.logprobs[i]!)).toBeLessThan(2e-3));
    const moved = await ask(api, [2, 0, 1], { policy: "prophet", recompute_ratio: 1 });
    expect(moved.ctxr.prompt_tokens_recomputed).toBeGreaterThan(30);
    const full = await ask(api, [2, 0, 1], { policy: "full" });
    expect(moved.tokens).toEqual(full.tokens);
    moved.logprobs.forEach((l, i) => expect(Math.abs(l - full.logprobs[i]!)).toBeLessThan(2e-3));
  }, 120_000);
});
