/**
 * The chat.completion.chunk events of streamed choices: the assistant role, reasoning_content
 * deltas while an answer reasons (when the server splits reasoning out), content deltas (with
 * logprobs), each completed tool call (parsed from the content only) as one tool_calls delta, a finish chunk per choice, then
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
import type { ReasoningPiece } from "../../engine/reasoning/reasoningSplitter.ts";
import { answerSplitter, splitOptionsFor } from "../../engine/reasoning/answerSplitter.ts";

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
  const splitters = handles.map(() => (chat.reasoning === null ? null : answerSplitter(chat.reasoning, splitOptionsFor(tools))));
  const callCounts = handles.map(() => 0);
  /** Content, then each completed call as one tool_calls delta (the SDK assembles them). */
  const sendPiece = (index: number, piece: ToolCallPiece, logprobs: unknown) => {
    if (piece.content !== "" || logprobs !== null) send(chunk([{ index, delta: { content: piece.content }, logprobs, finish_reason: null }]));
    for (const call of piece.calls) {
      send(chunk([{ index, delta: { tool_calls: [{ index: callCounts[index]!++, id: toolCallId(), type: "function", function: { name: call.name, arguments: call.arguments } }] }, logprobs: null, finish_reason: null }]));
    }
  };
  /** Reasoning as reasoning_content, then the content through the tool-call parser (when calls are expected). */
  const sendText = (index: number, piece: ReasoningPiece, logprobs: unknown, last: boolean) => {
    if (piece.reasoning !== "") {
      send(chunk([{ index, delta: { reasoning_content: piece.reasoning }, logprobs, finish_reason: null }]));
      logprobs = null;
    }
    const parser = parsers[index]!;
    // Harmony's calls come with the split (its commentary messages), the others' from the content.
    const splitCalls = piece.calls ?? [];
    if (parser === null) {
      if (piece.content !== "" || logprobs !== null || splitCalls.length > 0) sendPiece(index, { content: piece.content, calls: splitCalls }, logprobs);
      return;
    }
    const parsed = parser.push(piece.content);
    if (last) {
      const rest = parser.end();
      parsed.content += rest.content;
      parsed.calls.push(...rest.calls);
    }
    parsed.calls.push(...splitCalls);
    sendPiece(index, parsed, logprobs);
  };
  send(chunk(handles.map((_, index) => ({ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }))));
  try {
    await pumpAll(handles, (index, event) => {
      const splitter = splitters[index]!;
      if (event.type === "delta") {
        if (event.text === "" && topLogprobs === null) return;
        const logprobs = topLogprobs === null ? null : chatLogprobs(tokenizer, event.tokens);
        sendText(index, splitter === null ? { reasoning: "", content: event.text } : splitter.push(event.text), logprobs, false);
      } else {
        sendText(index, splitter === null ? { reasoning: "", content: "" } : splitter.end(), null, true);
        finished[index] = event;
        send(chunk([{ index, delta: {}, logprobs: null, finish_reason: callCounts[index]! > 0 ? "tool_calls" : event.reason }]));
      }
    });
    if (options.includeUsage) send({ ...chunk([]), usage: usageOf(finished, options.choicesPerPrompt, chat.reasoning !== null) });
  } catch (error) {
    fail(error);
  }
  send("[DONE]");
}
