/**
 * /v1/stats `engine`: the built-in engine's live figures (--model): its queue, its KV blocks, and
 * its requests' first tokens split by whether their prompt reused cached KV. The same counters
 * back /metrics (generationEngine.ts, latencyMetrics.ts).
 */
import type { SchedulerStats } from "../engine/schedulerTypes.ts";
import type { FirstTokenTotals } from "./latencyMetrics.ts";

export function engineStatsBody(stats: SchedulerStats, firstTokens: FirstTokenTotals | null) {
  return {
    running: stats.running,
    waiting: stats.waiting,
    max_waiting: stats.maxWaiting,
    kv_blocks_used: stats.kvBlocksUsed,
    kv_blocks_total: stats.kvBlocksTotal,
    block_size: stats.blockSize,
    prefill_tokens: stats.prefillTokens,
    prefix_cache_hit_tokens: stats.prefixBlocksHit * stats.blockSize,
    first_token: firstTokens,
  };
}
