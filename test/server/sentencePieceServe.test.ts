/**
 * `serve --model` on the random Gemma 3 and Phi-3 files llama.cpp's gguf-py writes with a
 * SentencePiece vocabulary (scripts/oracle/random_gguf.py --vocab-type spm: Gemma 3's layout, and
 * Phi-3's named "Phi3" as Microsoft's files are, so that its special tokens right-strip): a chat
 * completion is answered through the HTTP API on the real CPU runner, and the prompt it ran is
 * llama.cpp's tokenization of the file's own chat template's rendering, id for id.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { llamaOracle, llamaTokenize, writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const MESSAGES = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "  Name a colour — and 東京?\n" },
];

const scratch = tempFolder("ctxr-spm-serve-");
beforeAll(() => llamaOracle(), 300_000);
afterAll(() => scratch.cleanup());

const FILES: { arch: string; extraArgs: string[]; endOfTurn: string }[] = [
  { arch: "gemma3", extraArgs: ["--vocab-type", "spm"], endOfTurn: "<end_of_turn>" },
  { arch: "phi3", extraArgs: ["--vocab-type", "spm", "--name", "Phi3"], endOfTurn: "<|end|>" },
];

for (const { arch, extraArgs, endOfTurn } of FILES) {
  describe(`serve --model on a random ${arch} file with a SentencePiece vocabulary`, () => {
    let api: EngineTestServer;
    let file = "";
    beforeAll(async () => {
      file = writeRandomGguf(arch, join(scratch.path, `${arch}-spm.gguf`), { extraArgs });
      api = await startEngineServer(file);
    }, 300_000);
    afterAll(async () => api?.close());

    test("a chat completion is answered; its prompt is llama.cpp's ids of the template's rendering", async () => {
      const answer = await api.post("/v1/chat/completions", { messages: MESSAGES, max_tokens: 8, temperature: 0 });
      expect(answer.status).toBe(200);
      expect(answer.body.choices[0].message.role).toBe("assistant");
      expect(typeof answer.body.choices[0].message.content).toBe("string");
      expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);

      const tokenized = await api.post("/tokenize", { messages: MESSAGES });
      expect(tokenized.status).toBe(200);
      expect(answer.body.usage.prompt_tokens).toBe(tokenized.body.count);
      const rendered = api.engine.tokenizer.applyChatTemplate(MESSAGES, { addGenerationPrompt: true });
      expect(rendered).toContain(endOfTurn);
      expect(tokenized.body.tokens).toEqual(llamaTokenize(file, rendered, scratch.path).special);
    });

    test(`${endOfTurn} ends generation`, () => {
      expect(api.engine.tokenizer.eosTokenIds).toContain(api.engine.tokenizer.encode(endOfTurn)[0]!);
    });
  });
}
