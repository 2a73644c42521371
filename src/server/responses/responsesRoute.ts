/**
 * POST /v1/responses (OpenAI's Responses API) over the built-in engine. The request is translated
 * to a chat request (responsesInput.ts), checked by the chat schema and run through the chat
 * pipeline (openai/chatPreparation.ts: one engine.prepare, template, documents, tools, structured output); the answer is a
 * `response` object, or with "stream": true the Responses events. A stored response (store, the
 * default) can be continued with previous_response_id; an unknown or forgotten one is a 404.
 */
import { jsonDepthLimit } from "../../http/jsonDepthLimit.ts";
import { createRoute, type OpenAPIHono, type z } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import type { GenerationHandle } from "../../engine/generationHandle.ts";
import { ToolCallAnswerStream, wholeToolCallAnswer } from "../../engine/toolCalls/toolCallAnswer.ts";
import type { ToolRequest } from "../../engine/toolCalls/toolRequest.ts";
import type { ReasoningStart } from "../../engine/reasoning/reasoningParser.ts";
import type { ReasoningPiece } from "../../engine/reasoning/reasoningSplitter.ts";
import { answerSplitter, splitAnswer, splitOptionsFor } from "../../engine/reasoning/answerSplitter.ts";
import { prepareChatGeneration } from "../openai/chatPreparation.ts";
import { describeIssue, errorResponse } from "../../http/errors.ts";
import { engineFailureResponse, failureMessage, streamFailure } from "../generationFailure.ts";
import { InvalidRequest } from "../openai/invalidRequest.ts";
import { usageOf } from "../openai/usage.ts";
import { DEFAULT_SSE_KEEP_ALIVE_MS } from "../../http/sseKeepAlive.ts";
import { DEFAULT_LIMITS } from "../../http/limits.ts";
import { createOpenAiSchemas } from "../openaiSchemas.ts";
import { responseEventStream } from "./responseEventStream.ts";
import { responseObject, responseUsage, type ResponseStatus, type ResponseUsage } from "./responseObject.ts";
import { ResponseOutputBuilder, type OutputEvent, type OutputItem } from "./responseOutput.ts";
import { refusedResponsesField } from "./responsesFields.ts";
import { chatFieldOrigin, itemsAsMessages, ResponsesInputError, translateResponsesRequest, type TranslatedRequest } from "./responsesInput.ts";
import { createResponsesSchemas, type ResponsesBody } from "./responsesSchema.ts";
import type { ResponseStore } from "./responseStore.ts";

export interface ResponsesRouteOptions {
  middleware: MiddlewareHandler[];
  secured: boolean;
  errorSchema: z.ZodType;
  store: ResponseStore;
  maxJsonDepth?: number;
  /** Where failed streams are logged (default: stderr). */
  log?: (text: string) => void;
  /** A stream that wrote nothing for this long writes a keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS). */
  sseKeepAliveMs?: number;
}

const hex = () => crypto.randomUUID().replace(/-/g, "");

export function mountResponsesRoute(app: OpenAPIHono, engine: GenerationEngine, options: ResponsesRouteOptions): void {
  const schemas = createResponsesSchemas();
  const chatSchema = createOpenAiSchemas().ChatCompletionRequest;
  const store = options.store;
  const maxJsonDepth = options.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth;
  const log = options.log ?? ((text: string) => void process.stderr.write(text));
  const keepAliveMs = options.sseKeepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const route = createRoute({
    method: "post",
    path: "/v1/responses",
    tags: ["generation"],
    summary: "A response from the served model (OpenAI's Responses API)",
    middleware: [...options.middleware, jsonDepthLimit(maxJsonDepth)],
    security: options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined,
    request: { body: { required: true, content: { "application/json": { schema: schemas.ResponsesRequest } } } },
    responses: {
      200: {
        description: 'The response, or with "stream": true server-sent events (event: TYPE, data: {type, sequence_number, ...}): response.created, response.in_progress, output items and their deltas, response.completed (response.incomplete, response.failed).',
        content: { "application/json": { schema: schemas.Response }, "text/event-stream": { schema: schemas.Response } },
      },
      400: error('Invalid input ("field" names it): a wrong type or value, a field this server does not honour (background, include, reasoning, built-in tools...), a prompt longer than the model holds.'),
      ...(options.secured ? { 401: error("Missing or wrong API key.") } : {}),
      404: error("The request names another model than the one served, or a previous_response_id that is not stored."),
      413: error("The request body is larger than the server's --max-body-bytes."),
      429: error("--max-waiting-requests requests are already waiting for the engine; retry after the Retry-After seconds."),
      500: error("The model runner failed (it is restarted; the request was not completed)."),
      503: error("The server is shutting down."),
      504: error('The request\'s deadline (the server\'s --request-timeout) passed before it finished; it was cancelled.'),
    },
  });

  const answerError = (c: Context, failure: unknown, translated: TranslatedRequest | null): Response => {
    if (failure instanceof ResponsesInputError) return errorResponse(c, 400, failure.message, failure.field);
    if (failure instanceof InvalidRequest) {
      const field = translated === null ? failure.field : chatFieldOrigin(failure.field, translated.origins);
      const message = failure.message.startsWith(`${failure.field}:`) ? `${field}:${failure.message.slice(failure.field.length + 1)}` : failure.message;
      return errorResponse(c, failure.status, message, field);
    }
    const failed = engineFailureResponse(c, failure);
    if (failed !== null) return failed;
    throw failure;
  };

  /** The response's conversation and items kept for previous_response_id and item_reference. */
  const remember = (id: string, body: ResponsesBody, translated: TranslatedRequest, output: readonly OutputItem[]) => {
    if (body.store === false) return;
    const items = new Map<string, Record<string, unknown>>();
    if (Array.isArray(body.input)) for (const item of body.input) if (typeof item.id === "string" && item.type !== "item_reference") items.set(item.id, item);
    for (const item of output) items.set(item.id, item as unknown as Record<string, unknown>);
    store.put(id, { conversation: [...translated.conversation, ...itemsAsMessages(output as unknown as Record<string, unknown>[])], items });
  };

  app.openapi(route, (async (c: Context) => {
    const body = (c.req as unknown as { valid(target: "json"): ResponsesBody }).valid("json");
    let translated: TranslatedRequest | null = null;
    let handle: GenerationHandle;
    let tools: ToolRequest | null;
    let reasoning: ReasoningStart | null;
    try {
      const refusal = refusedResponsesField(body as Record<string, unknown>);
      if (refusal !== null) throw new ResponsesInputError(refusal.field, refusal.why);
      let previous = null;
      if (body.previous_response_id != null) {
        previous = store.get(body.previous_response_id)?.conversation ?? null;
        if (previous === null) return errorResponse(c, 404, `previous_response_id: no stored response ${JSON.stringify(body.previous_response_id)} (never stored, stored with "store": false, or forgotten under the server's memory budget)`, "previous_response_id");
      }
      translated = translateResponsesRequest(body, previous, (id) => store.item(id));
      const checked = chatSchema.safeParse(translated.chat);
      if (!checked.success) {
        const issue = describeIssue(checked.error.issues as never);
        throw new InvalidRequest(issue.field, issue.message.slice(issue.field.length + 2));
      }
      const prepared = await prepareChatGeneration(engine, checked.data);
      handle = prepared.handles[0]!;
      tools = prepared.tools;
      reasoning = prepared.reasoning;
    } catch (failure) {
      return answerError(c, failure, translated);
    }
    const id = body.request_id != null ? `resp_${body.request_id}` : `resp_${hex()}`;
    const createdAt = Math.floor(Date.now() / 1000);
    const model = engine.modelId;
    const callsExpected = tools !== null && tools.choice !== null;
    // Whitespace between calls is no output text, streamed or not (toolCallAnswer.ts).
    const parser = callsExpected ? new ToolCallAnswerStream(tools!.format) : null;
    const splitter = reasoning === null ? null : answerSplitter(reasoning, splitOptionsFor(tools));
    /** Reasoning to the reasoning item, content through the tool-call parser (when calls are expected). */
    const pushText = (builder: ResponseOutputBuilder, piece: ReasoningPiece, last: boolean) => {
      builder.pushReasoning(piece.reasoning);
      if (piece.content !== "") builder.push(parser === null ? { content: piece.content, calls: [] } : parser.push(piece.content));
      // Harmony's calls come with the split (its commentary messages).
      if (piece.calls !== undefined && piece.calls.length > 0) builder.push({ content: "", calls: piece.calls });
      if (last && parser !== null) builder.push(parser.end());
    };
    const conversation = translated!;
    const snapshot = (status: ResponseStatus, output: readonly OutputItem[], usage: ResponseUsage | null, failure?: { code: string; message: string }) =>
      responseObject({ id, createdAt, model, status, output, usage, ...(failure ? { error: failure } : {}) }, body);

    if (body.stream) {
      return responseEventStream(
        async (send, isOpen) => {
          const builder = new ResponseOutputBuilder((event: OutputEvent) => send(event), callsExpected);
          send({ type: "response.created", response: snapshot("in_progress", [], null) });
          send({ type: "response.in_progress", response: snapshot("in_progress", [], null) });
          try {
            for await (const event of handle) {
              if (event.type === "delta") {
                if (event.text !== "") pushText(builder, splitter === null ? { reasoning: "", content: event.text } : splitter.push(event.text), false);
                continue;
              }
              pushText(builder, splitter === null ? { reasoning: "", content: "" } : splitter.end(), true);
              const status = event.reason === "length" ? "incomplete" : "completed";
              builder.finish(status);
              const usage = responseUsage(usageOf([event], 1, reasoning !== null));
              remember(id, body, conversation, builder.items);
              send({ type: status === "completed" ? "response.completed" : "response.incomplete", response: snapshot(status, builder.items, usage) });
            }
          } catch (failure) {
            if (!isOpen()) return;
            log(`ctxr serve: a streamed response failed: ${failureMessage(failure)}\n`);
            const { message, code } = streamFailure(failure);
            send({ type: "response.failed", response: snapshot("failed", builder.items, null, { code: code ?? "server_error", message }) });
          }
        },
        () => handle.cancel(),
        c.req.raw.signal,
        keepAliveMs,
      );
    }

    c.req.raw.signal.addEventListener("abort", () => handle.cancel());
    try {
      const result = await handle.result();
      const builder = new ResponseOutputBuilder(() => {}, callsExpected);
      const split = reasoning === null ? { reasoning: null, content: result.text, calls: [] } : splitAnswer(reasoning, result.text, splitOptionsFor(tools));
      builder.pushReasoning(split.reasoning ?? "");
      const text = split.content ?? "";
      if (!callsExpected) builder.push({ content: text, calls: [] });
      else {
        const answer = wholeToolCallAnswer(tools!.format, text);
        builder.push({ content: answer.content ?? "", calls: [...split.calls, ...answer.calls] });
      }
      const status = result.finishReason === "length" ? "incomplete" : "completed";
      builder.finish(status);
      remember(id, body, conversation, builder.items);
      return c.json(snapshot(status, builder.items, responseUsage(usageOf([result], 1, reasoning !== null))), 200);
    } catch (failure) {
      handle.cancel();
      return answerError(c, failure, conversation);
    }
  }) as never);
}
