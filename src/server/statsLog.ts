/**
 * The periodic stats line (`--stats-interval`): every interval with traffic, one plain line of
 * the saved-token figures (accounting/statsLine.ts), read from the same report as /v1/stats.
 */
import type { SavedTokensReport } from "../accounting/savedTokensReport.ts";
import { statsLine } from "../accounting/statsLine.ts";

export const DEFAULT_STATS_INTERVAL_MS = 10_000;

/** Starts the line every `everyMs` (0: never); returns what stops it. */
export function startStatsLog(report: () => SavedTokensReport, everyMs: number, log: (text: string) => void): () => void {
  if (everyMs <= 0) return () => undefined;
  let before = report();
  const timer = setInterval(() => {
    const now = report();
    const line = statsLine(before, now, everyMs / 1000);
    before = now;
    if (line !== null) log(`${line}\n`);
  }, everyMs);
  return () => clearInterval(timer);
}
