/**
 * Tool calls in a model's text (vLLM's --tool-call-parser names): how each model family writes
 * them, which one a chat template uses, and a streaming parser per family that splits generated
 * text into message content and complete calls.
 *
 * - hermes (Qwen 2.5/3, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
 *   any number, content around them;
 * - llama3_json (Llama 3.1+): the whole answer is `{"name": ..., "parameters": {...}}` (after an
 *   optional `<|python_tag|>`), several separated by `;`;
 * - mistral: the whole answer is `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`;
 * - harmony (gpt-oss): a message to `functions.NAME` on the commentary channel; the answer's
 *   splitter (reasoning/harmonySplitter.ts) finds those, so its stream here passes text through.
 */
import { HermesToolCallStream } from "./hermesToolCalls.ts";
import { LeadingToolCallStream } from "./leadingToolCalls.ts";
import { callOf, type ParsedToolCall, type ToolCallStream } from "./parsedToolCall.ts";

/** The formats whose calls are written in the answer's content. */
export const CONTENT_TOOL_CALL_FORMATS = ["hermes", "llama3_json", "mistral"] as const;
export type ContentToolCallFormat = (typeof CONTENT_TOOL_CALL_FORMATS)[number];
export const TOOL_CALL_FORMATS = [...CONTENT_TOOL_CALL_FORMATS, "harmony"] as const;
export type ToolCallFormat = (typeof TOOL_CALL_FORMATS)[number];

/** The format a chat template writes tool calls in, from its markers (null: none it knows). */
export function detectToolCallFormat(template: string | null): ToolCallFormat | null {
  if (template === null) return null;
  if (template.includes("<|channel|>commentary") || template.includes("to=functions.")) return "harmony";
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes("[TOOL_CALLS]")) return "mistral";
  if (template.includes("<|python_tag|>") || (template.includes("<|eom_id|>") && template.includes("parameters"))) return "llama3_json";
  return null;
}

export function toolCallStream(format: ToolCallFormat): ToolCallStream {
  switch (format) {
    case "hermes":
      return new HermesToolCallStream();
    case "llama3_json":
      return new LeadingToolCallStream(["<|python_tag|>", "{"], parseLlama3Calls);
    case "mistral":
      return new LeadingToolCallStream(["[TOOL_CALLS]"], parseMistralCalls);
    case "harmony":
      return { push: (text) => ({ content: text, calls: [] }), end: () => ({ content: "", calls: [] }) };
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Llama 3: one or more call objects separated by ";" (null when any does not parse). */
function parseLlama3Calls(text: string): ParsedToolCall[] | null {
  const body = text.trim().replace(/^<\|python_tag\|>/, "").trim();
  const whole = callOf(parseJson(body));
  if (whole !== null) return [whole];
  const calls = body.split(/(?<=\})\s*;\s*(?=\{)/).map((part) => callOf(parseJson(part)));
  return calls.length > 0 && calls.every((call) => call !== null) ? (calls as ParsedToolCall[]) : null;
}

/** Mistral: a JSON array of call objects after the marker (null when it does not parse). */
function parseMistralCalls(text: string): ParsedToolCall[] | null {
  const value = parseJson(text.trim().replace(/^\[TOOL_CALLS\]/, "").trim());
  const list = Array.isArray(value) ? value : [value];
  const calls = list.map(callOf);
  return calls.length > 0 && calls.every((call) => call !== null) ? (calls as ParsedToolCall[]) : null;
}
