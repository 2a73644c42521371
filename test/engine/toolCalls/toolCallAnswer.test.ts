import { describe, expect, test } from "bun:test";
import { ToolCallAnswerStream, wholeToolCallAnswer, type ToolCallAnswer } from "../../../src/engine/toolCalls/toolCallAnswer.ts";
import { CONTENT_TOOL_CALL_FORMATS as TOOL_CALL_FORMATS, type ContentToolCallFormat as ToolCallFormat } from "../../../src/engine/toolCalls/toolCallFormat.ts";
import type { ParsedToolCall } from "../../../src/engine/toolCalls/parsedToolCall.ts";

const CALLS: ParsedToolCall[] = [
  { name: "get_weather", arguments: '{"city":"Oslo","unit":"c"}' },
  { name: "now", arguments: "{}" },
  { name: "get_weather", arguments: '{"city":"Lima","unit":"f"}' },
];

/** An answer as each family's model writes `calls` (toolCallGrammar.ts's shapes). */
function written(format: ToolCallFormat, calls: readonly ParsedToolCall[]): string {
  switch (format) {
    case "hermes":
      return calls.map((call) => `<tool_call>\n{"name": ${JSON.stringify(call.name)}, "arguments": ${call.arguments}}\n</tool_call>`).join("\n");
    case "llama3_json":
      return calls.map((call) => `{"name": ${JSON.stringify(call.name)}, "parameters": ${call.arguments}}`).join("; ");
    case "mistral":
      return `[TOOL_CALLS][${calls.map((call) => `{"name": ${JSON.stringify(call.name)}, "arguments": ${call.arguments}}`).join(", ")}]`;
  }
}

/** What a client assembles from the streamed deltas: content joined (null when none came, as the SDKs leave it), calls in order. */
function streamed(format: ToolCallFormat, text: string, cuts: readonly number[]): ToolCallAnswer {
  const stream = new ToolCallAnswerStream(format);
  let content = "";
  const calls: ParsedToolCall[] = [];
  let from = 0;
  for (const piece of [...cuts.map((cut) => stream.push(text.slice(from, (from = cut)))), stream.push(text.slice(from)), stream.end()]) {
    content += piece.content;
    calls.push(...piece.calls);
  }
  expect(stream.calls).toBe(calls.length);
  return { content: content === "" ? null : content, calls };
}

/** A seeded cut list: pieces of 1 to 6 characters. */
function randomCuts(length: number, seed: number): number[] {
  let state = seed;
  const cuts: number[] = [];
  for (let at = 0; ; ) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    at += 1 + (state % 6);
    if (at >= length) return cuts;
    cuts.push(at);
  }
}

/** Streamed in single characters, in random pieces and whole, the answer assembles to the whole message (an empty one to null, as the SDKs read it). */
function expectStreamedAsWhole(format: ToolCallFormat, text: string): ToolCallAnswer {
  const whole = wholeToolCallAnswer(format, text);
  const expected = { content: whole.content === "" ? null : whole.content, calls: whole.calls };
  expect(streamed(format, text, [])).toEqual(expected);
  expect(streamed(format, text, [...text].map((_, i) => i + 1).slice(0, -1))).toEqual(expected);
  for (const seed of [1, 2, 3, 4, 5]) expect(streamed(format, text, randomCuts(text.length, seed))).toEqual(expected);
  return whole;
}

describe("tool-call answers, streamed as whole", () => {
  for (const format of TOOL_CALL_FORMATS) {
    for (const count of [1, 2, 3]) {
      test(`${format}: ${count} call(s) only: content null, the calls in order`, () => {
        const whole = expectStreamedAsWhole(format, written(format, CALLS.slice(0, count)));
        expect(whole).toEqual({ content: null, calls: CALLS.slice(0, count) });
      });

      test(`${format}: ${count} call(s) after whitespace and with a trailing newline: still no content`, () => {
        const whole = expectStreamedAsWhole(format, ` \n${written(format, CALLS.slice(0, count))}\n`);
        expect(whole).toEqual({ content: null, calls: CALLS.slice(0, count) });
      });
    }
  }

  for (const count of [1, 2, 3]) {
    test(`hermes: content before ${count} call(s) is kept, with the newlines between the calls`, () => {
      const text = `Let me check.\n${written("hermes", CALLS.slice(0, count))}`;
      const whole = expectStreamedAsWhole("hermes", text);
      expect(whole).toEqual({ content: `Let me check.\n${"\n".repeat(count - 1)}`, calls: CALLS.slice(0, count) });
    });

    test(`hermes: whitespace, then ${count} call(s), then text: the whitespace is content after all`, () => {
      const whole = expectStreamedAsWhole("hermes", `\n${written("hermes", CALLS.slice(0, count))}\nDone.`);
      expect(whole).toEqual({ content: `\n${"\n".repeat(count - 1)}\nDone.`, calls: CALLS.slice(0, count) });
    });
  }

  for (const format of ["llama3_json", "mistral"] as const) {
    test(`${format}: content before the calls makes the whole answer content (the calls must lead)`, () => {
      const text = `Let me check. ${written(format, CALLS.slice(0, 2))}`;
      expect(expectStreamedAsWhole(format, text)).toEqual({ content: text, calls: [] });
    });
  }

  for (const format of TOOL_CALL_FORMATS) {
    test(`${format}: text without calls is content as it is, whitespace included`, () => {
      expect(expectStreamedAsWhole(format, "Sunny, 20 degrees.\n")).toEqual({ content: "Sunny, 20 degrees.\n", calls: [] });
      expect(expectStreamedAsWhole(format, " \n ")).toEqual({ content: " \n ", calls: [] });
      expect(wholeToolCallAnswer(format, "")).toEqual({ content: "", calls: [] });
    });
  }

  test("whitespace-only content is held back until the end shows whether calls came", () => {
    const stream = new ToolCallAnswerStream("hermes");
    expect(stream.push("\n ")).toEqual({ content: "", calls: [] });
    expect(stream.end()).toEqual({ content: "\n ", calls: [] });
    const withCall = new ToolCallAnswerStream("hermes");
    expect(withCall.push("\n")).toEqual({ content: "", calls: [] });
    expect(withCall.push(written("hermes", CALLS.slice(0, 1)))).toEqual({ content: "", calls: CALLS.slice(0, 1) });
    expect(withCall.push("\nOK")).toEqual({ content: "\n\nOK", calls: [] });
    expect(withCall.push(" ")).toEqual({ content: " ", calls: [] });
    expect(withCall.end()).toEqual({ content: "", calls: [] });
  });
});
