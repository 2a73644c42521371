import { describe, expect, test } from "bun:test";
import { EngineTokenAccount, UpstreamTokenAccount } from "../../src/accounting/tokenAccounts.ts";
import { savedTokensReport } from "../../src/accounting/savedTokensReport.ts";
import { renderSavedTokensMetrics } from "../../src/accounting/savedTokensMetrics.ts";
import { parsePrometheusText } from "../helpers/prometheusText.ts";

function engineAccount(): EngineTokenAccount {
  const account = new EngineTokenAccount();
  account.record({ promptTokens: 100, prefixReusedTokens: 0, chunkReusedTokens: 0, recomputedTokens: 0 });
  account.record({ promptTokens: 120, prefixReusedTokens: 64, chunkReusedTokens: 30, recomputedTokens: 6 });
  return account;
}

describe("its Prometheus text", () => {
  test("the same figures as the report, in well-formed families", () => {
    const upstream = new UpstreamTokenAccount("estimate");
    upstream.recordForwarded({ receivedTokens: 5, forwardedTokens: 7, estimatedCachedTokens: 3, inputOrderCachedTokens: 1 });
    upstream.recordUsage({ promptTokens: 9, completionTokens: 11, cachedTokens: 4, chunkReusedTokens: null, recomputedTokens: null });
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
    expect(value("ctxr_upstream_completion_tokens_total")).toBe(11);
    expect(families.get("ctxr_upstream_token_unit")!.samples[0]!.labels).toEqual({ upstream: 'http://x/"q"', unit: "estimate" });
  });

  test("without an engine or upstreams, only the totals", () => {
    const names = [...parsePrometheusText(renderSavedTokensMetrics(savedTokensReport({}))).keys()];
    expect(names.every((name) => name.startsWith("ctxr_saved_tokens_"))).toBe(true);
  });
});
