import { describe, expect, test } from "bun:test";
import { answerSplitter, splitAnswer, splitOptionsFor } from "../../../src/engine/reasoning/answerSplitter.ts";
import { detectReasoningParser, reasoningStartOf, resolveReasoningParser } from "../../../src/engine/reasoning/reasoningParser.ts";
import { HarmonySplitter, parseHarmonyHeader } from "../../../src/engine/reasoning/harmonySplitter.ts";
import { detectToolCallFormat } from "../../../src/engine/toolCalls/toolCallFormat.ts";
import { seededRandom } from "../../../src/index/seededRandom.ts";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../../helpers/cli.ts";

const ANALYSIS = "<|channel|>analysis<|message|>User asks weather. Use the tool.<|end|>";
const CALL = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}';
const FINAL = "<|start|>assistant<|channel|>final<|message|>It is **21C** — sunny.";

/** Whole-text splits the streamed pieces must join to. */
const ANSWERS: [string, string, { reasoning: string | null; content: string | null; calls: { name: string; arguments: string }[] }][] = [
  ["analysis then final", ANALYSIS + FINAL, { reasoning: "User asks weather. Use the tool.", content: "It is **21C** — sunny.", calls: [] }],
  ["analysis then a call (its <|call|> was the stop token)", ANALYSIS + CALL, { reasoning: "User asks weather. Use the tool.", content: null, calls: [{ name: "get_weather", arguments: '{"city": "Paris"}' }] }],
  ["final only", "<|channel|>final<|message|>Hi!", { reasoning: null, content: "Hi!", calls: [] }],
  [
    "the recipient before the channel, as the template writes it",
    '<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}',
    { reasoning: "x", content: null, calls: [{ name: "now", arguments: "{}" }] },
  ],
  [
    "a preamble on the commentary channel is content; two calls ended by <|end|>",
    '<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>commentary to=functions.a <|constrain|>json<|message|>{"n":1}<|end|><|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{"n":2}<|end|>',
    { reasoning: null, content: "Checking both.", calls: [{ name: "a", arguments: '{"n":1}' }, { name: "b", arguments: '{"n":2}' }] },
  ],
  ["cut inside the analysis", "<|channel|>analysis<|message|>Still thinking <|", { reasoning: "Still thinking <|", content: null, calls: [] }],
  ["cut inside a header", "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin", { reasoning: "a", content: null, calls: [] }],
  ["a message that starts without <|end|> before it", "<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b", { reasoning: "a", content: "b", calls: [] }],
  ["no markup at all is content", "Just text.", { reasoning: null, content: "Just text.", calls: [] }],
  ["an empty answer", "", { reasoning: null, content: "", calls: [] }],
];

function streamed(text: string, random: () => number, calls = true) {
  const splitter = new HarmonySplitter({ calls });
  let reasoning = "";
  let content = "";
  const found: { name: string; arguments: string }[] = [];
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    const length = 1 + Math.floor(random() * 5);
    pieces.push(text.slice(at, at + length));
    at += length;
  }
  for (const piece of [...pieces.map((p) => splitter.push(p)), splitter.end()]) {
    reasoning += piece.reasoning;
    content += piece.content;
    found.push(...(piece.calls ?? []));
  }
  return { reasoning, content, calls: found };
}

describe("harmony answers split into reasoning_content, content and tool calls", () => {
  for (const [name, text, expected] of ANSWERS) {
    test(`${name}: whole, and streamed in 50 random chunkings`, () => {
      expect(splitAnswer("harmony", text, { calls: true })).toEqual(expected);
      const random = seededRandom(7);
      for (let round = 0; round < 50; round++) {
        const got = streamed(text, random);
        expect(got.reasoning).toBe(expected.reasoning ?? "");
        expect(got.content).toBe(expected.content ?? "");
        expect(got.calls).toEqual(expected.calls);
      }
    });
  }

  test("streamed, no marker's text leaks out: the analysis goes out before its <|end|> arrives", () => {
    const splitter = new HarmonySplitter();
    expect(splitter.push("<|channel|>analy").reasoning).toBe("");
    expect(splitter.push("sis<|message|>Think").reasoning).toBe("Think");
    expect(splitter.push("ing<|e")).toEqual({ reasoning: "ing", content: "", calls: [] });
    expect(splitter.push("nd|><|start|>assistant<|channel|>final<|message|>Hi")).toEqual({ reasoning: "", content: "Hi", calls: [] });
  });

  test("without calls parsed, a call's body is content", () => {
    expect(splitAnswer("harmony", ANALYSIS + CALL, { calls: false })).toEqual({ reasoning: "User asks weather. Use the tool.", content: '{"city": "Paris"}', calls: [] });
  });

  test("a named call: the first non-analysis body is that call whatever its header says; later ones by their headers", () => {
    const text = `${ANALYSIS}<|start|>assistant<|channel|>final<|message|>{"city": "Oslo"}<|end|><|start|>assistant<|channel|>final<|message|>Done.`;
    expect(splitAnswer("harmony", text, { calls: true, forcedCall: "get_weather" })).toEqual({
      reasoning: "User asks weather. Use the tool.",
      content: "Done.",
      calls: [{ name: "get_weather", arguments: '{"city": "Oslo"}' }],
    });
    expect(splitAnswer("harmony", ANALYSIS + CALL, { calls: true, forcedCall: "other" }).calls).toEqual([{ name: "get_weather", arguments: '{"city": "Paris"}' }]);
  });

  test("the phase: free until the first body that is not analysis (where a constraint applies)", () => {
    const splitter = answerSplitter("harmony", { calls: true });
    expect(splitter.phase).toBe("reasoning");
    splitter.push(ANALYSIS + "<|start|>assistant<|channel|>final");
    expect(splitter.phase).toBe("reasoning");
    expect(splitter.reasoned).toBe(true);
    splitter.push("<|message|>");
    expect(splitter.phase).toBe("content");
  });

  test("headers in either order", () => {
    expect(parseHarmonyHeader("<|channel|>commentary to=functions.f <|constrain|>json")).toEqual({ channel: "commentary", recipient: "functions.f" });
    expect(parseHarmonyHeader("<|start|>assistant to=functions.f<|channel|>commentary json")).toEqual({ channel: "commentary", recipient: "functions.f" });
    expect(parseHarmonyHeader("<|channel|>final")).toEqual({ channel: "final", recipient: null });
  });
});

describe("gpt-oss's template picks the parsers", () => {
  const template = readFileSync(join(REPO_ROOT, "scripts/oracle/templates/gpt-oss.jinja"), "utf8");
  test("reasoning parser gpt-oss (harmony an alias), tool-call format harmony", () => {
    expect(detectReasoningParser(template)).toBe("gpt-oss");
    expect(resolveReasoningParser("auto", template)).toBe("gpt-oss");
    expect(resolveReasoningParser("harmony", null)).toBe("gpt-oss");
    expect(reasoningStartOf("gpt-oss", "<|start|>assistant", false)).toBe("harmony");
    expect(detectToolCallFormat(template)).toBe("harmony");
    const qwen3 = readFileSync(join(REPO_ROOT, "scripts/oracle/templates/qwen3.jinja"), "utf8");
    expect(detectReasoningParser(qwen3)).toBe("qwen3");
    expect(detectToolCallFormat(qwen3)).toBe("hermes");
  });
});

describe("split options of a request's tools", () => {
  const tool = (name: string) => ({ type: "function" as const, function: { name } });
  test("harmony names the call for a named tool_choice and for required with one tool", () => {
    expect(splitOptionsFor(null)).toEqual({ calls: false });
    expect(splitOptionsFor({ tools: [tool("a")], choice: null, parallel: true, format: "harmony" })).toEqual({ calls: false });
    expect(splitOptionsFor({ tools: [tool("a"), tool("b")], choice: "auto", parallel: true, format: "harmony" })).toEqual({ calls: true });
    expect(splitOptionsFor({ tools: [tool("a"), tool("b")], choice: { name: "b" }, parallel: true, format: "harmony" })).toEqual({ calls: true, forcedCall: "b" });
    expect(splitOptionsFor({ tools: [tool("a")], choice: "required", parallel: true, format: "harmony" })).toEqual({ calls: true, forcedCall: "a" });
    expect(splitOptionsFor({ tools: [tool("a"), tool("b")], choice: "required", parallel: true, format: "harmony" })).toEqual({ calls: true });
    expect(splitOptionsFor({ tools: [tool("a")], choice: { name: "a" }, parallel: true, format: "hermes" })).toEqual({ calls: true });
  });
});
