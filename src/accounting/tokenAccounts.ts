/**
 * The running token accounts of what ctxr saved: one for the built-in engine (fed as each request
 * finishes, in the model's own tokens) and one per upstream of the proxy (fed as a request is
 * forwarded and as its answer's usage report goes by). /v1/stats, /metrics and the periodic
 * stats line all read these accounts through savedTokensReport.ts, so their figures agree.
 */

/** What the engine did with one finished request's prompt (usage.ctxr), in the model's tokens. */
export interface EnginePromptUsage {
  promptTokens: number;
  /** KV taken from the prefix cache as an exact prefix. */
  prefixReusedTokens: number;
  /** KV of cached chunks reused at another position (managed prefill), recomputed ones not included. */
  chunkReusedTokens: number;
  /** Tokens of reused chunks run again to repair their KV. */
  recomputedTokens: number;
}

export class EngineTokenAccount {
  requests = 0;
  promptTokens = 0;
  prefixCachedTokens = 0;
  chunkReusedTokens = 0;
  recomputedTokens = 0;

  record(usage: EnginePromptUsage): void {
    this.requests++;
    this.promptTokens += usage.promptTokens;
    this.prefixCachedTokens += usage.prefixReusedTokens;
    this.chunkReusedTokens += usage.chunkReusedTokens;
    this.recomputedTokens += usage.recomputedTokens;
  }

  /** Prompt tokens whose KV came from a cache, prefix or chunk. */
  get cachedTokens(): number {
    return this.prefixCachedTokens + this.chunkReusedTokens;
  }
}

/**
 * How the proxy counts the prompt tokens it receives and forwards: with the served model's
 * tokenizer (`--tokenizer DIR`), or the estimate of one token per 4 characters. Both figures of
 * an upstream are always in the same unit.
 */
export type ProxyTokenUnit = "tokenizer" | "estimate";

/** One forwarded request as the proxy counted it (unit: the account's). */
export interface ForwardedPrompt {
  receivedTokens: number;
  forwardedTokens: number;
  /** Prompt tokens the live index expected cached, in the order sent (its own estimate). */
  estimatedCachedTokens: number;
  /** The same estimate had the documents been sent in the order the client gave them. */
  inputOrderCachedTokens: number;
}

/** An answer's usage report, as the upstream gave it (null: a figure it left out). */
export interface UpstreamUsage {
  promptTokens: number | null;
  /** usage.completion_tokens. */
  completionTokens: number | null;
  /** usage.prompt_tokens_details.cached_tokens. */
  cachedTokens: number | null;
  /** A ctxr engine's usage.ctxr: chunk KV reused and recomputed (null from other engines). */
  chunkReusedTokens: number | null;
  recomputedTokens: number | null;
}

export class UpstreamTokenAccount {
  /** Requests the upstream accepted (status below 400) after they were rewritten. */
  requests = 0;
  promptTokensReceived = 0;
  promptTokensForwarded = 0;
  estimatedCachedTokens = 0;
  inputOrderCachedTokens = 0;
  /** Answers whose usage report was read. */
  usageReports = 0;
  /** Of those, the ones that said how many tokens were cached. */
  cachedTokensReports = 0;
  /** The upstream's own figures: usage.prompt_tokens, usage.completion_tokens, cached tokens (prefix and chunk), recomputed. */
  promptTokens = 0;
  completionTokens = 0;
  cachedTokens = 0;
  recomputedTokens = 0;

  constructor(readonly unit: ProxyTokenUnit = "estimate") {}

  recordForwarded(prompt: ForwardedPrompt): void {
    this.requests++;
    this.promptTokensReceived += prompt.receivedTokens;
    this.promptTokensForwarded += prompt.forwardedTokens;
    this.estimatedCachedTokens += prompt.estimatedCachedTokens;
    this.inputOrderCachedTokens += prompt.inputOrderCachedTokens;
  }

  recordUsage(usage: UpstreamUsage): void {
    this.usageReports++;
    this.promptTokens += usage.promptTokens ?? 0;
    this.completionTokens += usage.completionTokens ?? 0;
    if (usage.cachedTokens !== null || usage.chunkReusedTokens !== null) this.cachedTokensReports++;
    this.cachedTokens += (usage.cachedTokens ?? 0) + (usage.chunkReusedTokens ?? 0);
    this.recomputedTokens += usage.recomputedTokens ?? 0;
  }
}
