/**
 * `--reuse-target-agreement`: the engine's recompute ratio per policy, set by the audit's
 * agreement samples (kv/adaptiveRecomputeRatio.ts has the rule). A request that names no ratio
 * gets its policy's current one; every audit sample reaches `observe` (GenerationEngine.open
 * subscribes it to the audit's onSample). Its cells go to /v1/stats `engine.reuse_target` and
 * /metrics.
 */
import { metricFamily, singleMetric } from "../http/prometheus.ts";
import { AdaptiveRecomputeRatios, type AdaptiveRatioCell, type AgreementObservation } from "../kv/adaptiveRecomputeRatio.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";

/** Below it a policy's budget cannot repair even the chunks' first tokens (docs/reuse-target.md). */
export const DEFAULT_MIN_RATIO = 0.05;
/** Above it recompute costs most of a full prefill and reuse no longer pays (docs/reuse-target.md). */
export const DEFAULT_MAX_RATIO = 0.6;
/** The audit rate a target turns on when --reuse-audit-rate is not given. */
export const DEFAULT_TARGET_AUDIT_RATE = 0.05;

/** The policies whose recompute set a ratio sizes: the only ones the target moves. */
export const RATIO_POLICIES: readonly RecomputePolicy[] = ["prophet", "cachecraft", "epic"];

export interface ReuseTargetSettings {
  /** The agreement to hold, 0 < A ≤ 1. */
  target: number;
  minRatio: number;
  maxRatio: number;
  /** Share of reused requests the audit samples (--reuse-audit-rate, or the target's default; a target needs one above 0). */
  auditRate: number;
}

export class ReuseTarget {
  readonly ratios: AdaptiveRecomputeRatios;

  constructor(
    readonly model: string,
    readonly settings: ReuseTargetSettings,
    /** Where every cell starts: --recompute-ratio, clamped into [min, max]. */
    initialRatio: number,
  ) {
    this.ratios = new AdaptiveRecomputeRatios({ target: settings.target, minRatio: settings.minRatio, maxRatio: settings.maxRatio, initialRatio });
  }

  /** The ratio a request of this policy that names none gets now (undefined: the policy takes no ratio). */
  ratioFor(policy: RecomputePolicy): number | undefined {
    return RATIO_POLICIES.includes(policy) ? this.ratios.ratioFor(this.model, policy) : undefined;
  }

  /** One audited request's agreement (an AgreementSample); samples of another model are not this engine's. */
  observe(sample: AgreementObservation): void {
    if (sample.model !== this.model || !RATIO_POLICIES.includes(sample.policy as RecomputePolicy)) return;
    this.ratios.observe(sample);
  }

  /** Every ratio policy's cell (those not used yet at the initial ratio). */
  get cells(): AdaptiveRatioCell[] {
    for (const policy of RATIO_POLICIES) this.ratios.ratioFor(this.model, policy);
    return this.ratios.cellStats;
  }

  /** /v1/stats `engine.reuse_target`. */
  body() {
    return {
      target: this.settings.target,
      min_ratio: this.settings.minRatio,
      max_ratio: this.settings.maxRatio,
      audit_rate: this.settings.auditRate,
      cells: this.cells.map((cell) => ({
        model: cell.model,
        policy: cell.policy,
        ratio: cell.ratio,
        samples: cell.samples,
        counted: cell.counted,
        moves_up: cell.movesUp,
        moves_down: cell.movesDown,
        window_agreement: cell.windowAgreement,
      })),
    };
  }

  /** Prometheus text of the cells. */
  metrics(): string {
    const cells = this.cells;
    const family = (name: string, type: "counter" | "gauge", help: string, value: (cell: AdaptiveRatioCell) => number) =>
      metricFamily(name, type, help, cells.map((cell) => ({ labels: { model: cell.model, policy: cell.policy }, value: value(cell) })));
    let out = singleMetric("ctxr_reuse_target_agreement", "gauge", "--reuse-target-agreement: the agreement the recompute ratio is set to hold.", this.settings.target);
    out += family("ctxr_reuse_target_ratio", "gauge", "The recompute ratio a request that names none gets now, by model and policy.", (cell) => cell.ratio);
    out += family("ctxr_reuse_target_samples_total", "counter", "Audit samples the ratio controller took (those at other ratios included).", (cell) => cell.samples);
    out += family("ctxr_reuse_target_moves_up_total", "counter", "Times the ratio rose (agreement below the target).", (cell) => cell.movesUp);
    out += family("ctxr_reuse_target_moves_down_total", "counter", "Times the ratio fell (a window of samples above the target plus its margin).", (cell) => cell.movesDown);
    return out;
  }
}
