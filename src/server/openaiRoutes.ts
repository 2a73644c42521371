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
import { requestChatMessages } from "../engine/chatMessages.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import { GenerationFailedError, PromptTooLongError, SchedulerClosedError, type CtxrUsage, type GeneratedToken, type GenerationEvent, type GenerationHandle } from "../engine/generationScheduler.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import { SegmentedPromptError, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { ChatTemplateError, ModelTokenizerError } from "../model/modelTokenizer.ts";
import { SamplingError, type SamplingParams } from "../engine/sampler.ts";
import { LogitsAdjustmentError, type LogitsAdjustments } from "../engine/logitsAdjuster.ts";
import { errorBody, errorResponse, type ApiErrorBody } from "./errors.ts";
import { bestCandidates } from "./bestOf.ts";
import { refusedField, type Endpoint } from "./requestFields.ts";
import type { GrammarConstraint } from "../engine/grammarConstraint.ts";
import { GrammarSpecError, grammarSpecOf, type GrammarFields, type RequestedGrammar } from "../engine/grammarSpec.ts";
import type { ToolCallFormat } from "../engine/toolCalls/toolCallFormat.ts";
import { ToolCallAnswerStream, wholeToolCallAnswer } from "../engine/toolCalls/toolCallAnswer.ts";
import type { ToolCallPiece } from "../engine/toolCalls/parsedToolCall.ts";
import { ToolRequestError, toolRequestOf, type ToolRequest } from "../engine/toolCalls/toolRequest.ts";
import { depthProblem } from "./jsonDepth.ts";
import { TokenTextOffsets } from "../engine/tokenTextOffsets.ts";
import { DEFAULT_LIMITS } from "./limits.ts";
import { createOpenAiSchemas, type ChatCompletionBody, type CompletionBody } from "./openaiSchemas.ts";

export const GENERATION_PATHS: ReadonlyMap<string, string[]> = new Map([
  ["/v1/chat/completions", ["POST"]],
  ["/v1/completions", ["POST"]],
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
}

/** A request the engine cannot serve as asked: 400 (or `status`) naming the field; `code`: the error body's (errors.ts picks one by default). */
class InvalidRequest extends Error {
  constructor(
    readonly field: string,
    message: string,
    readonly status: 400 | 404 = 400,
    readonly code?: string,
  ) {
    super(`${field}: ${message}`);
  }
}

function requestId(prefix: string): string {
  return `${prefix}-${crypto.randomUUID().replace(/-/g, "")}`;
}

function clampLogprob(value: number): number {
  return Math.max(value, LOGPROB_FLOOR);
}

type GenerationFinish = Extract<GenerationEvent, { type: "finish" }>;

/** Most choices (`n`) one prompt may ask for. */
const MAX_CHOICES_PER_PROMPT = 64;

function choicesPerPrompt(body: ChatCompletionBody | CompletionBody): number {
  return body.n ?? 1;
}

/** Fields OpenAI defines that this engine cannot honour. */
function refuseUnsupported(body: ChatCompletionBody | CompletionBody, endpoint: Endpoint): void {
  const refusal = refusedField(body as Record<string, unknown>, endpoint);
  if (refusal !== null) throw new InvalidRequest(refusal.field, refusal.why);
  if (choicesPerPrompt(body) > MAX_CHOICES_PER_PROMPT) throw new InvalidRequest("n", `at most ${MAX_CHOICES_PER_PROMPT} choices per prompt, got ${body.n}`);
  const maxTokens = ("max_completion_tokens" in body ? body.max_completion_tokens : null) ?? body.max_tokens;
  if (body.min_tokens != null && maxTokens != null && body.min_tokens > maxTokens) throw new InvalidRequest("min_tokens", `must not exceed max_tokens (${maxTokens}), got ${body.min_tokens}`);
}

/** The prompt's last truncate_prompt_tokens tokens (vLLM's truncation), or all of it. */
function truncatePrompt(body: ChatCompletionBody | CompletionBody, ids: number[]): number[] {
  const keep = body.truncate_prompt_tokens;
  return keep == null || ids.length <= keep ? ids : ids.slice(ids.length - keep);
}

/** The answer's id: from the request's request_id when it gives one (vLLM), else random. */
function answerId(prefix: string, body: ChatCompletionBody | CompletionBody): string {
  return body.request_id != null ? `${prefix}-${body.request_id}` : requestId(prefix);
}

function samplingParams(body: ChatCompletionBody | CompletionBody): SamplingParams {
  const topK = body.top_k ?? 0;
  return {
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    topK: topK < 0 ? 0 : topK,
    ...(body.seed !== undefined && body.seed !== null ? { seed: body.seed } : {}),
    ...(body.min_p !== undefined && body.min_p !== null ? { minP: body.min_p } : {}),
  };
}

/** Penalties and logit bias (applied to the logits before sampling). */
function logitsAdjustments(body: ChatCompletionBody | CompletionBody): LogitsAdjustments {
  return {
    ...(body.repetition_penalty != null ? { repetitionPenalty: body.repetition_penalty } : {}),
    ...(body.frequency_penalty != null ? { frequencyPenalty: body.frequency_penalty } : {}),
    ...(body.presence_penalty != null ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.logit_bias != null ? { logitBias: new Map(Object.entries(body.logit_bias).map(([id, bias]) => [Number(id), bias])) } : {}),
    ...(body.allowed_token_ids != null ? { allowedTokenIds: body.allowed_token_ids } : {}),
  };
}

/** What every generation request of the body shares: sampling, stops, penalties, KV options. */
function generationOptions(body: ChatCompletionBody | CompletionBody) {
  return {
    ...kvOptions(body),
    sampling: samplingParams(body),
    stop: stopStrings(body),
    stopTokenIds: body.stop_token_ids ?? [],
    includeStopInOutput: body.include_stop_str_in_output ?? false,
    ...(body.min_tokens != null ? { minTokens: body.min_tokens } : {}),
    ...(body.cache_salt != null ? { cacheSalt: body.cache_salt } : {}),
    adjustments: logitsAdjustments(body),
    ignoreEos: body.ignore_eos ?? false,
    skipSpecialTokens: body.skip_special_tokens ?? true,
  };
}

/** The request's KV-management options (the `ctxr` extension). */
function kvOptions(body: ChatCompletionBody | CompletionBody): { kvPolicy?: RecomputePolicy; recomputeRatio?: number; kvBudget?: number } {
  const options = body.ctxr ?? {};
  return {
    ...(options.policy !== undefined ? { kvPolicy: options.policy } : {}),
    ...(options.recompute_ratio !== undefined ? { recomputeRatio: options.recompute_ratio } : {}),
    ...(options.kv_budget !== undefined ? { kvBudget: options.kv_budget } : {}),
  };
}

/**
 * usage over the choices: completion tokens of every choice; each prompt counted once, with the
 * prompt usage (usage.ctxr, cached_tokens) of its first choice — with `n` > 1 the first sibling
 * computes the prompt and the others start from its cached blocks; ttft_ms: the largest.
 */
function usageOf(results: readonly { promptTokens: number; completionTokens: number; ctxr?: CtxrUsage }[], choicesPerPrompt = 1) {
  const completion = results.reduce((n, r) => n + r.completionTokens, 0);
  const ttft = results.reduce((most, r) => Math.max(most, r.ctxr?.ttft_ms ?? 0), 0);
  results = results.filter((_, index) => index % choicesPerPrompt === 0);
  const prompt = results.reduce((n, r) => n + r.promptTokens, 0);
  const ctxr: CtxrUsage = { prompt_tokens_prefix_reused: 0, prompt_tokens_chunk_reused: 0, prompt_tokens_recomputed: 0, prompt_tokens_computed: 0, ttft_ms: 0 };
  for (const r of results) {
    const u = r.ctxr;
    if (u === undefined) continue;
    ctxr.prompt_tokens_prefix_reused += u.prompt_tokens_prefix_reused;
    ctxr.prompt_tokens_chunk_reused += u.prompt_tokens_chunk_reused;
    ctxr.prompt_tokens_recomputed += u.prompt_tokens_recomputed;
    ctxr.prompt_tokens_computed += u.prompt_tokens_computed;
    if (u.tier_hits !== undefined) {
      const hits = (ctxr.tier_hits ??= { device: 0, host: 0, disk: 0 });
      for (const tier of ["device", "host", "disk"] as const) hits[tier] += u.tier_hits[tier];
      if (u.tier_hits.remote !== undefined) hits.remote = (hits.remote ?? 0) + u.tier_hits.remote;
    }
    if (u.policy !== undefined) ctxr.policy = u.policy;
    if (u.sparse_decode_steps !== undefined) ctxr.sparse_decode_steps = (ctxr.sparse_decode_steps ?? 0) + u.sparse_decode_steps;
    if (u.sparse_reconstructions !== undefined) ctxr.sparse_reconstructions = (ctxr.sparse_reconstructions ?? 0) + u.sparse_reconstructions;
  }
  ctxr.ttft_ms = ttft;
  // cached_tokens (what OpenAI, vLLM and SGLang clients read): prompt tokens whose KV came from the cache as an exact prefix.
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: ctxr.prompt_tokens_prefix_reused }, ctxr };
}

function stopStrings(body: ChatCompletionBody | CompletionBody): string[] {
  const stop = body.stop;
  if (stop === undefined || stop === null) return [];
  return typeof stop === "string" ? [stop] : stop;
}


/**
 * Submits every prompt, `n` times each (choice index = prompt index · n + k; sibling k > 0 of a
 * seeded request samples with seed + k, so the choices differ); if one is refused, the ones
 * already queued are cancelled. Siblings are queued together, so the first computes the prompt
 * and the others start from its blocks (generationScheduler.ts: shared prefixes computed once).
 */
function submitAll(
  engine: GenerationEngine,
  prompts: number[][],
  n: number,
  constraints: readonly GrammarConstraint[],
  build: (promptIds: number[]) => Parameters<GenerationEngine["generate"]>[0],
): GenerationHandle[] {
  const handles: GenerationHandle[] = [];
  try {
    prompts.forEach((promptIds, index) => {
      try {
        const request = build(promptIds);
        for (let k = 0; k < n; k++) {
          const seed = request.sampling.seed;
          const constraint = constraints[handles.length];
          // Prompt logprobs come from the first sibling (the others start from its cached blocks).
          const sibling = k === 0 ? request : { ...request, promptLogprobs: null, sampling: seed === undefined ? request.sampling : { ...request.sampling, seed: seed + k } };
          handles.push(engine.generate(constraint === undefined ? sibling : { ...sibling, constraint }));
        }
      } catch (error) {
        if (error instanceof PromptTooLongError) {
          const field = error.field === "prompt" && prompts.length > 1 ? `prompt[${index}]` : error.field;
          throw new InvalidRequest(field, error.message, 400, error.overLength ? "context_length_exceeded" : undefined);
        }
        if (error instanceof SamplingError) throw new InvalidRequest("body", error.message);
        if (error instanceof LogitsAdjustmentError) throw new InvalidRequest(error.field, error.message);
        throw error;
      }
    });
  } catch (error) {
    for (const handle of handles) handle.cancel();
    for (const constraint of constraints.slice(handles.length)) constraint.dispose();
    throw error;
  }
  return handles;
}

/** Formats whose markers are special tokens: the text must keep them for the parser to see them. */
const SPECIAL_MARKERS = new Set<ToolCallFormat>(["mistral", "llama3_json"]);

function toolCallId(): string {
  return `call_${crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`;
}

/** A GrammarSpecError as the 400 naming its field; anything else as it is. */
function asInvalidRequest(error: unknown): unknown {
  return error instanceof GrammarSpecError ? new InvalidRequest(error.field, error.message) : error;
}

/** The body's output constraint (null: free text), a malformed one as a 400. */
function requestedOutput(body: GrammarFields): RequestedGrammar | null {
  try {
    return grammarSpecOf(body);
  } catch (error) {
    throw asInvalidRequest(error);
  }
}

/** `count` constraints from `make`; on failure (a 400 for a grammar that does not compile) none is left undisposed. */
async function makeConstraints(count: number, make: () => Promise<GrammarConstraint>): Promise<GrammarConstraint[]> {
  const made: GrammarConstraint[] = [];
  try {
    for (let i = 0; i < count; i++) made.push(await make());
    return made;
  } catch (error) {
    for (const constraint of made) constraint.dispose();
    throw asInvalidRequest(error);
  }
}

/** One tool-call constraint per choice; a response format next to tools that may be called is refused. */
async function toolConstraintsFor(engine: GenerationEngine, body: GrammarFields, tools: ToolRequest, count: number): Promise<GrammarConstraint[]> {
  const output = requestedOutput(body);
  if (output !== null) throw new InvalidRequest(output.field, 'an output format cannot be combined with tools the model may call; use tool_choice "none", or leave one out');
  const request = { format: tools.format, tools: tools.tools.map((tool) => tool.function), choice: tools.choice!, parallel: tools.parallel };
  return makeConstraints(count, () => engine.grammar.toolCallConstraint(request, "tool_choice"));
}

/** One grammar constraint per choice when the body asks for structured output (none otherwise). */
async function constraintsFor(engine: GenerationEngine, body: GrammarFields, count: number): Promise<GrammarConstraint[]> {
  const requested = requestedOutput(body);
  return requested === null ? [] : makeConstraints(count, () => engine.grammar.constraint(requested));
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

const encoder = new TextEncoder();

/** A text/event-stream response fed by `run`; cancelling it (client gone) calls onCancel. */
function eventStream(run: (send: (data: unknown) => void) => Promise<void>, onCancel: () => void, signal: AbortSignal): Response {
  let closed = false;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const send = (data: unknown) => {
        if (closed) return;
        controller.enqueue(encoder.encode(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`));
      };
      void run(send).finally(() => {
        if (closed) return;
        closed = true;
        try {
          controller.close();
        } catch {
          // cancelled meanwhile
        }
      });
    },
    cancel() {
      closed = true;
      onCancel();
    },
  });
  signal.addEventListener("abort", () => {
    closed = true;
    onCancel();
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" } });
}

/** What a failed generation answers: the message of the failure. */
function failureMessage(error: unknown): string {
  if (error instanceof GenerationFailedError || error instanceof SchedulerClosedError) return error.message;
  return `generation failed: ${(error as Error).message ?? String(error)}`;
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

/** The status of a failed generation: 503 when the engine is shutting down, else 500. */
function failureStatus(error: unknown): 500 | 503 {
  return error instanceof SchedulerClosedError ? 503 : 500;
}

/** The event that ends a stream whose generation failed: the error body a non-streamed request would get. */
function streamFailure(error: unknown): ApiErrorBody {
  return errorBody(failureMessage(error), "", failureStatus(error));
}

export function mountGenerationRoutes(app: OpenAPIHono, engine: GenerationEngine, options: GenerationRouteOptions): void {
  const schemas = createOpenAiSchemas();
  const { tokenizer } = engine;
  const maxJsonDepth = options.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth;
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const errors = {
    400: error('Invalid input ("field" names it): a wrong type or value, an unsupported option, a prompt longer than the model and KV cache hold.'),
    ...(options.secured ? { 401: error("Missing or wrong API key.") } : {}),
    404: error("The request names another model than the one served."),
    413: error("The request body is larger than the server's --max-body-bytes."),
    500: error("The model runner failed (it is restarted; the request was not completed)."),
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

  const checkModel = (model: string | undefined) => {
    if (model !== undefined && model !== "" && model !== engine.modelId) {
      throw new InvalidRequest("model", `model ${JSON.stringify(model)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, 404);
    }
  };

  const answerError = (c: Context, error: unknown): Response => {
    if (error instanceof InvalidRequest) return errorResponse(c, error.status, error.message, error.field, undefined, error.code);
    if (error instanceof GenerationFailedError || error instanceof SchedulerClosedError) return errorResponse(c, failureStatus(error), error.message);
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
      checkModel(body.model);
      refuseUnsupported(body, "chat");
      try {
        tools = toolRequestOf(body, tokenizer.chatTemplateSource, engine.toolCallFormat);
      } catch (error) {
        if (error instanceof ToolRequestError) throw new InvalidRequest(error.field, error.message);
        throw error;
      }
      if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.logprobs !== true) throw new InvalidRequest("top_logprobs", 'needs "logprobs": true');
      topLogprobs = body.logprobs === true ? (body.top_logprobs ?? 0) : null;
      const messages = requestChatMessages(body.messages, (field, message) => new InvalidRequest(field, message));
      let promptIds: number[];
      let segments: SegmentedPrompt | undefined;
      try {
        const templateOptions = {
          ...(body.chat_template_kwargs ? { templateKwargs: body.chat_template_kwargs } : {}),
          ...(body.add_generation_prompt != null ? { addGenerationPrompt: body.add_generation_prompt } : {}),
          ...(tools !== null ? { tools: tools.tools } : {}),
        };
        if (body.documents && body.documents.length > 0) {
          segments = engine.chatSegments(messages, body.documents, templateOptions);
          promptIds = engine.segmentIds(segments);
        } else {
          promptIds = engine.chatPromptIds(messages, templateOptions);
        }
      } catch (error) {
        if (error instanceof ChatTemplateError || error instanceof ModelTokenizerError) throw new InvalidRequest("messages", error.message);
        if (error instanceof SegmentedPromptError) throw new InvalidRequest(error.field, error.message);
        throw error;
      }
      const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? null;
      const constraints = tools !== null && tools.choice !== null ? await toolConstraintsFor(engine, body, tools, choicesPerPrompt(body)) : await constraintsFor(engine, body, choicesPerPrompt(body));
      const toolOptions = tools !== null && tools.choice !== null && SPECIAL_MARKERS.has(tools.format) ? { skipSpecialTokens: false } : {};
      handles = submitAll(engine, [promptIds], choicesPerPrompt(body), constraints, (ids) => ({
        ...generationOptions(body),
        ...toolOptions,
        ...(segments !== undefined ? { segments } : {}),
        promptIds: segments === undefined ? truncatePrompt(body, ids) : ids,
        maxTokens,
        logprobs: topLogprobs,
      }));
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
        async (send) => {
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
            send(streamFailure(error));
          }
          send("[DONE]");
        },
        cancelAll,
        c.req.raw.signal,
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
          segments = engine.completionSegments(body.segments);
        } catch (error) {
          if (error instanceof SegmentedPromptError) throw new InvalidRequest(error.field, error.message);
          throw error;
        }
        prompts = [engine.segmentIds(segments)];
      } else if (prompt === undefined) throw new InvalidRequest("prompt", "required (or give segments)");
      else if (typeof prompt === "string") prompts = [engine.completionPromptIds(prompt)];
      else if (prompt.length > 0 && typeof prompt[0] === "number") prompts = [prompt as number[]];
      else if (prompt.length > 0 && typeof prompt[0] === "string") prompts = (prompt as string[]).map((text) => engine.completionPromptIds(text));
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
        async (send) => {
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
            send(streamFailure(error));
          }
          send("[DONE]");
        },
        cancelAll,
        c.req.raw.signal,
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
  app.get("/v1/models", answer);
  app.get(`${MODEL_PATH_PREFIX}*`, answer);
}
