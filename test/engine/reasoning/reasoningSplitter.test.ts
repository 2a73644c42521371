import { describe, expect, test } from "bun:test";
import type { ThinkStart as ReasoningStart } from "../../../src/engine/reasoning/reasoningParser.ts";
import { answerOf, ReasoningSplitter, splitReasoning } from "../../../src/engine/reasoning/reasoningSplitter.ts";
import { seededRandom } from "../../../src/index/seededRandom.ts";
import { referenceSplit } from "./referenceSplit.ts";

const STARTS: ReasoningStart[] = ["opening", "reasoning", "content"];
const PIECES = ["<think>", "</think>", "<", "/", "think", ">", "</thi", "nk>", "a", "b", " ", "\n", "é", "{\"x\": 1}"];

/** The text pushed in the given chunks, the pieces joined as a client assembles deltas. */
function streamed(start: ReasoningStart, chunks: readonly string[]) {
  const splitter = new ReasoningSplitter(start);
  let reasoning = "";
  let content = "";
  for (const chunk of [...chunks.map((text) => splitter.push(text)), splitter.end()]) {
    reasoning += chunk.reasoning;
    content += chunk.content;
  }
  return answerOf(splitter.reasoned, reasoning, content);
}

function randomChunks(text: string, random: () => number): string[] {
  const chunks: string[] = [];
  let at = 0;
  while (at < text.length) {
    const length = 1 + Math.floor(random() * 4);
    chunks.push(text.slice(at, at + length));
    at += length;
  }
  return chunks;
}

describe("splitReasoning", () => {
  test("a think block, then the answer", () => {
    expect(splitReasoning("opening", "<think>\nI should say hi.\n</think>\n\nHi!")).toEqual({ reasoning: "\nI should say hi.\n", content: "\n\nHi!" });
    expect(splitReasoning("reasoning", "I should say hi.</think>Hi!")).toEqual({ reasoning: "I should say hi.", content: "Hi!" });
    expect(splitReasoning("reasoning", "  <think>x</think>y")).toEqual({ reasoning: "x", content: "y" });
  });

  test("qwen3 without <think> at the start: all content, a later </think> included", () => {
    expect(splitReasoning("opening", "Hi </think> there")).toEqual({ reasoning: null, content: "Hi </think> there" });
    expect(splitReasoning("opening", "")).toEqual({ reasoning: null, content: "" });
    expect(splitReasoning("opening", "  <thin")).toEqual({ reasoning: null, content: "  <thin" });
  });

  test("reasoning never closed (max_tokens cut it): all reasoning, no content", () => {
    expect(splitReasoning("opening", "<think>still thinking</th")).toEqual({ reasoning: "still thinking</th", content: null });
    expect(splitReasoning("reasoning", "still")).toEqual({ reasoning: "still", content: null });
  });

  test("empty reasoning is none; only the first </think> closes it", () => {
    expect(splitReasoning("opening", "<think></think>A</think>B")).toEqual({ reasoning: null, content: "A</think>B" });
  });

  test("the prompt closed the reasoning: the text as it is", () => {
    expect(splitReasoning("content", "<think>a</think>b")).toEqual({ reasoning: null, content: "<think>a</think>b" });
  });
});

describe("ReasoningSplitter", () => {
  test("a </think> split across every possible pair of chunks", () => {
    const text = "<think>ab</think>cd";
    for (let cut = 0; cut <= text.length; cut++) {
      expect(streamed("opening", [text.slice(0, cut), text.slice(cut)])).toEqual({ reasoning: "ab", content: "cd" });
    }
  });

  test("held back only while a marker may be arriving", () => {
    const splitter = new ReasoningSplitter("reasoning");
    expect(splitter.push("abc</")).toEqual({ reasoning: "abc", content: "" });
    expect(splitter.push("x")).toEqual({ reasoning: "</x", content: "" });
    expect(splitter.push("</think>y")).toEqual({ reasoning: "", content: "y" });
    expect(splitter.push("z")).toEqual({ reasoning: "", content: "z" });
  });

  test("random texts in random chunks: the streamed split, the whole split and the reference agree (5,000 cases)", () => {
    const random = seededRandom(29);
    for (let trial = 0; trial < 5000; trial++) {
      const start = STARTS[trial % STARTS.length]!;
      const count = Math.floor(random() * 12);
      let text = "";
      for (let i = 0; i < count; i++) text += PIECES[Math.floor(random() * PIECES.length)];
      const expected = referenceSplit(start, text);
      expect(splitReasoning(start, text)).toEqual(expected);
      expect(streamed(start, randomChunks(text, random))).toEqual(expected);
      expect(streamed(start, [...text])).toEqual(expected);
    }
  });
});
