import { expect, test } from "bun:test";
import { EngineTokenAccount } from "../../src/accounting/tokenAccounts.ts";
import { savedTokensReport } from "../../src/accounting/savedTokensReport.ts";
import { startStatsLog } from "../../src/server/statsLog.ts";

test("a line after each interval with requests, none after a quiet one, none once stopped", async () => {
  const account = new EngineTokenAccount();
  const lines: string[] = [];
  const stop = startStatsLog(() => savedTokensReport({ engine: account }), 40, (text) => lines.push(text));
  try {
    await Bun.sleep(120);
    expect(lines).toEqual([]);
    account.record({ promptTokens: 64, prefixReusedTokens: 32, chunkReusedTokens: 0, recomputedTokens: 0 });
    await Bun.sleep(120);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe("ctxr stats: last 0.04 s: 1 requests, 64 prompt tokens, 32 cached (50.0%), 0 recomputed; since start: 1 requests, 64 prompt tokens, 32 cached (hit rate 50.0%), 0 recomputed\n");
  } finally {
    stop();
  }
  account.record({ promptTokens: 64, prefixReusedTokens: 64, chunkReusedTokens: 0, recomputedTokens: 0 });
  await Bun.sleep(120);
  expect(lines).toHaveLength(1);
});

test("interval 0: never a line", async () => {
  const account = new EngineTokenAccount();
  const lines: string[] = [];
  const stop = startStatsLog(() => savedTokensReport({ engine: account }), 0, (text) => lines.push(text));
  account.record({ promptTokens: 10, prefixReusedTokens: 0, chunkReusedTokens: 0, recomputedTokens: 0 });
  await Bun.sleep(60);
  stop();
  expect(lines).toEqual([]);
});
