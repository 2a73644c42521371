/**
 * engine.prepare: a request's prompt ids (and segments) in one trip, against the tiny model's
 * tokenizer and template, each kind compared with the prompt built piece by piece.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { PromptError } from "../../src/engine/promptPreparation.ts";
import { promptTokens, segmentChat, segmentTexts } from "../../src/kv/segmentedPrompt.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

let folder: { path: string; cleanup(): void };
let engine: GenerationEngine;

beforeAll(async () => {
  folder = tinyModelFolder();
  engine = await GenerationEngine.open({ model: folder.path, runner: buildRunner(), kvBlocks: 64, threads: 1 });
}, 60_000);

afterAll(async () => {
  await engine?.close();
  folder?.cleanup();
});

const MESSAGES = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "What do the documents say?" },
];
const DOCUMENTS = [
  { id: "a", text: "The first document." },
  { id: "b", title: "Second", text: "The second document, a little longer." },
];

/** A text longer than the tokenizer thread's inline limit, so that it is tokenized off the request thread. */
const LONG_TEXT = "word ".repeat(2000);

async function promptError(request: Parameters<GenerationEngine["prepare"]>[0]): Promise<PromptError> {
  const error = await engine.prepare(request).then(
    () => null,
    (failure: unknown) => failure,
  );
  expect(error).toBeInstanceOf(PromptError);
  return error as PromptError;
}

describe("engine.prepare", () => {
  test("a chat: the template's prompt ids, no segments", async () => {
    const template = { addGenerationPrompt: true };
    const prepared = await engine.prepare({ kind: "chat", messages: MESSAGES, template });
    expect(prepared.segments).toBeUndefined();
    expect(prepared.promptIds).toEqual([engine.chatPromptIds(MESSAGES, template)]);
  });

  test("a long chat is tokenized off the request thread to the same ids", async () => {
    const messages = [{ role: "user", content: LONG_TEXT }];
    expect((await engine.prepare({ kind: "chat", messages })).promptIds).toEqual([engine.chatPromptIds(messages)]);
  });

  test("a chat with documents: the segments of segmentChat, and their ids as the prompt", async () => {
    const prepared = await engine.prepare({ kind: "chat", messages: MESSAGES, documents: DOCUMENTS });
    const expected = segmentChat(engine.tokenizer, MESSAGES, DOCUMENTS);
    expect(prepared.segments).toEqual(expected);
    expect(prepared.promptIds).toEqual([promptTokens(expected)]);
    expect(prepared.segments!.segments.filter((segment) => segment.kind === "chunk")).toHaveLength(DOCUMENTS.length);
  });

  test("completion prompts: texts with the model's BOS, token ids as given, one list per prompt", async () => {
    const prepared = await engine.prepare({ kind: "completion", prompts: ["Once upon", [5, 6, 7], LONG_TEXT] });
    expect(prepared.segments).toBeUndefined();
    expect(prepared.promptIds).toEqual([engine.completionPromptIds("Once upon"), [5, 6, 7], engine.completionPromptIds(LONG_TEXT)]);
  });

  test("completion segments: chunks then the question, BOS as the head when the model adds one", async () => {
    const texts = ["First chunk.", "Second chunk.", "The question?"];
    const prepared = await engine.prepare({ kind: "segments", texts });
    const bos = engine.completionPromptIds("x")[0] === engine.tokenizer.bosTokenId ? engine.tokenizer.bosTokenId : null;
    const expected = segmentTexts(engine.tokenizer, texts, bos);
    expect(prepared.segments).toEqual(expected);
    expect(prepared.promptIds).toEqual([promptTokens(expected)]);
  });

  test("a prompt that cannot be built is a PromptError naming the request field", async () => {
    expect((await promptError({ kind: "segments", texts: [] })).field).toBe("segments");
    expect((await promptError({ kind: "segments", texts: ["chunk", ""] })).field).toBe("segments[1]");
    expect((await promptError({ kind: "chat", messages: [{ role: "system", content: "no user" }], documents: DOCUMENTS })).field).toBe("messages");
    expect((await promptError({ kind: "chat", messages: MESSAGES, documents: [{ id: "a", text: "" }] })).field).toBe("documents[0].text");
    const template = await promptError({ kind: "chat", messages: [{ role: "narrator", content: "Once." }] });
    expect(template.field).toBe("messages");
    expect(template.message).toMatch(/roles/);
  });
});
