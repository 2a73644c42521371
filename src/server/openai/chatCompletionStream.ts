/**
 * The chat.completion.chunk events of streamed choices: the assistant role, content deltas (with
 * logprobs), each completed tool call as one tool_calls delta, a finish chunk per choice, then
 * (stream_options.include_usage) the usage chunk and [DONE].
 */
import { ToolCallAnswerStream } from "../../engine/toolCalls/toolCallAnswer.ts";
import type { ToolCallPiece } from "../../engine/toolCalls/parsedToolCall.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";
import type { AnswerHeader } from "./answerHeader.ts";
import { toolCallId } from "./answerIds.ts";
import type { PreparedChat } from "./chatPreparation.ts";
import { pumpAll, type GenerationFinish } from "./choiceEvents.ts";
import { chatLogprobs } from "./logprobs.ts";
import { usageOf } from "./usage.ts";

export interface ChatStreamOptions {
  includeUsage: boolean;
  choicesPerPrompt: number;
}

/** The events of `chat`'s choices, written through `send`; a failure goes to `fail`, then [DONE]. */
export async function streamChatCompletion(
  header: AnswerHeader,
  chat: PreparedChat,
  tokenizer: ModelTokenizer,
  options: ChatStreamOptions,
  send: (data: unknown) => void,
  fail: (error: unknown) => void,
): Promise<void> {
  const { handles, tools, topLogprobs } = chat;
  const chunk = (choices: unknown[]) => ({ id: header.id, object: "chat.completion.chunk", created: header.created, model: header.model, choices, ...(options.includeUsage ? { usage: null } : {}) });
  // By choice index: usage takes the prompt's first choice.
  const finished: GenerationFinish[] = new Array(handles.length);
  // Whitespace between calls is held back, so that the deltas assemble to the non-streamed message.
  const parsers = handles.map(() => (tools !== null && tools.choice !== null ? new ToolCallAnswerStream(tools.format) : null));
  const callCounts = handles.map(() => 0);
  /** Content, then each completed call as one tool_calls delta (the SDK assembles them). */
  const sendPiece = (index: number, piece: ToolCallPiece, logprobs: unknown) => {
    if (piece.content !== "" || logprobs !== null) send(chunk([{ index, delta: { content: piece.content }, logprobs, finish_reason: null }]));
    for (const call of piece.calls) {
      send(chunk([{ index, delta: { tool_calls: [{ index: callCounts[index]!++, id: toolCallId(), type: "function", function: { name: call.name, arguments: call.arguments } }] }, logprobs: null, finish_reason: null }]));
    }
  };
  send(chunk(handles.map((_, index) => ({ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }))));
  try {
    await pumpAll(handles, (index, event) => {
      const parser = parsers[index]!;
      if (event.type === "delta") {
        if (event.text === "" && topLogprobs === null) return;
        const logprobs = topLogprobs === null ? null : chatLogprobs(tokenizer, event.tokens);
        sendPiece(index, parser === null ? { content: event.text, calls: [] } : parser.push(event.text), logprobs);
      } else {
        if (parser !== null) sendPiece(index, parser.end(), null);
        finished[index] = event;
        send(chunk([{ index, delta: {}, logprobs: null, finish_reason: callCounts[index]! > 0 ? "tool_calls" : event.reason }]));
      }
    });
    if (options.includeUsage) send({ ...chunk([]), usage: usageOf(finished, options.choicesPerPrompt) });
  } catch (error) {
    fail(error);
  }
  send("[DONE]");
}
