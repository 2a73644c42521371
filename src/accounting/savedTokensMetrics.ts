/** The saved-token report as Prometheus families (the same figures as /v1/stats' `saved_tokens`). */
import { metricFamily } from "../http/prometheus.ts";
import type { SavedTokensReport } from "./savedTokensReport.ts";

export function renderSavedTokensMetrics(report: SavedTokensReport): string {
  const total = (name: string, help: string, value: number) => metricFamily(name, "counter", help, [{ value }]);
  let out =
    total("ctxr_saved_tokens_requests_total", "Requests accounted: finished by the engine, or accepted by an upstream.", report.requests) +
    total("ctxr_saved_tokens_prompt_total", "Prompt tokens, in the model's tokens (the engine's count, or the upstreams' usage.prompt_tokens).", report.prompt_tokens) +
    total("ctxr_saved_tokens_cached_total", "Prompt tokens whose KV came from a cache (prefix cache or reused chunks).", report.cached_tokens) +
    total("ctxr_saved_tokens_recomputed_total", "Prompt tokens of reused chunks run again to repair their KV.", report.recomputed_tokens);
  const engine = report.engine;
  if (engine !== undefined) {
    out +=
      total("ctxr_engine_prompt_tokens_total", "Prompt tokens of the requests the engine finished.", engine.prompt_tokens) +
      total("ctxr_engine_cached_tokens_total", "Prompt tokens the engine took from a cache (prefix and chunks), per finished request.", engine.cached_tokens) +
      total("ctxr_engine_prefix_cached_tokens_total", "Prompt tokens the engine took from the prefix cache (usage.prompt_tokens_details.cached_tokens).", engine.prefix_cached_tokens) +
      total("ctxr_engine_chunk_reused_tokens_total", "Prompt tokens of cached chunks the engine reused at another position.", engine.chunk_reused_tokens) +
      total("ctxr_engine_recomputed_tokens_total", "Prompt tokens the engine recomputed in reused chunks.", engine.recomputed_tokens) +
      total("ctxr_engine_computed_tokens_total", "Prompt tokens the engine computed afresh.", engine.computed_tokens);
  }
  const upstreams = report.upstreams ?? [];
  if (upstreams.length > 0) {
    const family = (name: string, help: string, value: (u: (typeof upstreams)[number]) => number) =>
      metricFamily(name, "counter", help, upstreams.map((u) => ({ labels: { upstream: u.url }, value: value(u) })));
    out +=
      family("ctxr_upstream_prompt_tokens_received_total", "Prompt tokens of the requests as clients sent them (unit: ctxr_upstream_token_unit).", (u) => u.prompt_tokens_received) +
      family("ctxr_upstream_prompt_tokens_forwarded_total", "Prompt tokens of the requests as forwarded (unit: ctxr_upstream_token_unit).", (u) => u.prompt_tokens_forwarded) +
      family("ctxr_upstream_estimated_cached_tokens_total", "Prompt tokens the live index expected the upstream to have cached, in the order sent.", (u) => u.estimated_cached_tokens) +
      family("ctxr_upstream_input_order_estimated_cached_tokens_total", "The same estimate for the documents in the order the clients sent them.", (u) => u.input_order_estimated_cached_tokens) +
      family("ctxr_upstream_prompt_tokens_total", "Prompt tokens the upstream reported (usage.prompt_tokens).", (u) => u.prompt_tokens) +
      family("ctxr_upstream_completion_tokens_total", "Completion tokens the upstream reported (usage.completion_tokens; streamed answers too).", (u) => u.completion_tokens) +
      family("ctxr_upstream_cached_tokens_total", "Cached prompt tokens the upstream reported (usage.prompt_tokens_details.cached_tokens, plus a ctxr engine's reused chunks).", (u) => u.cached_tokens) +
      family("ctxr_upstream_recomputed_tokens_total", "Recomputed prompt tokens a ctxr upstream reported (usage.ctxr).", (u) => u.recomputed_tokens) +
      family("ctxr_upstream_usage_reports_total", "Answers whose usage report was read.", (u) => u.usage_reports) +
      metricFamily("ctxr_upstream_token_unit", "gauge", "1 for the unit the received and forwarded figures are counted in: tokenizer (--tokenizer) or estimate (4 characters a token).", upstreams.map((u) => ({ labels: { upstream: u.url, unit: u.unit }, value: 1 })));
  }
  return out;
}
