import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { EnginePromptTokenizer } from "../../src/proxy/enginePromptTokens.ts";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

let model: { path: string; cleanup(): void };
let engine: GenerationEngine;
let tokens: EnginePromptTokenizer;

beforeAll(async () => {
  model = tinyModelFolder({ layers: 1 }, "tiny-proxy-tokens");
  engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 16, threads: 1 });
  tokens = await EnginePromptTokenizer.load(model.path);
}, 300_000);

afterAll(async () => {
  await engine?.close();
  model?.cleanup();
});

describe("EnginePromptTokenizer", () => {
  test("the ids the built-in engine computes for the same chat and completion requests", () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Hello" }] },
    ];
    expect(tokens.promptIds("chat", { messages })).toEqual(engine.chatPromptIds([{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }]));
    expect(tokens.promptIds("completions", { prompt: "Once upon" })).toEqual(engine.completionPromptIds("Once upon"));
    expect(tokens.promptIds("completions", { prompt: ["first", "second"] })).toEqual(engine.completionPromptIds("first"));
    expect(tokens.promptIds("completions", { prompt: [5, 6, 7] })).toEqual([5, 6, 7]);
    expect(tokens.promptIds("completions", { prompt: [[1, 2], [3]] })).toEqual([1, 2]);
  });

  test("bodies the engine would refuse give null, not an error", () => {
    expect(tokens.promptIds("chat", { messages: "hi" })).toBeNull();
    expect(tokens.promptIds("chat", null)).toBeNull();
    expect(tokens.promptIds("completions", { prompt: [] })).toBeNull();
    expect(tokens.promptIds("completions", {})).toBeNull();
  });
});
