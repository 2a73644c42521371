/** Prometheus text of the background work (backgroundWork.ts) and of every stored variant's scoring (reuseScoring.ts). */
import { metricFamily, singleMetric } from "../http/prometheus.ts";
import type { BackgroundKindStats, BackgroundWorkStats } from "./backgroundWork.ts";
import { SHIFT_SCORING_JOB, type ReuseScoringStats } from "./reuseScoring.ts";

/** The policies that reuse chunks at other positions: each gets a sample, 0 until one counts. */
const REUSING_POLICIES = ["cachecraft", "prophet", "none"];

export function backgroundWorkMetrics(background: BackgroundWorkStats, scoring: ReuseScoringStats): string {
  const kinds = { [SHIFT_SCORING_JOB]: zero(), ...background.kinds };
  const family = (name: string, type: "counter" | "gauge", help: string, field: keyof BackgroundKindStats) =>
    metricFamily(name, type, help, Object.entries(kinds).map(([kind, stats]) => ({ labels: { kind }, value: stats[field] })));
  let out = singleMetric("ctxr_background_budget", "gauge", "Share of wall time background work may keep the runner busy (--reuse-scoring-budget; 0: off).", background.budget);
  out += family("ctxr_background_jobs_pending", "gauge", "Background jobs waiting for the runner to be idle.", "pending");
  out += family("ctxr_background_jobs_run_total", "counter", "Background jobs run to the end.", "run");
  out += family("ctxr_background_jobs_deferred_total", "counter", "Background jobs that waited at least once for live requests or the budget.", "deferred");
  out += family("ctxr_background_jobs_dropped_total", "counter", "Background jobs dropped: their variant was evicted or on disk only, no scratch blocks, or a full queue.", "dropped");
  out += family("ctxr_background_jobs_failed_total", "counter", "Background jobs that failed (logged).", "failed");
  out += family("ctxr_background_runner_seconds_total", "counter", "Wall seconds the runner spent on background jobs.", "runnerSeconds");
  const policies = [...new Set([...REUSING_POLICIES, ...Object.keys(scoring.unscoredChunks)])];
  out += metricFamily(
    "ctxr_reuse_unscored_chunks_total",
    "counter",
    "Reused chunks whose variant had no measured shift yet: its choice, and cachecraft's recompute set, used the attention scores.",
    policies.map((policy) => ({ labels: { policy }, value: scoring.unscoredChunks[policy] ?? 0 })),
  );
  out += metricFamily(
    "ctxr_reuse_shift_measurements_total",
    "counter",
    "Stored variants' shift measurements by outcome (scored; gone: evicted first; not-resident: on disk only; no-room: no scratch blocks).",
    Object.entries(scoring.outcomes).map(([outcome, value]) => ({ labels: { outcome }, value })),
  );
  return out;
}

function zero(): BackgroundKindStats {
  return { pending: 0, run: 0, deferred: 0, dropped: 0, failed: 0, runnerSeconds: 0 };
}
