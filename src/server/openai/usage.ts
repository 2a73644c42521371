/** The `usage` object of an answer, from its finished generations. */
import type { CtxrUsage } from "../../engine/generationTypes.ts";

/**
 * usage over the choices (with `reasoning`, OpenAI's completion_tokens_details.reasoning_tokens:
 * the generated tokens of the answers' reasoning): completion tokens of every choice; each prompt counted once, with the
 * prompt usage (usage.ctxr, cached_tokens) of its first choice — with `n` > 1 the first sibling
 * computes the prompt and the others start from its cached blocks; ttft_ms and queue_ms: the largest.
 */
export function usageOf(results: readonly { promptTokens: number; completionTokens: number; reasoningTokens?: number; ctxr?: CtxrUsage }[], choicesPerPrompt = 1, reasoning = false) {
  const completion = results.reduce((n, r) => n + r.completionTokens, 0);
  const details = reasoning ? { completion_tokens_details: { reasoning_tokens: results.reduce((n, r) => n + (r.reasoningTokens ?? 0), 0) } } : {};
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
    if (u.recompute_ratio !== undefined) ctxr.recompute_ratio = u.recompute_ratio;
    if (u.chunks_unscored !== undefined) ctxr.chunks_unscored = (ctxr.chunks_unscored ?? 0) + u.chunks_unscored;
    if (u.sparse_decode_steps !== undefined) ctxr.sparse_decode_steps = (ctxr.sparse_decode_steps ?? 0) + u.sparse_decode_steps;
    if (u.sparse_reconstructions !== undefined) ctxr.sparse_reconstructions = (ctxr.sparse_reconstructions ?? 0) + u.sparse_reconstructions;
  }
  ctxr.ttft_ms = ttft;
  ctxr.queue_ms = queued;
  // cached_tokens (what OpenAI, vLLM and SGLang clients read): prompt tokens whose KV came from the cache as an exact prefix.
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: ctxr.prompt_tokens_prefix_reused }, ...details, ctxr };
}
