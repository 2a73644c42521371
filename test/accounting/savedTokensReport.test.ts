import { describe, expect, test } from "bun:test";
import { EngineTokenAccount, UpstreamTokenAccount } from "../../src/accounting/tokenAccounts.ts";
import { savedTokensReport } from "../../src/accounting/savedTokensReport.ts";
import { renderSavedTokensMetrics } from "../../src/accounting/savedTokensMetrics.ts";
import { statsLine } from "../../src/accounting/statsLine.ts";
import { parsePrometheusText } from "../helpers/prometheusText.ts";

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
    a.recordUsage({ promptTokens: 300, cachedTokens: 128, chunkReusedTokens: null, recomputedTokens: null });
    const b = new UpstreamTokenAccount("tokenizer");
    b.recordForwarded({ receivedTokens: 70, forwardedTokens: 70, estimatedCachedTokens: 0, inputOrderCachedTokens: 0 });
    b.recordUsage({ promptTokens: 100, cachedTokens: null, chunkReusedTokens: null, recomputedTokens: null });
    const report = savedTokensReport({ upstreams: [{ url: "http://a", account: a }, { url: "http://b", account: b }] });
    expect(report.upstreams![0]).toEqual({
      url: "http://a", unit: "estimate", requests: 1, prompt_tokens: 300, cached_tokens: 128, recomputed_tokens: 0, cached_ratio: 128 / 300,
      prompt_tokens_received: 50, prompt_tokens_forwarded: 60, estimated_cached_tokens: 40, input_order_estimated_cached_tokens: 10, usage_reports: 1, cached_tokens_reports: 1,
    });
    expect(report.upstreams![1]).toMatchObject({ unit: "tokenizer", cached_tokens_reports: 0, usage_reports: 1, cached_ratio: 0 });
    expect(report).toMatchObject({ requests: 2, prompt_tokens: 400, cached_tokens: 128, cached_ratio: 128 / 400 });
  });

  test("a ctxr upstream's reused chunks count as cached, its recomputed tokens as recomputed", () => {
    const account = new UpstreamTokenAccount();
    account.recordUsage({ promptTokens: 200, cachedTokens: 32, chunkReusedTokens: 90, recomputedTokens: 12 });
    expect(savedTokensReport({ upstreams: [{ url: "u", account }] })).toMatchObject({ prompt_tokens: 200, cached_tokens: 122, recomputed_tokens: 12 });
  });

  test("nothing yet: zeros and a ratio of 0, not NaN", () => {
    expect(savedTokensReport({})).toEqual({ requests: 0, prompt_tokens: 0, cached_tokens: 0, recomputed_tokens: 0, cached_ratio: 0 });
  });
});

describe("its Prometheus text", () => {
  test("the same figures as the report, in well-formed families", () => {
    const upstream = new UpstreamTokenAccount("estimate");
    upstream.recordForwarded({ receivedTokens: 5, forwardedTokens: 7, estimatedCachedTokens: 3, inputOrderCachedTokens: 1 });
    upstream.recordUsage({ promptTokens: 9, cachedTokens: 4, chunkReusedTokens: null, recomputedTokens: null });
    const report = savedTokensReport({ engine: engineAccount(), upstreams: [{ url: 'http://x/"q"', account: upstream }] });
    const families = parsePrometheusText(renderSavedTokensMetrics(report));
    const value = (name: string) => families.get(name)!.samples[0]!.value;
    expect(value("ctxr_saved_tokens_prompt_total")).toBe(report.prompt_tokens);
    expect(value("ctxr_saved_tokens_cached_total")).toBe(report.cached_tokens);
    expect(value("ctxr_saved_tokens_recomputed_total")).toBe(report.recomputed_tokens);
    expect(value("ctxr_saved_tokens_requests_total")).toBe(report.requests);
    expect(value("ctxr_engine_cached_tokens_total")).toBe(94);
    expect(value("ctxr_engine_computed_tokens_total")).toBe(120);
    expect(families.get("ctxr_upstream_prompt_tokens_forwarded_total")!.samples[0]).toMatchObject({ labels: { upstream: 'http://x/"q"' }, value: 7 });
    expect(value("ctxr_upstream_input_order_estimated_cached_tokens_total")).toBe(1);
    expect(families.get("ctxr_upstream_token_unit")!.samples[0]!.labels).toEqual({ upstream: 'http://x/"q"', unit: "estimate" });
  });

  test("without an engine or upstreams, only the totals", () => {
    const names = [...parsePrometheusText(renderSavedTokensMetrics(savedTokensReport({}))).keys()];
    expect(names.every((name) => name.startsWith("ctxr_saved_tokens_"))).toBe(true);
  });
});

describe("the stats line", () => {
  test("the interval's figures and the totals since start, as the report has them", () => {
    const account = new EngineTokenAccount();
    account.record({ promptTokens: 100, prefixReusedTokens: 0, chunkReusedTokens: 0, recomputedTokens: 0 });
    const before = savedTokensReport({ engine: account });
    account.record({ promptTokens: 200, prefixReusedTokens: 150, chunkReusedTokens: 0, recomputedTokens: 5 });
    const line = statsLine(before, savedTokensReport({ engine: account }), 10);
    expect(line).toBe(
      "ctxr stats: last 10 s: 1 requests, 200 prompt tokens, 150 cached (75.0%), 5 recomputed; since start: 2 requests, 300 prompt tokens, 150 cached (hit rate 50.0%), 5 recomputed",
    );
  });

  test("no line for an interval without requests", () => {
    const report = savedTokensReport({ engine: engineAccount() });
    expect(statsLine(report, report, 10)).toBeNull();
  });

  test("behind a proxy it adds what was received and forwarded, and in which unit", () => {
    const account = new UpstreamTokenAccount("estimate");
    const before = savedTokensReport({ upstreams: [{ url: "u", account }] });
    account.recordForwarded({ receivedTokens: 287, forwardedTokens: 370, estimatedCachedTokens: 0, inputOrderCachedTokens: 0 });
    account.recordUsage({ promptTokens: 1561, cachedTokens: 608, chunkReusedTokens: null, recomputedTokens: null });
    const line = statsLine(before, savedTokensReport({ upstreams: [{ url: "u", account }] }), 0.5)!;
    expect(line).toContain("last 0.5 s: 1 requests, 1561 prompt tokens, 608 cached (38.9%)");
    expect(line).toEndWith("; proxy: 287 received, 370 forwarded (estimate tokens)");
  });
});
