/**
 * /v1/stats `engine`: the built-in engine's live figures (--model): its queue, its KV blocks, and
 * its requests' first tokens split by whether their prompt reused cached KV. The same counters
 * back /metrics (generationEngine.ts, latencyMetrics.ts).
 */
import type { SchedulerStats } from "../engine/schedulerTypes.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import type { FirstTokenTotals } from "./latencyMetrics.ts";
import type { BackgroundWorkStats } from "../engine/backgroundWork.ts";
import type { ReuseScoringStats } from "../engine/reuseScoring.ts";
import { AUDIT_JOB, type ReuseAuditStats } from "../engine/reuseAudit.ts";
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
    reused_unscored_queued: scoring.reusedUnscoredQueued,
  };
}

/** /v1/stats `engine.reuse_audit`: the live quality audit's counts and its figures by model, policy and ratio. */
export function reuseAuditBody(audit: ReuseAuditStats, background: BackgroundWorkStats) {
  return {
    rate: audit.rate,
    tokens: audit.tokens,
    warn_below: audit.warnBelow,
    audited: audit.audited,
    pending: audit.pending,
    dropped: audit.dropped,
    deferred: background.kinds[AUDIT_JOB]?.deferred ?? 0,
    failed: audit.failed,
    cells: audit.cells.map((c) => ({
      model: c.model,
      policy: c.policy,
      ratio: c.ratio,
      count: c.count,
      top1_share: c.topOneShare,
      kl_mean: c.klMean,
      kl_p50: c.klP50,
      kl_p90: c.klP90,
      agreement_mean: c.agreementMean,
      recent_agreement: c.recentAgreement,
    })),
  };
}

export function engineStatsBody(
  stats: SchedulerStats,
  firstTokens: FirstTokenTotals | null,
  reuseScoring?: ReturnType<typeof reuseScoringBody>,
  reuseAudit?: ReturnType<typeof reuseAuditBody>,
  reuseTarget?: ReuseTargetBody | null,
) {
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
    ...(reuseAudit === undefined ? {} : { reuse_audit: reuseAudit }),
    ...(reuseTarget === undefined || reuseTarget === null ? {} : { reuse_target: reuseTarget }),
  };
}

/** /v1/stats `engine` of a running engine. */
export function engineStatsOf(engine: GenerationEngine, firstTokens: FirstTokenTotals | null) {
  const scheduler = engine.scheduler;
  const background = scheduler.background.stats;
  return engineStatsBody(engine.stats, firstTokens, reuseScoringBody(background, scheduler.reuseScoring.stats), reuseAuditBody(scheduler.reuseAudit.stats, background), engine.reuseTarget?.body());
}
