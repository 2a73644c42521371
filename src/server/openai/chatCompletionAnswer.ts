/**
 * The chat.completion object of finished choices: the message (its reasoning apart, as
 * reasoning_content, when the server splits it; tool calls parsed from the content after the
 * reasoning), logprobs, usage.
 */
import type { GenerationResult } from "../../engine/generationTypes.ts";
import { wholeToolCallAnswer } from "../../engine/toolCalls/toolCallAnswer.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";
import type { AnswerHeader } from "./answerHeader.ts";
import { toolCallId } from "./answerIds.ts";
import type { PreparedChat } from "./chatPreparation.ts";
import { chatLogprobs } from "./logprobs.ts";
import { splitAnswer, splitOptionsFor } from "../../engine/reasoning/answerSplitter.ts";
import { usageOf } from "./usage.ts";

export function chatCompletionAnswer(header: AnswerHeader, chat: PreparedChat, results: readonly GenerationResult[], tokenizer: ModelTokenizer, choicesPerPrompt: number) {
  const { tools, topLogprobs } = chat;
  return {
    id: header.id,
    object: "chat.completion",
    created: header.created,
    model: header.model,
    choices: results.map((result, index) => {
      const logprobs = topLogprobs === null ? null : chatLogprobs(tokenizer, result.tokens);
      const callsExpected = tools !== null && tools.choice !== null;
      // Harmony's calls come with the split (its commentary messages), the others' from the content.
      const split = chat.reasoning === null ? null : splitAnswer(chat.reasoning, result.text, splitOptionsFor(tools));
      const text = split === null ? result.text : split.content;
      const reasoning = split === null ? {} : { reasoning_content: split.reasoning };
      const splitCalls = split?.calls ?? [];
      if (!callsExpected || text === null) {
        if (splitCalls.length === 0) return { index, message: { role: "assistant", content: text, ...reasoning }, logprobs, finish_reason: result.finishReason };
      }
      const parsed = callsExpected && text !== null ? wholeToolCallAnswer(tools!.format, text) : { content: text, calls: [] };
      const calls = [...splitCalls, ...parsed.calls];
      const content = parsed.content;
      if (calls.length === 0) return { index, message: { role: "assistant", content, ...reasoning }, logprobs, finish_reason: result.finishReason };
      return {
        index,
        message: { role: "assistant", content, ...reasoning, tool_calls: calls.map((call) => ({ id: toolCallId(), type: "function", function: call })) },
        logprobs,
        finish_reason: "tool_calls",
      };
    }),
    usage: usageOf(results, choicesPerPrompt, chat.reasoning !== null),
  };
}
