import { describe, expect, test } from "bun:test";
import { EngineTokenAccount, UpstreamTokenAccount } from "../../src/accounting/tokenAccounts.ts";
import { savedTokensReport } from "../../src/accounting/savedTokensReport.ts";

function engineAccount(): EngineTokenAccount {
  const account = new EngineTokenAccount();
  account.record({ promptTokens: 100, prefixReusedTokens: 0, chunkReusedTokens: 0, recomputedTokens: 0 });
  account.record({ promptTokens: 120, prefixReusedTokens: 64, chunkReusedTokens: 30, recomputedTokens: 6 });
  return account;
}

describe("the saved-token report", () => {
  test("the engine: cached = prefix + chunks; computed is the rest of the prompt", () => {
    const report = savedTokensReport({ engine: engineAccount() });
    expect(report.engine).toEqual({ requests: 2, prompt_tokens: 220, cached_tokens: 94, recomputed_tokens: 6, cached_ratio: 94 / 220, prefix_cached_tokens: 64, chunk_reused_tokens: 30, computed_tokens: 120 });
    expect(report).toMatchObject({ requests: 2, prompt_tokens: 220, cached_tokens: 94, recomputed_tokens: 6, cached_ratio: 94 / 220 });
    expect(report.upstreams).toBeUndefined();
  });

  test("upstreams: the proxy's own count in its unit, the upstream's reports in the model's tokens; totals add the reports", () => {
    const a = new UpstreamTokenAccount("estimate");
    a.recordForwarded({ receivedTokens: 50, forwardedTokens: 60, estimatedCachedTokens: 40, inputOrderCachedTokens: 10 });
    a.recordUsage({ promptTokens: 300, completionTokens: 17, cachedTokens: 128, chunkReusedTokens: null, recomputedTokens: null });
    const b = new UpstreamTokenAccount("tokenizer");
    b.recordForwarded({ receivedTokens: 70, forwardedTokens: 70, estimatedCachedTokens: 0, inputOrderCachedTokens: 0 });
    b.recordUsage({ promptTokens: 100, completionTokens: null, cachedTokens: null, chunkReusedTokens: null, recomputedTokens: null });
    const report = savedTokensReport({ upstreams: [{ url: "http://a", account: a }, { url: "http://b", account: b }] });
    expect(report.upstreams![0]).toEqual({
      url: "http://a", unit: "estimate", requests: 1, prompt_tokens: 300, cached_tokens: 128, recomputed_tokens: 0, cached_ratio: 128 / 300, completion_tokens: 17,
      prompt_tokens_received: 50, prompt_tokens_forwarded: 60, estimated_cached_tokens: 40, input_order_estimated_cached_tokens: 10, usage_reports: 1, cached_tokens_reports: 1,
    });
    expect(report.upstreams![1]).toMatchObject({ unit: "tokenizer", completion_tokens: 0, cached_tokens_reports: 0, usage_reports: 1, cached_ratio: 0 });
    expect(report).toMatchObject({ requests: 2, prompt_tokens: 400, cached_tokens: 128, cached_ratio: 128 / 400 });
  });

  test("a ctxr upstream's reused chunks count as cached, its recomputed tokens as recomputed", () => {
    const account = new UpstreamTokenAccount();
    account.recordUsage({ promptTokens: 200, completionTokens: 5, cachedTokens: 32, chunkReusedTokens: 90, recomputedTokens: 12 });
    expect(savedTokensReport({ upstreams: [{ url: "u", account }] })).toMatchObject({ prompt_tokens: 200, cached_tokens: 122, recomputed_tokens: 12 });
  });

  test("nothing yet: zeros and a ratio of 0, not NaN", () => {
    expect(savedTokensReport({})).toEqual({ requests: 0, prompt_tokens: 0, cached_tokens: 0, recomputed_tokens: 0, cached_ratio: 0 });
  });
});
