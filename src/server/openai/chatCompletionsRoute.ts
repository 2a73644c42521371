/**
 * POST /v1/chat/completions: parse → prepare (chatPreparation.ts, one engine.prepare) → run →
 * shape, as one chat.completion object or, with "stream": true, server-sent chunks.
 */
import type { Context } from "hono";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { eventStream } from "../generationEventStream.ts";
import type { ChatCompletionBody } from "../openaiSchemas.ts";
import { answerError } from "./answerError.ts";
import { answerHeader } from "./answerHeader.ts";
import { answerId } from "./answerIds.ts";
import { chatCompletionAnswer } from "./chatCompletionAnswer.ts";
import { streamChatCompletion } from "./chatCompletionStream.ts";
import { prepareChatGeneration, type PreparedChat } from "./chatPreparation.ts";
import { cancelAll } from "./choiceEvents.ts";
import type { GenerationHandlerOptions } from "./handlerOptions.ts";
import { InvalidRequest } from "./invalidRequest.ts";
import { choicesPerPrompt } from "./requestChecks.ts";

export function chatCompletionsHandler(engine: GenerationEngine, options: GenerationHandlerOptions) {
  return async (c: Context): Promise<Response> => {
    const body = (c.req as unknown as { valid(target: "json"): ChatCompletionBody }).valid("json");
    let chat: PreparedChat;
    try {
      chat = await prepareChatGeneration(engine, body);
    } catch (error) {
      return answerError(c, asMaxCompletionTokens(error, body));
    }
    const header = answerHeader(answerId("chatcmpl", body), engine.modelId);
    const cancel = () => cancelAll(chat.handles);
    if (body.stream) {
      const streamOptions = { includeUsage: body.stream_options?.include_usage === true, choicesPerPrompt: choicesPerPrompt(body) };
      return eventStream((send, fail) => streamChatCompletion(header, chat, engine.tokenizer, streamOptions, send, fail), cancel, c.req.raw.signal, options.stream);
    }
    c.req.raw.signal.addEventListener("abort", cancel);
    try {
      const results = await Promise.all(chat.handles.map((handle) => handle.result()));
      return c.json(chatCompletionAnswer(header, chat, results, engine.tokenizer, choicesPerPrompt(body)), 200);
    } catch (error) {
      cancel();
      return answerError(c, error);
    }
  };
}

/** max_completion_tokens (when given) is the field that was too large. */
function asMaxCompletionTokens(error: unknown, body: ChatCompletionBody): unknown {
  if (!(error instanceof InvalidRequest) || error.field !== "max_tokens" || body.max_completion_tokens == null) return error;
  return new InvalidRequest("max_completion_tokens", error.message.replace(/^max_tokens: /, ""), error.status, error.code);
}
