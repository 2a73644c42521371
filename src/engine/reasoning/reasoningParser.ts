/**
 * Reasoning output (vLLM's --reasoning-parser names): models that think write their reasoning in
 * `<think>…</think>` before the answer. Where an answer starts — inside the reasoning, undecided
 * until its first characters show whether it opens `<think>`, or in the content — follows from
 * the parser, the rendered prompt's end and the request's enable_thinking:
 *
 * - the prompt ends with `</think>` (Qwen3's template with enable_thinking false writes an empty
 *   think block), or the request says enable_thinking false: content, nothing to split;
 * - the prompt ends with an open `<think>` (DeepSeek-R1's and Qwen3.5's templates): reasoning;
 * - otherwise deepseek_r1: reasoning (R1 distills often start thinking without writing the tag);
 *   qwen3: reasoning only when the answer opens with `<think>`, else all of it is content.
 *
 * gpt-oss (harmony, its parser also named `harmony`) writes channels, not `<think>`: its answers
 * are split by harmonySplitter.ts (the analysis channel is the reasoning).
 */

export const REASONING_PARSERS = ["qwen3", "deepseek_r1", "gpt-oss"] as const;
export type ReasoningParserName = (typeof REASONING_PARSERS)[number];

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";

/** Where a `<think>` answer starts: inside the reasoning, undecided until it opens `<think>` or not, or in the content. */
export type ThinkStart = "reasoning" | "opening" | "content";
/** How an answer is split: a `<think>` answer's start, or harmony's channels. */
export type ReasoningStart = ThinkStart | "harmony";

/** How an answer starts, from the parser, the end of its rendered prompt and whether the request turned thinking off. */
export function reasoningStartOf(parser: ReasoningParserName, promptEnd: string, thinkingDisabled: boolean): ReasoningStart {
  if (parser === "gpt-oss") return "harmony";
  if (thinkingDisabled) return "content";
  const end = promptEnd.trimEnd();
  if (end.endsWith(THINK_CLOSE)) return "content";
  if (end.endsWith(THINK_OPEN)) return "reasoning";
  return parser === "deepseek_r1" ? "reasoning" : "opening";
}

/** The flag's choices: a parser, auto (detect from the chat template) or none (reasoning stays in the content). */
export const REASONING_PARSER_CHOICES = [...REASONING_PARSERS, "harmony", "auto", "none"] as const;
export type ReasoningParserChoice = (typeof REASONING_PARSER_CHOICES)[number];

/**
 * The parser a chat template calls for (null: its model does not think, as far as the template
 * shows): a template that writes `<think>` or `</think>` thinks; with an enable_thinking switch it is Qwen3's
 * kind, otherwise DeepSeek-R1's (its distills and QwQ), as vLLM's documentation pairs them.
 */
export function detectReasoningParser(template: string | null): ReasoningParserName | null {
  if (template !== null && template.includes("<|channel|>") && template.includes("<|message|>")) return "gpt-oss";
  if (template === null || (!template.includes(THINK_OPEN) && !template.includes(THINK_CLOSE))) return null;
  return template.includes("enable_thinking") ? "qwen3" : "deepseek_r1";
}

/** The parser a server runs with: the flag's, or the template's under auto (null: none). */
export function resolveReasoningParser(choice: ReasoningParserChoice, template: string | null): ReasoningParserName | null {
  if (choice === "none") return null;
  if (choice === "harmony") return "gpt-oss";
  return choice === "auto" ? detectReasoningParser(template) : choice;
}
