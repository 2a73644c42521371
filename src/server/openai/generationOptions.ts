/**
 * A generation request's body mapped to the engine's options: sampling, stops, penalties and
 * logit bias, the KV-management extension (`ctxr`), and vLLM's prompt truncation. Pure: no checks
 * beyond the schema's, no engine.
 */
import type { RecomputePolicy } from "../../kv/recomputeSelection.ts";
import type { SamplingParams } from "../../engine/sampler.ts";
import type { LogitsAdjustments } from "../../engine/logitsAdjuster.ts";
import type { ChatCompletionBody, CompletionBody } from "../openaiSchemas.ts";

/** The prompt's last truncate_prompt_tokens tokens (vLLM's truncation), or all of it. */
export function truncatePrompt(body: ChatCompletionBody | CompletionBody, ids: number[]): number[] {
  const keep = body.truncate_prompt_tokens;
  return keep == null || ids.length <= keep ? ids : ids.slice(ids.length - keep);
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

export function stopStrings(body: ChatCompletionBody | CompletionBody): string[] {
  const stop = body.stop;
  if (stop === undefined || stop === null) return [];
  return typeof stop === "string" ? [stop] : stop;
}
