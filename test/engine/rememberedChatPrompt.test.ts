import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { GeneratedTokenMemory } from "../../src/engine/generatedTokenMemory.ts";
import type { GenerationRequest } from "../../src/engine/generationTypes.ts";
import { RememberedChatTurns } from "../../src/engine/rememberedChatPrompt.ts";
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

/** The memory in a chat's path, decoding as the tokenizer thread would (asynchronously). */
function chatTurns(memory = new GeneratedTokenMemory()): RememberedChatTurns {
  return new RememberedChatTurns(memory, { tokenizer, encode: async (text) => tokenizer.encode(text), exactText: async (ids) => tokenizer.exactText(ids) });
}
const request = (promptIds: number[], remember = true): GenerationRequest => ({ promptIds, maxTokens: 8, sampling: { temperature: 0, topP: 1, topK: 0 }, stopTokenIds: [endOfTurn], rememberAnswer: remember });
/** A text as a model may sample it: one byte token a byte (SentencePiece's byte fallback), not the tokenizer's own pieces. */
const byteIds = (text: string) => [...new TextEncoder().encode(text)].map((byte) => tokenizer.encodedVocab().indexOf(`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`));

describe("a chat's next turn is prompted with the ids of the turn before", () => {
  test("the answer's own ids, not its text's tokenization, then the rest tokenized", async () => {
    const memory = new GeneratedTokenMemory();
    const turns = chatTurns(memory);
    expect(turns.empty).toBe(true);
    const turn1: ChatTemplateMessage[] = [{ role: "user", content: "hello there" }];
    const prompt1 = await turns.promptIds(tokenizer.applyChatTemplate(turn1));
    expect(prompt1).toEqual(tokenizer.encode(tokenizer.applyChatTemplate(turn1)));
    const answer = byteIds("the sea");
    expect(tokenizer.encode("the sea")).not.toEqual(answer); // the sampled ids are not the canonical ones
    turns.remember(request(prompt1), [...prompt1, ...answer, endOfTurn]);
    // Being remembered (the decode is asynchronous): the next prompt waits for it.
    expect(turns.empty).toBe(false);

    const turn2 = [...turn1, { role: "assistant", content: "the sea" }, { role: "user", content: "and then" }];
    const text2 = tokenizer.applyChatTemplate(turn2);
    const prompt2 = await turns.promptIds(text2);
    expect(memory.size).toBe(1);
    const restStart = text2.indexOf("<end_of_turn>", text2.indexOf("the sea"));
    expect(prompt2).toEqual([...prompt1, ...answer, ...tokenizer.encode(text2.slice(restStart))]);
    expect(tokenizer.exactText(prompt2)).toBe(text2);
    expect(prompt2).not.toEqual(tokenizer.encode(text2));
  });

  test("a resent answer that differs, or a client that edits it, is tokenized as before", async () => {
    const turns = chatTurns();
    const turn1: ChatTemplateMessage[] = [{ role: "user", content: "hi" }];
    const prompt1 = tokenizer.encode(tokenizer.applyChatTemplate(turn1));
    turns.remember(request(prompt1), [...prompt1, ...byteIds("the sea"), endOfTurn]);
    for (const content of ["the se", "the sea!", "The sea"]) {
      const text = tokenizer.applyChatTemplate([...turn1, { role: "assistant", content }, { role: "user", content: "ok" }]);
      expect(await turns.promptIds(text)).toEqual(tokenizer.encode(text));
    }
    // Under another cache salt the same chat is tokenized as before too.
    const resent = tokenizer.applyChatTemplate([...turn1, { role: "assistant", content: "the sea" }, { role: "user", content: "ok" }]);
    expect(await turns.promptIds(resent, "another tenant")).toEqual(tokenizer.encode(resent));
    expect(await turns.promptIds(resent)).not.toEqual(tokenizer.encode(resent));
  });

  test("only requests that ask are remembered, and only ids with an exact text", async () => {
    const memory = new GeneratedTokenMemory();
    const turns = chatTurns(memory);
    const text = tokenizer.applyChatTemplate([{ role: "user", content: "hi" }]);
    const prompt = tokenizer.encode(text);
    turns.remember(request(prompt, false), [...prompt, ...byteIds("the")]);
    await turns.promptIds(text);
    expect(memory.size).toBe(0);
    // Half of "é": no exact text.
    turns.remember(request(prompt), [...prompt, byteIds("é")[0]!]);
    await turns.promptIds(text);
    expect(memory.size).toBe(0);
    turns.remember(request(prompt), [...prompt, ...byteIds("é")]);
    await turns.promptIds(text);
    expect(memory.size).toBe(1);
    expect(turns.empty).toBe(false);
  });
});
