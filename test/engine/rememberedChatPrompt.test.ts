import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { GeneratedTokenMemory } from "../../src/engine/generatedTokenMemory.ts";
import type { GenerationRequest } from "../../src/engine/generationTypes.ts";
import { rememberAnswer, rememberedChatIds } from "../../src/engine/rememberedChatPrompt.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { ggufModelTokenizer } from "../../src/model/gguf/ggufTokenizer.ts";
import type { ChatTemplateMessage, ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { tempFolder } from "../helpers/cli.ts";
import { writeTinyGemma3 } from "../helpers/gemma3TinyModel.ts";

let folder: { path: string; cleanup(): void };
let tokenizer: ModelTokenizer;
let endOfTurn: number;

beforeAll(() => {
  folder = tempFolder("ctxr-remembered-chat-");
  const model = writeTinyGemma3(join(folder.path, "gemma3"), { layers: 1, hidden: 16, heads: 2, kvHeads: 1, headDim: 8, ffn: 16 });
  tokenizer = ggufModelTokenizer(readGgufFile(model.gguf).metadata, model.gguf).tokenizer;
  endOfTurn = tokenizer.encode("<end_of_turn>")[0]!;
});
afterAll(() => folder.cleanup());

const encode = async (text: string) => tokenizer.encode(text);
const request = (promptIds: number[], remember = true): GenerationRequest => ({ promptIds, maxTokens: 8, sampling: { temperature: 0, topP: 1, topK: 0 }, stopTokenIds: [endOfTurn], rememberAnswer: remember });
/** A text as a model may sample it: one byte token a byte (SentencePiece's byte fallback), not the tokenizer's own pieces. */
const byteIds = (text: string) => [...new TextEncoder().encode(text)].map((byte) => tokenizer.encodedVocab().indexOf(`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`));

describe("a chat's next turn is prompted with the ids of the turn before", () => {
  test("the answer's own ids, not its text's tokenization, then the rest tokenized", async () => {
    const memory = new GeneratedTokenMemory();
    const turn1: ChatTemplateMessage[] = [{ role: "user", content: "hello there" }];
    const prompt1 = await rememberedChatIds(memory, tokenizer, tokenizer.applyChatTemplate(turn1), encode);
    expect(prompt1).toEqual(tokenizer.encode(tokenizer.applyChatTemplate(turn1)));
    const answer = byteIds("the sea");
    expect(tokenizer.encode("the sea")).not.toEqual(answer); // the sampled ids are not the canonical ones
    rememberAnswer(memory, tokenizer, request(prompt1), [...prompt1, ...answer, endOfTurn]);
    expect(memory.size).toBe(1);

    const turn2 = [...turn1, { role: "assistant", content: "the sea" }, { role: "user", content: "and then" }];
    const text2 = tokenizer.applyChatTemplate(turn2);
    const prompt2 = await rememberedChatIds(memory, tokenizer, text2, encode);
    const restStart = text2.indexOf("<end_of_turn>", text2.indexOf("the sea"));
    expect(prompt2).toEqual([...prompt1, ...answer, ...tokenizer.encode(text2.slice(restStart))]);
    expect(tokenizer.exactText(prompt2)).toBe(text2);
    expect(prompt2).not.toEqual(tokenizer.encode(text2));
  });

  test("a resent answer that differs, or a client that edits it, is tokenized as before", async () => {
    const memory = new GeneratedTokenMemory();
    const turn1: ChatTemplateMessage[] = [{ role: "user", content: "hi" }];
    const prompt1 = tokenizer.encode(tokenizer.applyChatTemplate(turn1));
    rememberAnswer(memory, tokenizer, request(prompt1), [...prompt1, ...byteIds("the sea"), endOfTurn]);
    for (const content of ["the se", "the sea!", "The sea"]) {
      const text = tokenizer.applyChatTemplate([...turn1, { role: "assistant", content }, { role: "user", content: "ok" }]);
      expect(await rememberedChatIds(memory, tokenizer, text, encode)).toEqual(tokenizer.encode(text));
    }
  });

  test("only requests that ask are remembered, and only ids with an exact text", () => {
    const memory = new GeneratedTokenMemory();
    const prompt = tokenizer.encode(tokenizer.applyChatTemplate([{ role: "user", content: "hi" }]));
    rememberAnswer(memory, tokenizer, request(prompt, false), [...prompt, ...byteIds("the")]);
    expect(memory.size).toBe(0);
    // Half of "é": no exact text.
    rememberAnswer(memory, tokenizer, request(prompt), [...prompt, byteIds("é")[0]!]);
    expect(memory.size).toBe(0);
    rememberAnswer(memory, tokenizer, request(prompt), [...prompt, ...byteIds("é")]);
    expect(memory.size).toBe(1);
  });
});
