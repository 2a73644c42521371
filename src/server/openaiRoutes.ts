/**
 * The OpenAI-compatible generation API of `ctxr serve --model DIR`, over the
 * built-in engine (src/engine/generationEngine.ts):
 *
 * - POST /v1/chat/completions: messages through the model's chat template;
 * - POST /v1/completions: a prompt string or token ids (or several: one choice each);
 * - GET /v1/models: the served model; GET /v1/models/{id}: its card (404 for any other id).
 *
 * Both generation routes answer as one JSON object, or with "stream": true as
 * server-sent events (`data: {chunk}` lines, then `data: [DONE]`). A client that
 * disconnects cancels its request (its KV blocks are freed at the next step).
 * Without --model (and without --upstream) these paths answer 404 saying how to
 * load a model.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import type { GenerationHandle } from "../engine/generationHandle.ts";
import type { GeneratedToken, GenerationEvent } from "../engine/generationTypes.ts";
import { SegmentedPromptError, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { errorResponse } from "./errors.ts";
import { engineFailureResponse } from "./generationFailure.ts";
import { DEFAULT_SSE_KEEP_ALIVE_MS } from "./sseKeepAlive.ts";
import { eventStream, type EventStreamOptions } from "./generationEventStream.ts";
import { bestCandidates } from "./bestOf.ts";
import { ToolCallAnswerStream, wholeToolCallAnswer } from "../engine/toolCalls/toolCallAnswer.ts";
import type { ToolCallPiece } from "../engine/toolCalls/parsedToolCall.ts";
import type { ToolRequest } from "../engine/toolCalls/toolRequest.ts";
import { depthProblem } from "./jsonDepth.ts";
import { TokenTextOffsets } from "../engine/tokenTextOffsets.ts";
import { DEFAULT_LIMITS } from "./limits.ts";
import { createOpenAiSchemas, type ChatCompletionBody, type CompletionBody } from "./openaiSchemas.ts";
import { prepareChatGeneration } from "./chatPreparation.ts";
import {
  answerId,
  checkServedModel,
  choicesPerPrompt,
  constraintsFor,
  generationOptions,
  InvalidRequest,
  MAX_CHOICES_PER_PROMPT,
  refuseUnsupported,
  submitAll,
  truncatePrompt,
  usageOf,
} from "./generationRequest.ts";

export const GENERATION_PATHS: ReadonlyMap<string, string[]> = new Map([
  ["/v1/chat/completions", ["POST"]],
  ["/v1/completions", ["POST"]],
  ["/v1/responses", ["POST"]],
  ["/v1/models", ["GET", "HEAD"]],
]);

/** Default max_tokens of /v1/completions (OpenAI's). */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/** The lowest logprob reported (log 0 is -Infinity, which JSON cannot hold). */
const LOGPROB_FLOOR = -9999;

export interface GenerationRouteOptions {
  /** Run before validation on the POST routes (API key, body limit). */
  middleware: MiddlewareHandler[];
  secured: boolean;
  errorSchema: z.ZodType;
  /** Levels of JSON nesting a body may have, ignored fields included (default DEFAULT_LIMITS.maxJsonDepth). */
  maxJsonDepth?: number;
  /** Where failed streams are logged (default: stderr). */
  log?: (text: string) => void;
  /** A stream that wrote nothing for this long writes a keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS). */
  sseKeepAliveMs?: number;
}

function clampLogprob(value: number): number {
  return Math.max(value, LOGPROB_FLOOR);
}

type GenerationFinish = Extract<GenerationEvent, { type: "finish" }>;

function toolCallId(): string {
  return `call_${crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`;
}

/** Runs every handle's events through `onEvent(index, event)`; rejects with the first failure (the others are cancelled). */
async function pumpAll(handles: readonly GenerationHandle[], onEvent: (index: number, event: GenerationEvent) => void): Promise<void> {
  let failure: unknown = null;
  await Promise.all(
    handles.map(async (handle, index) => {
      try {
        for await (const event of handle) onEvent(index, event);
      } catch (error) {
        if (failure === null) {
          failure = error;
          for (const other of handles) other.cancel();
        }
      }
    }),
  );
  if (failure !== null) throw failure;
}

/** Characters as text_offset counts them: code points (a character outside the BMP is one). */
function characters(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

function joinLogprobs(first: CompletionLogprobs, second: CompletionLogprobs): CompletionLogprobs {
  return {
    tokens: [...first.tokens, ...second.tokens],
    token_logprobs: [...first.token_logprobs, ...second.token_logprobs],
    top_logprobs: [...first.top_logprobs, ...second.top_logprobs],
    text_offset: [...first.text_offset, ...second.text_offset],
  };
}

export function mountGenerationRoutes(app: OpenAPIHono, engine: GenerationEngine, options: GenerationRouteOptions): void {
  const schemas = createOpenAiSchemas();
  const { tokenizer } = engine;
  const maxJsonDepth = options.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth;
  const streamOptions: EventStreamOptions = { log: options.log ?? ((text) => void process.stderr.write(text)), keepAliveMs: options.sseKeepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS };
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const errors = {
    400: error('Invalid input ("field" names it): a wrong type or value, an unsupported option, a prompt longer than the model and KV cache hold.'),
    ...(options.secured ? { 401: error("Missing or wrong API key.") } : {}),
    404: error("The request names another model than the one served."),
    413: error("The request body is larger than the server's --max-body-bytes."),
    429: error("--max-waiting-requests requests are already waiting for the engine; retry after the Retry-After seconds."),
    500: error("The model runner failed (it is restarted; the request was not completed)."),
    503: error("The server is shutting down."),
    504: error('The request\'s deadline ("ctxr": {"deadline_ms"}, or the server\'s --request-timeout) passed before it finished; it was cancelled.'),
  };
  const streamed = (schema: z.ZodType, what: string) => ({
    description: `${what}, or with "stream": true server-sent events: data: {chunk} lines (choices[].delta / choices[].text), then data: [DONE].`,
    content: { "application/json": { schema }, "text/event-stream": { schema: z.string() } },
  });

  const chatRoute = createRoute({
    method: "post",
    path: "/v1/chat/completions",
    tags: ["generation"],
    summary: "Chat completion with the served model (OpenAI-compatible)",
    middleware: options.middleware,
    security,
    request: { body: { required: true, content: { "application/json": { schema: schemas.ChatCompletionRequest } } } },
    responses: { 200: streamed(schemas.ChatCompletionResponse, "The completion"), ...errors },
  });
  const completionRoute = createRoute({
    method: "post",
    path: "/v1/completions",
    tags: ["generation"],
    summary: "Text completion with the served model (OpenAI-compatible); the prompt may be token ids",
    middleware: options.middleware,
    security,
    request: { body: { required: true, content: { "application/json": { schema: schemas.CompletionRequest } } } },
    responses: { 200: streamed(schemas.CompletionResponse, "The completion (one choice per prompt)"), ...errors },
  });
  const modelsRoute = createRoute({
    method: "get",
    path: "/v1/models",
    tags: ["generation"],
    summary: "The served model",
    responses: { 200: { description: "One model.", content: { "application/json": { schema: schemas.ModelList } } } },
  });

  const checkModel = (model: string | undefined) => checkServedModel(engine, model);

  const answerError = (c: Context, error: unknown): Response => {
    if (error instanceof InvalidRequest) return errorResponse(c, error.status, error.message, error.field, undefined, error.code);
    const failed = engineFailureResponse(c, error);
    if (failed !== null) return failed;
    throw error;
  };

  const chatLogprobs = (tokens: readonly GeneratedToken[]) => ({
    content: tokens.map((token) => ({
      token: tokenizer.tokenText(token.id),
      logprob: clampLogprob(token.logprob ?? 0),
      bytes: tokenizer.tokenBytes(token.id),
      top_logprobs: (token.top ?? []).map((alt) => ({ token: tokenizer.tokenText(alt.id), logprob: clampLogprob(alt.logprob), bytes: tokenizer.tokenBytes(alt.id) })),
    })),
  });

  /**
   * Completion logprobs; text_offset from `offsets` (where each token begins in the choice's text).
   * A token without a logprob (an echoed prompt's first) gets null, as OpenAI answers.
   */
  const completionLogprobs = (tokens: readonly GeneratedToken[], offsets: TokenTextOffsets): CompletionLogprobs => {
    const texts = tokens.map((token) => tokenizer.tokenText(token.id));
    const textOffset = offsets.next(tokens.map((token) => token.id));
    return {
      tokens: texts,
      token_logprobs: tokens.map((token) => (token.logprob === undefined ? null : clampLogprob(token.logprob))),
      top_logprobs: tokens.map((token) => {
        if (token.logprob === undefined) return null;
        const top: Record<string, number> = {};
        for (const alt of token.top ?? []) top[tokenizer.tokenText(alt.id)] ??= clampLogprob(alt.logprob);
        top[tokenizer.tokenText(token.id)] ??= clampLogprob(token.logprob ?? 0);
        return top;
      }),
      text_offset: textOffset,
    };
  };

  app.openapi(chatRoute, (async (c: Context) => {
    const body = (c.req as unknown as { valid(target: "json"): ChatCompletionBody }).valid("json");
    const deep = depthProblem(body, maxJsonDepth);
    if (deep !== null) return errorResponse(c, 400, deep.message, deep.field);
    let handles: GenerationHandle[];
    let topLogprobs: number | null;
    let tools: ToolRequest | null = null;
    try {
      ({ handles, topLogprobs, tools } = await prepareChatGeneration(engine, body));
    } catch (error) {
      // max_completion_tokens (when given) is the field that was too large.
      if (error instanceof InvalidRequest && error.field === "max_tokens" && body.max_completion_tokens != null) {
        return answerError(c, new InvalidRequest("max_completion_tokens", error.message.replace(/^max_tokens: /, ""), error.status, error.code));
      }
      return answerError(c, error);
    }
    const id = answerId("chatcmpl", body);
    const created = Math.floor(Date.now() / 1000);
    const model = engine.modelId;
    const cancelAll = () => handles.forEach((handle) => handle.cancel());

    if (body.stream) {
      const includeUsage = body.stream_options?.include_usage === true;
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({
        id,
        object: "chat.completion.chunk",
        created,
        model,
        choices,
        ...(includeUsage ? { usage: null } : {}),
        ...extra,
      });
      return eventStream(
        async (send, fail) => {
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
                const logprobs = topLogprobs === null ? null : chatLogprobs(event.tokens);
                sendPiece(index, parser === null ? { content: event.text, calls: [] } : parser.push(event.text), logprobs);
              } else {
                if (parser !== null) sendPiece(index, parser.end(), null);
                finished[index] = event;
                send(chunk([{ index, delta: {}, logprobs: null, finish_reason: callCounts[index]! > 0 ? "tool_calls" : event.reason }]));
              }
            });
            if (includeUsage) send({ ...chunk([]), usage: usageOf(finished, choicesPerPrompt(body)) });
          } catch (error) {
            fail(error);
          }
          send("[DONE]");
        },
        cancelAll,
        c.req.raw.signal,
        streamOptions,
      );
    }

    c.req.raw.signal.addEventListener("abort", cancelAll);
    try {
      const results = await Promise.all(handles.map((handle) => handle.result()));
      return c.json(
        {
          id,
          object: "chat.completion",
          created,
          model,
          choices: results.map((result, index) => {
            const logprobs = topLogprobs === null ? null : chatLogprobs(result.tokens);
            if (tools === null || tools.choice === null) return { index, message: { role: "assistant", content: result.text }, logprobs, finish_reason: result.finishReason };
            const { content, calls } = wholeToolCallAnswer(tools.format, result.text);
            if (calls.length === 0) return { index, message: { role: "assistant", content }, logprobs, finish_reason: result.finishReason };
            return {
              index,
              message: { role: "assistant", content, tool_calls: calls.map((call) => ({ id: toolCallId(), type: "function", function: call })) },
              logprobs,
              finish_reason: "tool_calls",
            };
          }),
          usage: usageOf(results, choicesPerPrompt(body)),
        },
        200,
      );
    } catch (error) {
      cancelAll();
      return answerError(c, error);
    }
  }) as never);

  app.openapi(completionRoute, (async (c: Context) => {
    const body = (c.req as unknown as { valid(target: "json"): CompletionBody }).valid("json");
    const deep = depthProblem(body, maxJsonDepth);
    if (deep !== null) return errorResponse(c, 400, deep.message, deep.field);
    let handles: GenerationHandle[];
    const topLogprobs = body.logprobs ?? null;
    const n = choicesPerPrompt(body);
    const bestOf = body.best_of ?? n;
    const echo = body.echo === true;
    let prompts: number[][];
    let promptTexts: string[] = [];
    /** By prompt: whether its echo is the text the client gave (else its ids decoded, special tokens included). */
    let echoedAsGiven: boolean[] = [];
    try {
      checkModel(body.model);
      refuseUnsupported(body, "completions");
      if (bestOf < n) throw new InvalidRequest("best_of", `must be at least n (${n}), got ${bestOf}`);
      if (bestOf > MAX_CHOICES_PER_PROMPT) throw new InvalidRequest("best_of", `at most ${MAX_CHOICES_PER_PROMPT}, got ${bestOf}`);
      if (bestOf > n && body.stream) throw new InvalidRequest("best_of", "the best of several candidates is known only at the end: best_of larger than n cannot be streamed");
      if (echo && body.segments) throw new InvalidRequest("echo", "echo repeats a prompt; give prompt, not segments");
      const prompt = body.prompt;
      let segments: SegmentedPrompt | undefined;
      if (body.segments && prompt !== undefined) throw new InvalidRequest("segments", "give either prompt or segments, not both");
      if (body.segments) {
        try {
          segments = await engine.tokenizeCompletionSegments(body.segments);
        } catch (error) {
          if (error instanceof SegmentedPromptError) throw new InvalidRequest(error.field, error.message);
          throw error;
        }
        prompts = [engine.segmentIds(segments)];
      } else if (prompt === undefined) throw new InvalidRequest("prompt", "required (or give segments)");
      else if (typeof prompt === "string") prompts = [await engine.tokenizeCompletionPrompt(prompt)];
      else if (prompt.length > 0 && typeof prompt[0] === "number") prompts = [prompt as number[]];
      else if (prompt.length > 0 && typeof prompt[0] === "string") prompts = await Promise.all((prompt as string[]).map((text) => engine.tokenizeCompletionPrompt(text)));
      else prompts = prompt as number[][];
      prompts.forEach((ids, index) => {
        if (ids.length === 0) throw new InvalidRequest(prompts.length > 1 ? `prompt[${index}]` : "prompt", "the prompt is empty");
      });
      // Echoed as given: a text prompt's own text, token ids decoded.
      echoedAsGiven = prompts.map((_, index) => typeof prompt === "string" || (Array.isArray(prompt) && typeof prompt[index] === "string"));
      if (echo) promptTexts = prompts.map((ids, index) => (typeof prompt === "string" ? prompt : echoedAsGiven[index] ? ((prompt as string[])[index] as string) : tokenizer.decode(ids)));
      const maxTokens = body.max_tokens ?? COMPLETIONS_DEFAULT_MAX_TOKENS;
      const constraints = await constraintsFor(engine, body, prompts.length * bestOf);
      handles = submitAll(engine, prompts, bestOf, constraints, (ids) => ({
        ...generationOptions(body),
        ...(segments !== undefined ? { segments } : {}),
        promptIds: segments === undefined ? truncatePrompt(body, ids) : ids,
        maxTokens,
        // Ranking best_of candidates needs their logprobs.
        logprobs: bestOf > n ? (topLogprobs ?? 0) : topLogprobs,
        promptLogprobs: echo && topLogprobs !== null ? topLogprobs : null,
      }));
    } catch (error) {
      return answerError(c, error);
    }
    const id = answerId("cmpl", body);
    const created = Math.floor(Date.now() / 1000);
    const model = engine.modelId;
    const cancelAll = () => handles.forEach((handle) => handle.cancel());
    /** An echoed prompt's tokens: the first without a logprob, the rest with theirs (from the prompt's first sibling). */
    const echoTokens = (promptIds: readonly number[], promptLogprobs: readonly GeneratedToken[] | undefined): GeneratedToken[] => [{ id: promptIds[0]! }, ...(promptLogprobs ?? [])];
    const siblingPromptLogprobs: (GeneratedToken[] | undefined)[] = prompts.map(() => undefined);
    /**
     * text_offset counts characters (code points) of the choice's text: the echoed prompt's tokens
     * within the echo (a prompt given as text has no special tokens in it), then the generated
     * tokens decoded as the engine decodes them (skip_special_tokens, the prompt's last ids as context).
     */
    const echoOffsets = (prompt: number) => new TokenTextOffsets(tokenizer, { skipSpecialTokens: echoedAsGiven[prompt]!, limit: characters(promptTexts[prompt]!) });
    const generatedOffsets = (prompt: number) =>
      new TokenTextOffsets(tokenizer, { skipSpecialTokens: body.skip_special_tokens ?? true, contextIds: truncatePrompt(body, prompts[prompt]!), start: echo ? characters(promptTexts[prompt]!) : 0 });

    if (body.stream) {
      const includeUsage = body.stream_options?.include_usage === true;
      const chunk = (choices: unknown[]) => ({ id, object: "text_completion", created, model, choices, ...(includeUsage ? { usage: null } : {}) });
      return eventStream(
        async (send, fail) => {
          const offsets = handles.map((_, index) => generatedOffsets(Math.floor(index / n)));
          // By choice index: usage takes each prompt's first choice.
          const finished: GenerationFinish[] = new Array(handles.length);
          const echoed = handles.map(() => !echo);
          // The prompt goes first; with logprobs, when its logprobs arrive with the first event.
          const sendEcho = (index: number, promptLogprobs: readonly GeneratedToken[] | undefined) => {
            echoed[index] = true;
            const prompt = Math.floor(index / n);
            const logprobs = topLogprobs === null ? null : completionLogprobs(echoTokens(prompts[prompt]!, promptLogprobs), echoOffsets(prompt));
            send(chunk([{ index, text: promptTexts[prompt], logprobs, finish_reason: null }]));
          };
          if (echo && topLogprobs === null) handles.forEach((_, index) => sendEcho(index, []));
          try {
            const forward = (index: number, event: GenerationEvent) => {
              if (event.type === "delta") {
                if (event.text === "" && topLogprobs === null) return;
                const logprobs = topLogprobs === null ? null : completionLogprobs(event.tokens, offsets[index]!);
                send(chunk([{ index, text: event.text, logprobs, finish_reason: null }]));
              } else {
                finished[index] = event;
                send(chunk([{ index, text: "", logprobs: null, finish_reason: event.reason }]));
              }
            };
            // A sibling's events wait until its prompt's logprobs (from the first sibling) are known.
            const held = new Map<number, GenerationEvent[]>();
            await pumpAll(handles, (index, event) => {
              const prompt = Math.floor(index / n);
              if (event.promptLogprobs !== undefined) siblingPromptLogprobs[prompt] = event.promptLogprobs;
              if (!echoed[index]) {
                if (siblingPromptLogprobs[prompt] === undefined) {
                  held.set(index, [...(held.get(index) ?? []), event]);
                  return;
                }
                sendEcho(index, siblingPromptLogprobs[prompt]);
              }
              forward(index, event);
              if (event.promptLogprobs === undefined) return;
              for (let sibling = prompt * n; sibling < (prompt + 1) * n; sibling++) {
                const waiting = held.get(sibling);
                if (waiting === undefined) continue;
                held.delete(sibling);
                sendEcho(sibling, event.promptLogprobs);
                for (const later of waiting) forward(sibling, later);
              }
            });
            if (includeUsage) send({ ...chunk([]), usage: usageOf(finished, n) });
          } catch (error) {
            fail(error);
          }
          send("[DONE]");
        },
        cancelAll,
        c.req.raw.signal,
        streamOptions,
      );
    }

    c.req.raw.signal.addEventListener("abort", cancelAll);
    try {
      const results = await Promise.all(handles.map((handle) => handle.result()));
      const choices = prompts.flatMap((promptIds, prompt) => {
        const candidates = results.slice(prompt * bestOf, (prompt + 1) * bestOf);
        const chosen = bestOf > n ? bestCandidates(candidates, n) : [...candidates.keys()];
        return chosen.map((candidate, k) => {
          const result = candidates[candidate]!;
          const echoed = echo && topLogprobs !== null ? completionLogprobs(echoTokens(promptIds, candidates[0]!.promptLogprobs), echoOffsets(prompt)) : null;
          const generated = topLogprobs === null ? null : completionLogprobs(result.tokens, generatedOffsets(prompt));
          return {
            index: prompt * n + k,
            text: (echo ? promptTexts[prompt]! : "") + result.text,
            logprobs: generated === null ? null : echoed === null ? generated : joinLogprobs(echoed, generated),
            finish_reason: result.finishReason,
          };
        });
      });
      return c.json({ id, object: "text_completion", created, model, choices, usage: usageOf(results, bestOf) }, 200);
    } catch (error) {
      cancelAll();
      return answerError(c, error);
    }
  }) as never);

  const modelCard = () => ({ id: engine.modelId, object: "model" as const, created: engine.created, owned_by: "ctxr", max_model_len: engine.maxModelLen });
  app.openapi(modelsRoute, (c) => c.json({ object: "list" as const, data: [modelCard()] }, 200));

  // Served model names may hold "/" (--served-model-name org/name): the id is the rest of the path, sent with "/" or "%2F".
  app.get(`${MODEL_PATH_PREFIX}:model{.+}`, (c) => {
    const id = c.req.param("model");
    if (id === engine.modelId) return c.json(modelCard(), 200);
    return errorResponse(c, 404, `model: model ${JSON.stringify(id)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, "model", undefined, "model_not_found");
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/v1/models/{model}",
    tags: ["generation"],
    summary: "The served model's card, by id (OpenAI's models.retrieve)",
    request: { params: z.object({ model: z.string().openapi({ description: 'The model id; one holding "/" may be sent as it is or with "%2F".' }) }) },
    responses: { 200: { description: "The model.", content: { "application/json": { schema: schemas.Model } } }, 404: error("No model of that id is served.") },
  });
}

/** GET /v1/models/{id}: the served model's card by id. */
export const MODEL_PATH_PREFIX = "/v1/models/";

/** Without --model (and without --upstream): the generation paths say how to get a model. */
export function mountNoModelRoutes(app: OpenAPIHono): void {
  const answer = (c: Context) =>
    errorResponse(c, 404, `${c.req.path}: no model is loaded; start ctxr serve with --model DIR to generate (or --upstream URL to proxy an OpenAI-compatible engine)`, "");
  app.post("/v1/chat/completions", answer);
  app.post("/v1/completions", answer);
  app.post("/v1/responses", answer);
  app.get("/v1/models", answer);
  app.get(`${MODEL_PATH_PREFIX}*`, answer);
}
