/**
 * The periodic stats line (`--stats-interval`), like vLLM's "Prefix cache hit rate": what the
 * interval added and the totals since start, from two saved-token reports. Pure: the timer that
 * calls it lives with the server.
 */
import type { SavedTokensReport } from "./savedTokensReport.ts";

function percent(part: number, whole: number): string {
  return whole === 0 ? "0.0%" : `${((100 * part) / whole).toFixed(1)}%`;
}

/** The line for the interval from `before` to `now`, or null when no request was accounted in it. */
export function statsLine(before: SavedTokensReport, now: SavedTokensReport, seconds: number): string | null {
  const requests = now.requests - before.requests;
  if (requests <= 0) return null;
  const prompt = now.prompt_tokens - before.prompt_tokens;
  const cached = now.cached_tokens - before.cached_tokens;
  const recomputed = now.recomputed_tokens - before.recomputed_tokens;
  let line =
    `ctxr stats: last ${seconds} s: ${requests} requests, ${prompt} prompt tokens, ${cached} cached (${percent(cached, prompt)}), ${recomputed} recomputed; ` +
    `since start: ${now.requests} requests, ${now.prompt_tokens} prompt tokens, ${now.cached_tokens} cached (hit rate ${percent(now.cached_tokens, now.prompt_tokens)}), ${now.recomputed_tokens} recomputed`;
  const upstreams = now.upstreams ?? [];
  if (upstreams.length > 0) {
    const received = upstreams.reduce((total, u) => total + u.prompt_tokens_received, 0);
    const forwarded = upstreams.reduce((total, u) => total + u.prompt_tokens_forwarded, 0);
    const units = [...new Set(upstreams.map((u) => u.unit))].join("/");
    line += `; proxy: ${received} received, ${forwarded} forwarded (${units} tokens)`;
  }
  return line;
}
