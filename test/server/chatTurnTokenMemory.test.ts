/**
 * The generated-token memory through `serve --model`: on a random Gemma 3 file written by
 * llama.cpp's gguf-py (its turn markers control tokens, as in a real Gemma 3 file), a chat's answer
 * whose text re-tokenizes to other ids than the ones generated is resent by the client as text, and
 * the next turn still finds turn 1's prompt and answer in the prefix cache, because it is prompted
 * with the very ids generated. A server without the memory's splice (the canonical tokenization)
 * would find only the prompt.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INLINE_DECODE_IDS } from "../../src/model/tokenizerThread/offThreadTokenizer.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

const BLOCK = 16;
const ANSWER_TOKENS = 24;

/** Turn 3's is long: its chat is rendered and tokenized on the tokenizer thread, its ids decoded there. */
function userMessage(turn: number): string {
  const words = ["the", "window", "keeps", "recent", "entries", "while", "global", "layers", "see", "every", "token"];
  return Array.from({ length: turn === 3 ? 700 : 40 }, (_, i) => words[(i * (turn + 2)) % words.length]).join(" ");
}

describe("serve --model: a chat's next turn is prompted with the ids generated for the turn before", () => {
  let dir = "";
  let server: EngineTestServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-chat-token-memory-"));
    const model = writeRandomGguf("gemma3", join(dir, "gemma3.gguf"), {
      layers: 2, hidden: 64, heads: 2, kvHeads: 1, headDim: 32, ffn: 128, seed: 3, context: 8192,
      extraArgs: ["--sliding-window", "32", "--special", "<start_of_turn>", "--special", "<end_of_turn>"],
    });
    server = await startEngineServer(model, { kvBlocks: 1024, blockSize: BLOCK });
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("turn 2 and 3 find the turns before, answers included, in the prefix cache", async () => {
    const engine = server.engine;
    const tokenizer = engine.tokenizer;
    // Answers of the letters h, e and t, sampled: a sampled "h", "e" is not the canonical
    // tokenization of "he" (a merge of the vocabulary). No whitespace (the template trims answers),
    // no special tokens.
    const allowed = new Map<string, number>();
    for (const text of ["h", "e", "t"]) {
      const ids = tokenizer.encode(text);
      expect(ids).toHaveLength(1);
      allowed.set(tokenizer.tokenText(ids[0]!), ids[0]!);
    }
    const messages: { role: string; content: string }[] = [];
    let previousIds: number[] = [];
    let firstPromptTokens = 0;
    for (let turn = 1; turn <= 3; turn++) {
      messages.push({ role: "user", content: userMessage(turn) });
      const answer = await server.post("/v1/chat/completions", {
        model: "gemma3", messages, max_tokens: ANSWER_TOKENS, temperature: 2, seed: turn, ignore_eos: true, allowed_token_ids: [...allowed.values()], logprobs: true,
      });
      expect(answer.status).toBe(200);
      const usage = answer.body.usage;
      const choice = answer.body.choices[0];
      const content: string = choice.message.content;
      const generated: number[] = choice.logprobs.content.map((entry: { token: string }) => allowed.get(entry.token)!);
      expect(generated).toHaveLength(ANSWER_TOKENS);
      expect(tokenizer.decode(generated)).toBe(content);
      const prompt = turn === 1 ? await engine.tokenizeChatPrompt(messages) : promptIdsOf(server, messages, previousIds);
      expect(usage.prompt_tokens).toBe(prompt.length);
      if (turn === 3) expect(prompt.length).toBeGreaterThan(INLINE_DECODE_IDS);
      if (turn === 1) {
        expect(usage.prompt_tokens_details.cached_tokens).toBe(0);
        expect(tokenizer.encode(content)).not.toEqual(generated); // the answer re-tokenizes otherwise
        firstPromptTokens = prompt.length;
      } else {
        // The prompt starts with the ids of the turn before: its prompt and its answer (the last of whose KV is not computed).
        expect(usage.prompt_tokens_details.cached_tokens).toBe(Math.floor((previousIds.length - 1) / BLOCK) * BLOCK);
        // The canonical tokenization departs from those ids inside turn 1's answer: with it the cache would not have matched the answer.
        const canonical = await engine.tokenizeChatPrompt(messages);
        const departs = canonical.findIndex((id, i) => id !== previousIds[i]);
        expect(departs).toBeGreaterThanOrEqual(firstPromptTokens);
        expect(departs).toBeLessThan(firstPromptTokens + ANSWER_TOKENS);
      }
      previousIds = [...prompt, ...generated];
      messages.push({ role: "assistant", content });
    }
    // Turn 4 finds turn 3 (its ids decoded on the tokenizer thread); another tenant (another
    // cache_salt) resending the same chat gets the canonical tokenization: the ids never tell it what was generated.
    messages.push({ role: "user", content: userMessage(4) });
    const fourth = await server.post("/v1/chat/completions", { model: "gemma3", messages, max_tokens: 1 });
    expect(fourth.body.usage.prompt_tokens).toBe(promptIdsOf(server, messages, previousIds).length);
    expect(fourth.body.usage.prompt_tokens_details.cached_tokens).toBe(Math.floor((previousIds.length - 1) / BLOCK) * BLOCK);
    const other = await server.post("/v1/chat/completions", { model: "gemma3", messages, max_tokens: 1, cache_salt: "another tenant" });
    expect(other.status).toBe(200);
    expect(other.body.usage.prompt_tokens).toBe((await engine.tokenizeChatPrompt(messages)).length);
    expect(other.body.usage.prompt_tokens).not.toBe(promptIdsOf(server, messages, previousIds).length);
  }, 300_000);
});

/** A turn's prompt as the memory builds it: the ids of the turn before, then the rest of the rendered text tokenized. */
function promptIdsOf(server: EngineTestServer, messages: { role: string; content: string }[], previousIds: number[]): number[] {
  const tokenizer = server.engine.tokenizer;
  const text = tokenizer.applyChatTemplate(messages);
  const previousText = tokenizer.exactText(previousIds)!;
  expect(text.startsWith(previousText)).toBe(true);
  expect(tokenizer.splitsAt(text, previousText.length)).toBe(true);
  return [...previousIds, ...tokenizer.encode(text.slice(previousText.length))];
}
