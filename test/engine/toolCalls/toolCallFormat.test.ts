import { describe, expect, test } from "bun:test";
import { detectToolCallFormat, toolCallStream, type ToolCallFormat } from "../../../src/engine/toolCalls/toolCallFormat.ts";
import type { ToolCallPiece } from "../../../src/engine/toolCalls/parsedToolCall.ts";

/** Feeds `text` in pieces cut at `cuts` and collects everything the stream gave. */
function run(format: ToolCallFormat, text: string, cuts: number[]): ToolCallPiece {
  const stream = toolCallStream(format);
  const out: ToolCallPiece = { content: "", calls: [] };
  let from = 0;
  for (const cut of [...cuts, text.length]) {
    const piece = stream.push(text.slice(from, cut));
    out.content += piece.content;
    out.calls.push(...piece.calls);
    from = cut;
  }
  const last = stream.end();
  out.content += last.content;
  out.calls.push(...last.calls);
  return out;
}

/** Every way of cutting the text in two and three pieces gives the same result as whole. */
function everyCut(format: ToolCallFormat, text: string): ToolCallPiece {
  const whole = run(format, text, []);
  for (let a = 0; a <= text.length; a++) {
    expect(run(format, text, [a])).toEqual(whole);
    for (let b = a; b <= text.length; b += 7) expect(run(format, text, [a, b])).toEqual(whole);
  }
  return whole;
}

describe("tool-call formats", () => {
  test("hermes: calls anywhere, content around them, however the text is cut", () => {
    const text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
    expect(everyCut("hermes", text)).toEqual({
      content: "Let me check.\n",
      calls: [
        { name: "get_weather", arguments: '{"city":"Oslo"}' },
        { name: "now", arguments: "{}" },
      ],
    });
    // A call that does not parse stays text; one cut off before its closing tag still counts when whole.
    expect(run("hermes", "<tool_call>{oops}</tool_call>x", [])).toEqual({ content: "<tool_call>{oops}</tool_call>x", calls: [] });
    expect(run("hermes", '<tool_call>{"name": "f", "arguments": {"a": 1}}', [])).toEqual({ content: "", calls: [{ name: "f", arguments: '{"a":1}' }] });
    expect(run("hermes", "a < b <tool", [])).toEqual({ content: "a < b <tool", calls: [] });
  });

  test("llama3_json: the whole answer is calls, or it is content", () => {
    expect(everyCut("llama3_json", '<|python_tag|>{"name": "f", "parameters": {"x": [1, 2]}}; {"name": "g", "parameters": {}}')).toEqual({
      content: "",
      calls: [
        { name: "f", arguments: '{"x":[1,2]}' },
        { name: "g", arguments: "{}" },
      ],
    });
    expect(everyCut("llama3_json", "The weather is fine.")).toEqual({ content: "The weather is fine.", calls: [] });
    expect(run("llama3_json", "{not json", [])).toEqual({ content: "{not json", calls: [] });
  });

  test("mistral: [TOOL_CALLS] and a JSON array", () => {
    expect(everyCut("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"q": "a;b"}}]')).toEqual({ content: "", calls: [{ name: "f", arguments: '{"q":"a;b"}' }] });
    expect(everyCut("mistral", "[Tip] plain text")).toEqual({ content: "[Tip] plain text", calls: [] });
  });

  test("the format is told by the template's markers", () => {
    expect(detectToolCallFormat("{% if tools %}<tool_call>{% endif %}")).toBe("hermes");
    expect(detectToolCallFormat("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]")).toBe("mistral");
    expect(detectToolCallFormat("<|python_tag|>{{ tools }}")).toBe("llama3_json");
    expect(detectToolCallFormat("{{ messages }}")).toBeNull();
    expect(detectToolCallFormat(null)).toBeNull();
  });
});
