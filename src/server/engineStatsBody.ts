/**
 * /v1/stats `engine`: the built-in engine's live figures (--model): its queue, its KV blocks, and
 * its requests' first tokens split by whether their prompt reused cached KV. The same counters
 * back /metrics (generationEngine.ts, latencyMetrics.ts).
 */
import type { SchedulerStats } from "../engine/schedulerTypes.ts";
import type { FirstTokenTotals } from "./latencyMetrics.ts";
import type { BackgroundWorkStats } from "../engine/backgroundWork.ts";
import type { ReuseScoringStats } from "../engine/reuseScoring.ts";
import type { ReuseTarget } from "../engine/reuseTarget.ts";

type ReuseTargetBody = ReturnType<ReuseTarget["body"]>;

/** /v1/stats `engine.reuse_scoring`: the background work and every stored variant's scoring. */
export function reuseScoringBody(background: BackgroundWorkStats, scoring: ReuseScoringStats) {
  return {
    mode: scoring.mode,
    budget: background.budget,
    jobs: Object.fromEntries(
      Object.entries(background.kinds).map(([kind, k]) => [kind, { pending: k.pending, run: k.run, deferred: k.deferred, dropped: k.dropped, failed: k.failed, runner_seconds: k.runnerSeconds }]),
    ),
    measurements: { ...scoring.outcomes },
    unscored_chunks: { ...scoring.unscoredChunks },
  };
}

export function engineStatsBody(stats: SchedulerStats, firstTokens: FirstTokenTotals | null, reuseScoring?: ReturnType<typeof reuseScoringBody>, reuseTarget?: ReuseTargetBody | null) {
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
    ...(reuseScoring === undefined ? {} : { reuse_scoring: reuseScoring }),
    ...(reuseTarget === undefined || reuseTarget === null ? {} : { reuse_target: reuseTarget }),
  };
}
