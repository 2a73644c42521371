/**
 * `serve --model gemma3.gguf` end to end: a tiny random Gemma 3 (test/helpers/gemma3TinyModel.ts:
 * SentencePiece vocabulary, Gemma's chat template, sliding-window and global layers) answers a
 * chat completion through the real server and CPU runner; the prompt is the template's
 * `<bos><start_of_turn>user …<end_of_turn>\n<start_of_turn>model\n`, BOS once.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyGemma3 } from "../helpers/gemma3TinyModel.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

describe("serve --model gemma3.gguf", () => {
  let dir = "";
  let api: EngineTestServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-serve-"));
    const model = writeTinyGemma3(dir);
    api = await startEngineServer(model.gguf);
  }, 120_000);
  afterAll(async () => {
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("answers a chat completion, its prompt rendered by Gemma's template", async () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "the hat" },
    ];
    const answer = await api.post("/v1/chat/completions", { model: "gemma3", messages, max_tokens: 5, temperature: 0 });
    expect(answer.status).toBe(200);
    expect(answer.body.choices[0].message.role).toBe("assistant");
    expect(typeof answer.body.choices[0].message.content).toBe("string");
    expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);
    expect(answer.body.usage.completion_tokens).toBeLessThanOrEqual(5);

    const prompt = await api.engine.tokenizeChatPrompt(messages, { addGenerationPrompt: true });
    expect(answer.body.usage.prompt_tokens).toBe(prompt.length);
    const text = api.engine.tokenizer.decode(prompt, { skipSpecialTokens: false });
    expect(text).toBe("<bos><start_of_turn>user\nBe brief.\n\nthe hat<end_of_turn>\n<start_of_turn>model\n");
    expect(prompt.filter((id) => id === 2)).toEqual([2]);
    expect(prompt[0]).toBe(2);
  }, 60_000);

  test("<end_of_turn> ends generation (llama.cpp's end of turn for Gemma)", () => {
    expect(api.engine.tokenizer.eosTokenIds).toContain(5);
  });
});
