/**
 * The reasoning split written the plain way, over a whole text, to check the streaming splitter
 * against: an optional leading `<think>` (after whitespace), the reasoning up to the first
 * `</think>`, the content after it.
 */
import type { ThinkStart as ReasoningStart } from "../../../src/engine/reasoning/reasoningParser.ts";

export function referenceSplit(start: ReasoningStart, text: string): { reasoning: string | null; content: string | null } {
  if (start === "content") return { reasoning: null, content: text };
  const opened = /^\s*<think>/.exec(text);
  if (start === "opening" && opened === null) return { reasoning: null, content: text };
  const rest = opened === null ? text : text.slice(opened[0].length);
  const close = rest.indexOf("</think>");
  const reasoning = close < 0 ? rest : rest.slice(0, close);
  const content = close < 0 ? "" : rest.slice(close + "</think>".length);
  return { reasoning: reasoning === "" ? null : reasoning, content: content === "" ? null : content };
}
