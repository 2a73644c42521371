/**
 * /v1/stats' `saved_tokens`: the token accounts (tokenAccounts.ts) as one report. The totals add
 * the engine's figures and the upstreams' own usage reports, all in the model's tokens; the
 * proxy's received and forwarded figures are in each upstream's `unit`.
 */
import type { EngineTokenAccount, ProxyTokenUnit, UpstreamTokenAccount } from "./tokenAccounts.ts";

export interface SavedTokensSources {
  engine?: EngineTokenAccount | null;
  upstreams?: readonly { url: string; account: UpstreamTokenAccount }[];
}

/** What the model computed and what came from a cache, in the model's tokens. */
export interface SavedTokensTotals {
  requests: number;
  prompt_tokens: number;
  cached_tokens: number;
  recomputed_tokens: number;
  /** cached_tokens / prompt_tokens (0 before any prompt token). */
  cached_ratio: number;
}

export interface EngineSavedTokens extends SavedTokensTotals {
  prefix_cached_tokens: number;
  chunk_reused_tokens: number;
  /** Prompt tokens computed afresh: prompt_tokens − cached_tokens − recomputed_tokens. */
  computed_tokens: number;
}

export interface UpstreamSavedTokens extends SavedTokensTotals {
  url: string;
  unit: ProxyTokenUnit;
  /** The upstream's usage.completion_tokens. */
  completion_tokens: number;
  prompt_tokens_received: number;
  prompt_tokens_forwarded: number;
  estimated_cached_tokens: number;
  input_order_estimated_cached_tokens: number;
  usage_reports: number;
  cached_tokens_reports: number;
}

export interface SavedTokensReport extends SavedTokensTotals {
  engine?: EngineSavedTokens;
  upstreams?: UpstreamSavedTokens[];
}

function ratio(part: number, whole: number): number {
  return whole === 0 ? 0 : part / whole;
}

export function engineSavedTokens(account: EngineTokenAccount): EngineSavedTokens {
  const cached = account.cachedTokens;
  return {
    requests: account.requests,
    prompt_tokens: account.promptTokens,
    cached_tokens: cached,
    recomputed_tokens: account.recomputedTokens,
    cached_ratio: ratio(cached, account.promptTokens),
    prefix_cached_tokens: account.prefixCachedTokens,
    chunk_reused_tokens: account.chunkReusedTokens,
    computed_tokens: account.promptTokens - cached - account.recomputedTokens,
  };
}

export function upstreamSavedTokens(url: string, account: UpstreamTokenAccount): UpstreamSavedTokens {
  return {
    url,
    unit: account.unit,
    requests: account.requests,
    prompt_tokens: account.promptTokens,
    cached_tokens: account.cachedTokens,
    recomputed_tokens: account.recomputedTokens,
    cached_ratio: ratio(account.cachedTokens, account.promptTokens),
    completion_tokens: account.completionTokens,
    prompt_tokens_received: account.promptTokensReceived,
    prompt_tokens_forwarded: account.promptTokensForwarded,
    estimated_cached_tokens: account.estimatedCachedTokens,
    input_order_estimated_cached_tokens: account.inputOrderCachedTokens,
    usage_reports: account.usageReports,
    cached_tokens_reports: account.cachedTokensReports,
  };
}

export function savedTokensReport(sources: SavedTokensSources): SavedTokensReport {
  const engine = sources.engine ? engineSavedTokens(sources.engine) : undefined;
  const upstreams = sources.upstreams?.map(({ url, account }) => upstreamSavedTokens(url, account));
  const parts: SavedTokensTotals[] = [...(engine ? [engine] : []), ...(upstreams ?? [])];
  const sum = (field: "requests" | "prompt_tokens" | "cached_tokens" | "recomputed_tokens") => parts.reduce((total, part) => total + part[field], 0);
  const prompt = sum("prompt_tokens");
  const cached = sum("cached_tokens");
  return {
    requests: sum("requests"),
    prompt_tokens: prompt,
    cached_tokens: cached,
    recomputed_tokens: sum("recomputed_tokens"),
    cached_ratio: ratio(cached, prompt),
    ...(engine ? { engine } : {}),
    ...(upstreams ? { upstreams } : {}),
  };
}
