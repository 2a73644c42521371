/**
 * Whether a chat's answer is split into reasoning and content, and where it starts
 * (engine/reasoning/reasoningParser.ts): the server's parser, the rendered prompt's last tokens
 * and chat_template_kwargs.enable_thinking, which must be a boolean when given (the template and
 * the parser both read it).
 */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { reasoningStartOf, type ReasoningStart } from "../../engine/reasoning/reasoningParser.ts";
import type { ChatCompletionBody } from "../openaiSchemas.ts";
import { InvalidRequest } from "./invalidRequest.ts";

/** Prompt tokens decoded to see whether the template opened or closed a think block (an empty one is 19 byte tokens). */
const PROMPT_END_TOKENS = 24;

/** Whether the request turned thinking off; a non-boolean enable_thinking is a 400. */
export function thinkingDisabled(body: Pick<ChatCompletionBody, "chat_template_kwargs">): boolean {
  const kwargs = body.chat_template_kwargs;
  if (kwargs === undefined || kwargs === null || !("enable_thinking" in kwargs)) return false;
  const value = kwargs.enable_thinking;
  if (value !== null && typeof value !== "boolean") throw new InvalidRequest("chat_template_kwargs.enable_thinking", "must be a boolean");
  return value === false;
}

/** Where the answer starts (null: the server splits no reasoning out). */
export function chatReasoningStart(engine: GenerationEngine, body: Pick<ChatCompletionBody, "chat_template_kwargs">, promptIds: readonly number[]): ReasoningStart | null {
  const disabled = thinkingDisabled(body);
  const parser = engine.reasoningParser;
  if (parser === null) return null;
  const promptEnd = engine.tokenizer.decode(promptIds.slice(-PROMPT_END_TOKENS), { skipSpecialTokens: false });
  return reasoningStartOf(parser, promptEnd, disabled);
}
