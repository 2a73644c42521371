/**
 * POST /v1/completions: parse → prepare (completionPreparation.ts, one engine.prepare) → run →
 * shape, as one text_completion object or, with "stream": true, server-sent chunks.
 */
import type { Context } from "hono";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { eventStream } from "../generationEventStream.ts";
import type { CompletionBody } from "../openaiSchemas.ts";
import { answerError } from "./answerError.ts";
import { answerHeader } from "./answerHeader.ts";
import { answerId } from "./answerIds.ts";
import { cancelAll } from "./choiceEvents.ts";
import { completionAnswer } from "./completionAnswer.ts";
import { prepareCompletion, type PreparedCompletion } from "./completionPreparation.ts";
import { streamCompletion } from "./completionStream.ts";
import { CompletionTextOffsets } from "./completionText.ts";
import type { GenerationHandlerOptions } from "./handlerOptions.ts";

export function completionsHandler(engine: GenerationEngine, options: GenerationHandlerOptions) {
  return async (c: Context): Promise<Response> => {
    const body = (c.req as unknown as { valid(target: "json"): CompletionBody }).valid("json");
    let completion: PreparedCompletion;
    try {
      completion = await prepareCompletion(engine, body);
    } catch (error) {
      return answerError(c, error);
    }
    const header = answerHeader(answerId("cmpl", body), engine.modelId);
    const offsets = new CompletionTextOffsets(engine.tokenizer, body, completion);
    const cancel = () => cancelAll(completion.handles);
    if (body.stream) {
      const includeUsage = body.stream_options?.include_usage === true;
      return eventStream((send, fail) => streamCompletion(header, completion, engine.tokenizer, offsets, includeUsage, send, fail), cancel, c.req.raw.signal, options.stream);
    }
    c.req.raw.signal.addEventListener("abort", cancel);
    try {
      const results = await Promise.all(completion.handles.map((handle) => handle.result()));
      return c.json(completionAnswer(header, completion, results, engine.tokenizer, offsets), 200);
    } catch (error) {
      cancel();
      return answerError(c, error);
    }
  };
}
