/**
 * The proxy's time to first token per upstream: from sending a streamed request to the first event
 * that carries a token (firstTokenWatch.ts), split by whether the upstream reported cached prompt
 * tokens for it (usage.prompt_tokens_details.cached_tokens or a ctxr engine's reused chunks > 0).
 * "unknown": the answer's usage was not read (an upstream that refuses stream_options).
 */
export interface FirstTokenTotals {
  requests: number;
  seconds: number;
}

export type FirstTokenReuse = "reused" | "not_reused" | "unknown";

export class FirstTokenTimes {
  readonly reused: FirstTokenTotals = { requests: 0, seconds: 0 };
  readonly not_reused: FirstTokenTotals = { requests: 0, seconds: 0 };
  readonly unknown: FirstTokenTotals = { requests: 0, seconds: 0 };

  record(seconds: number, reuse: FirstTokenReuse): void {
    this[reuse].requests++;
    this[reuse].seconds += seconds;
  }

  snapshot(): Record<FirstTokenReuse, FirstTokenTotals> {
    return { reused: { ...this.reused }, not_reused: { ...this.not_reused }, unknown: { ...this.unknown } };
  }
}

/** Which bucket an answer's usage puts it in (null usage: unknown). */
export function firstTokenReuse(usage: { cachedTokens: number | null; chunkReusedTokens: number | null } | null): FirstTokenReuse {
  if (usage === null || (usage.cachedTokens === null && usage.chunkReusedTokens === null)) return "unknown";
  return (usage.cachedTokens ?? 0) + (usage.chunkReusedTokens ?? 0) > 0 ? "reused" : "not_reused";
}
