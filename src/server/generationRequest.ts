/**
 * What the generation routes share before generating: a request the engine cannot serve
 * (InvalidRequest, a 400 naming the field), the body's sampling, stop, penalty and KV options,
 * the structured-output and tool-call constraints, submitting the prompts to the engine, and the
 * usage of the finished generations. Used by /v1/chat/completions, /v1/completions
 * (openaiRoutes.ts) and /v1/responses (responses/) alike.
 */
import type { GenerationEngine } from "../engine/generationEngine.ts";
import { PromptTooLongError } from "../engine/generationErrors.ts";
import type { GenerationHandle } from "../engine/generationHandle.ts";
import type { CtxrUsage } from "../engine/generationTypes.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import { SamplingError, type SamplingParams } from "../engine/sampler.ts";
import { LogitsAdjustmentError, type LogitsAdjustments } from "../engine/logitsAdjuster.ts";
import { refusedField, type Endpoint } from "./requestFields.ts";
import type { GrammarConstraint } from "../engine/grammarConstraint.ts";
import { GrammarSpecError, grammarSpecOf, type GrammarFields, type RequestedGrammar } from "../engine/grammarSpec.ts";
import type { ToolCallFormat } from "../engine/toolCalls/toolCallFormat.ts";
import type { ToolRequest } from "../engine/toolCalls/toolRequest.ts";
import type { ChatCompletionBody, CompletionBody } from "./openaiSchemas.ts";

/** A request the engine cannot serve as asked: 400 (or `status`) naming the field; `code`: the error body's (errors.ts picks one by default). */
export class InvalidRequest extends Error {
  constructor(
    readonly field: string,
    message: string,
    readonly status: 400 | 404 = 400,
    readonly code?: string,
  ) {
    super(`${field}: ${message}`);
  }
}

export function requestId(prefix: string): string {
  return `${prefix}-${crypto.randomUUID().replace(/-/g, "")}`;
}

/** Most choices (`n`) one prompt may ask for. */
export const MAX_CHOICES_PER_PROMPT = 64;

export function choicesPerPrompt(body: ChatCompletionBody | CompletionBody): number {
  return body.n ?? 1;
}

/** Fields OpenAI defines that this engine cannot honour. */
export function refuseUnsupported(body: ChatCompletionBody | CompletionBody, endpoint: Endpoint): void {
  const refusal = refusedField(body as Record<string, unknown>, endpoint);
  if (refusal !== null) throw new InvalidRequest(refusal.field, refusal.why);
  if (choicesPerPrompt(body) > MAX_CHOICES_PER_PROMPT) throw new InvalidRequest("n", `at most ${MAX_CHOICES_PER_PROMPT} choices per prompt, got ${body.n}`);
  const maxTokens = ("max_completion_tokens" in body ? body.max_completion_tokens : null) ?? body.max_tokens;
  if (body.min_tokens != null && maxTokens != null && body.min_tokens > maxTokens) throw new InvalidRequest("min_tokens", `must not exceed max_tokens (${maxTokens}), got ${body.min_tokens}`);
}

/** The prompt's last truncate_prompt_tokens tokens (vLLM's truncation), or all of it. */
export function truncatePrompt(body: ChatCompletionBody | CompletionBody, ids: number[]): number[] {
  const keep = body.truncate_prompt_tokens;
  return keep == null || ids.length <= keep ? ids : ids.slice(ids.length - keep);
}

/** The answer's id: from the request's request_id when it gives one (vLLM), else random. */
export function answerId(prefix: string, body: ChatCompletionBody | CompletionBody): string {
  return body.request_id != null ? `${prefix}-${body.request_id}` : requestId(prefix);
}

export function samplingParams(body: ChatCompletionBody | CompletionBody): SamplingParams {
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
export function logitsAdjustments(body: ChatCompletionBody | CompletionBody): LogitsAdjustments {
  return {
    ...(body.repetition_penalty != null ? { repetitionPenalty: body.repetition_penalty } : {}),
    ...(body.frequency_penalty != null ? { frequencyPenalty: body.frequency_penalty } : {}),
    ...(body.presence_penalty != null ? { presencePenalty: body.presence_penalty } : {}),
    ...(body.logit_bias != null ? { logitBias: new Map(Object.entries(body.logit_bias).map(([id, bias]) => [Number(id), bias])) } : {}),
    ...(body.allowed_token_ids != null ? { allowedTokenIds: body.allowed_token_ids } : {}),
  };
}

/** What every generation request of the body shares: sampling, stops, penalties, KV options. */
export function generationOptions(body: ChatCompletionBody | CompletionBody) {
  return {
    ...kvOptions(body),
    sampling: samplingParams(body),
    stop: stopStrings(body),
    stopTokenIds: body.stop_token_ids ?? [],
    includeStopInOutput: body.include_stop_str_in_output ?? false,
    ...(body.min_tokens != null ? { minTokens: body.min_tokens } : {}),
    ...(body.cache_salt != null ? { cacheSalt: body.cache_salt } : {}),
    ...(body.ctxr?.deadline_ms != null ? { deadlineMs: body.ctxr.deadline_ms } : {}),
    adjustments: logitsAdjustments(body),
    ignoreEos: body.ignore_eos ?? false,
    skipSpecialTokens: body.skip_special_tokens ?? true,
  };
}

/** The request's KV-management options (the `ctxr` extension). */
export function kvOptions(body: ChatCompletionBody | CompletionBody): { kvPolicy?: RecomputePolicy; recomputeRatio?: number; kvBudget?: number } {
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
 * computes the prompt and the others start from its cached blocks; ttft_ms and queue_ms: the largest.
 */
export function usageOf(results: readonly { promptTokens: number; completionTokens: number; ctxr?: CtxrUsage }[], choicesPerPrompt = 1) {
  const completion = results.reduce((n, r) => n + r.completionTokens, 0);
  const ttft = results.reduce((most, r) => Math.max(most, r.ctxr?.ttft_ms ?? 0), 0);
  const queued = results.reduce((most, r) => Math.max(most, r.ctxr?.queue_ms ?? 0), 0);
  results = results.filter((_, index) => index % choicesPerPrompt === 0);
  const prompt = results.reduce((n, r) => n + r.promptTokens, 0);
  const ctxr: CtxrUsage = { prompt_tokens_prefix_reused: 0, prompt_tokens_chunk_reused: 0, prompt_tokens_recomputed: 0, prompt_tokens_computed: 0, ttft_ms: 0, queue_ms: 0 };
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
  ctxr.queue_ms = queued;
  // cached_tokens (what OpenAI, vLLM and SGLang clients read): prompt tokens whose KV came from the cache as an exact prefix.
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: ctxr.prompt_tokens_prefix_reused }, ctxr };
}

export function stopStrings(body: ChatCompletionBody | CompletionBody): string[] {
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
export function submitAll(
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

/**
 * Checks the prompt's length (and max_tokens) against the context before anything costly is built
 * for the request (a tool list's grammar): the same 400 the engine would give when it is queued.
 */
export function checkPromptFits(engine: GenerationEngine, promptLength: number, maxTokens: number | null | undefined): void {
  try {
    engine.scheduler.checkLength(promptLength, maxTokens);
  } catch (error) {
    if (error instanceof PromptTooLongError) throw new InvalidRequest(error.field, error.message, 400, error.overLength ? "context_length_exceeded" : undefined);
    throw error;
  }
}

/** Formats whose markers are special tokens: the text must keep them for the parser to see them. */
export const SPECIAL_MARKERS = new Set<ToolCallFormat>(["mistral", "llama3_json"]);

/** A GrammarSpecError as the 400 naming its field; anything else as it is. */
export function asInvalidRequest(error: unknown): unknown {
  return error instanceof GrammarSpecError ? new InvalidRequest(error.field, error.message) : error;
}

/** The body's output constraint (null: free text), a malformed one as a 400. */
export function requestedOutput(body: GrammarFields): RequestedGrammar | null {
  try {
    return grammarSpecOf(body);
  } catch (error) {
    throw asInvalidRequest(error);
  }
}

/** `count` constraints from `make`; on failure (a 400 for a grammar that does not compile) none is left undisposed. */
export async function makeConstraints(count: number, make: () => Promise<GrammarConstraint>): Promise<GrammarConstraint[]> {
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
export async function toolConstraintsFor(engine: GenerationEngine, body: GrammarFields, tools: ToolRequest, count: number): Promise<GrammarConstraint[]> {
  const output = requestedOutput(body);
  if (output !== null) throw new InvalidRequest(output.field, 'an output format cannot be combined with tools the model may call; use tool_choice "none", or leave one out');
  const request = { format: tools.format, tools: tools.tools.map((tool) => tool.function), choice: tools.choice!, parallel: tools.parallel };
  return makeConstraints(count, () => engine.grammar.toolCallConstraint(request, "tool_choice"));
}

/** One grammar constraint per choice when the body asks for structured output (none otherwise). */
export async function constraintsFor(engine: GenerationEngine, body: GrammarFields, count: number): Promise<GrammarConstraint[]> {
  const requested = requestedOutput(body);
  return requested === null ? [] : makeConstraints(count, () => engine.grammar.constraint(requested));
}

/** A model other than the served one: 404 naming `model`. */
export function checkServedModel(engine: GenerationEngine, model: string | undefined | null): void {
  if (model !== undefined && model !== null && model !== "" && model !== engine.modelId) {
    throw new InvalidRequest("model", `model ${JSON.stringify(model)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, 404);
  }
}
