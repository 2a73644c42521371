import { describe, expect, test } from "bun:test";
import { EngineTokenAccount, UpstreamTokenAccount } from "../../src/accounting/tokenAccounts.ts";
import { savedTokensReport } from "../../src/accounting/savedTokensReport.ts";
import { statsLine } from "../../src/accounting/statsLine.ts";

function engineAccount(): EngineTokenAccount {
  const account = new EngineTokenAccount();
  account.record({ promptTokens: 100, prefixReusedTokens: 0, chunkReusedTokens: 0, recomputedTokens: 0 });
  account.record({ promptTokens: 120, prefixReusedTokens: 64, chunkReusedTokens: 30, recomputedTokens: 6 });
  return account;
}

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
    account.recordUsage({ promptTokens: 1561, completionTokens: 40, cachedTokens: 608, chunkReusedTokens: null, recomputedTokens: null });
    const line = statsLine(before, savedTokensReport({ upstreams: [{ url: "u", account }] }), 0.5)!;
    expect(line).toContain("last 0.5 s: 1 requests, 1561 prompt tokens, 608 cached (38.9%)");
    expect(line).toEndWith("; proxy: 287 received, 370 forwarded (estimate tokens)");
  });
});
