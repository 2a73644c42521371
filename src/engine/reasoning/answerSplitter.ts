/**
 * The splitter of an answer by how it starts: `<think>` answers (reasoningSplitter.ts) or gpt-oss's
 * harmony channels (harmonySplitter.ts), whole or streamed.
 */
import type { ParsedToolCall } from "../toolCalls/parsedToolCall.ts";
import type { ToolRequest } from "../toolCalls/toolRequest.ts";
import { HarmonySplitter } from "./harmonySplitter.ts";
import type { ReasoningStart } from "./reasoningParser.ts";
import { answerOf, ReasoningSplitter, type AnswerSplitter } from "./reasoningSplitter.ts";

export interface AnswerSplitOptions {
  /** Whether tool calls are parsed (harmony's messages to functions.*); else their bodies are content. */
  calls: boolean;
  /** The function a harmony answer's first non-analysis body calls, whatever its header says (harmonySplitter.ts). */
  forcedCall?: string;
}

/** The split options of a request's tools: calls parsed when they may be made; the call named when it must be one. */
export function splitOptionsFor(tools: ToolRequest | null): AnswerSplitOptions {
  if (tools === null || tools.choice === null) return { calls: false };
  if (tools.format !== "harmony") return { calls: true };
  const forced = typeof tools.choice === "object" ? tools.choice.name : tools.choice === "required" && tools.tools.length === 1 ? tools.tools[0]!.function.name : undefined;
  return forced === undefined ? { calls: true } : { calls: true, forcedCall: forced };
}

export function answerSplitter(start: ReasoningStart, options: AnswerSplitOptions = { calls: false }): AnswerSplitter {
  return start === "harmony" ? new HarmonySplitter(options) : new ReasoningSplitter(start);
}

/** A whole answer's reasoning (null: none), content (null: the answer reasoned, or called, and said nothing else) and calls. */
export interface SplitAnswerWithCalls {
  reasoning: string | null;
  content: string | null;
  calls: ParsedToolCall[];
}

export function splitAnswer(start: ReasoningStart, text: string, options: AnswerSplitOptions = { calls: false }): SplitAnswerWithCalls {
  const splitter = answerSplitter(start, options);
  const first = splitter.push(text);
  const last = splitter.end();
  const calls = [...(first.calls ?? []), ...(last.calls ?? [])];
  const split = answerOf(splitter.reasoned || calls.length > 0, first.reasoning + last.reasoning, first.content + last.content);
  return { ...split, calls };
}
