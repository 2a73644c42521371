/**
 * The live quality audit's figures (issue 31, item 4), pure: which eligible requests are sampled
 * (a deterministic accumulator), and per cell — model, policy, recompute ratio — the samples'
 * count, top-1 share, KL divergence (mean, p50, p90) and mean agreement, with the recent window
 * whose agreement decides the warning (logged once when it falls below the threshold, once when
 * it recovers).
 */
import type { AgreementSample } from "../quality/answerAgreement.ts";

/** Samples a cell's recent agreement is taken over (the warning's window). */
export const RECENT_SAMPLES = 20;
/** KL values a cell keeps for its quantiles (the newest). */
export const QUANTILE_SAMPLES = 1000;

/**
 * Picks a share `rate` of the eligible requests, reproducibly: each adds `rate` to an accumulator
 * and is audited when it reaches 1 (rate 1: every one; 0.1: the 10th, 20th, ...; 0: none).
 */
export class AuditSampler {
  private accumulated = 0;

  constructor(readonly rate: number) {
    if (!(Number.isFinite(rate) && rate >= 0 && rate <= 1)) throw new RangeError(`the audit rate must be from 0 to 1, got ${rate}`);
  }

  /** One eligible request: whether to audit it. */
  next(): boolean {
    if (this.rate === 0) return false;
    this.accumulated += this.rate;
    // A tolerance for sums like 100 × 0.01 that land a hair below 1.
    if (this.accumulated < 1 - 1e-9) return false;
    this.accumulated = Math.max(0, this.accumulated - 1);
    return true;
  }
}

/** A cell's figures, as /v1/stats shows them. */
export interface AuditCellStats {
  model: string;
  policy: string;
  ratio: number;
  count: number;
  /** Share of samples whose first token's top-1 agreed. */
  topOneShare: number;
  klMean: number;
  /** Over the newest QUANTILE_SAMPLES samples. */
  klP50: number;
  klP90: number;
  agreementMean: number;
  /** Mean agreement of the newest RECENT_SAMPLES samples (what the warning watches). */
  recentAgreement: number;
}

/** A change of a cell's recent agreement across the threshold (to log). */
export interface AgreementAlert {
  cell: { model: string; policy: string; ratio: number };
  state: "below" | "recovered";
  recentAgreement: number;
  samples: number;
}

class AuditCell {
  count = 0;
  topOne = 0;
  klSum = 0;
  agreementSum = 0;
  readonly kls: number[] = [];
  readonly recent: number[] = [];
  below = false;

  constructor(
    readonly model: string,
    readonly policy: string,
    readonly ratio: number,
  ) {}

  add(sample: AgreementSample): void {
    this.count++;
    if (sample.topOneAgrees) this.topOne++;
    this.klSum += sample.klDivergence;
    this.agreementSum += sample.agreement;
    this.kls.push(sample.klDivergence);
    if (this.kls.length > QUANTILE_SAMPLES) this.kls.shift();
    this.recent.push(sample.agreement);
    if (this.recent.length > RECENT_SAMPLES) this.recent.shift();
  }

  get recentAgreement(): number {
    return this.recent.length === 0 ? 1 : this.recent.reduce((a, b) => a + b, 0) / this.recent.length;
  }

  stats(): AuditCellStats {
    const sorted = [...this.kls].sort((a, b) => a - b);
    return {
      model: this.model,
      policy: this.policy,
      ratio: this.ratio,
      count: this.count,
      topOneShare: this.count === 0 ? 0 : this.topOne / this.count,
      klMean: this.count === 0 ? 0 : this.klSum / this.count,
      klP50: quantile(sorted, 0.5),
      klP90: quantile(sorted, 0.9),
      agreementMean: this.count === 0 ? 0 : this.agreementSum / this.count,
      recentAgreement: this.recentAgreement,
    };
  }
}

/** The q-quantile of sorted values (nearest rank); 0 when empty. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** The samples by cell, and the warning's state of each. */
export class AuditFigures {
  private readonly cells = new Map<string, AuditCell>();

  constructor(
    /** A cell's recent agreement below this logs a warning (once, until it recovers). */
    readonly warnBelow: number,
  ) {}

  /** Adds a sample; the alert when its cell's recent agreement crossed the threshold. */
  add(sample: AgreementSample): AgreementAlert | null {
    const key = `${sample.model}\u0000${sample.policy}\u0000${sample.ratio}`;
    let cell = this.cells.get(key);
    if (cell === undefined) {
      cell = new AuditCell(sample.model, sample.policy, sample.ratio);
      this.cells.set(key, cell);
    }
    cell.add(sample);
    const recent = cell.recentAgreement;
    const below = recent < this.warnBelow;
    if (below === cell.below) return null;
    cell.below = below;
    return { cell: { model: cell.model, policy: cell.policy, ratio: cell.ratio }, state: below ? "below" : "recovered", recentAgreement: recent, samples: cell.recent.length };
  }

  get all(): AuditCellStats[] {
    return [...this.cells.values()].map((cell) => cell.stats());
  }
}

/** The log line of an alert. */
export function alertLine(alert: AgreementAlert, warnBelow: number): string {
  const cell = `model ${alert.cell.model}, policy ${alert.cell.policy}, ratio ${alert.cell.ratio}`;
  const figure = `${alert.recentAgreement.toFixed(3)} over the last ${alert.samples} audited requests`;
  return alert.state === "below"
    ? `ctxr: warning: reuse audit: ${cell}: agreement with full prefill ${figure} fell below ${warnBelow} (--reuse-audit-warn-below); reuse is changing answers`
    : `ctxr: reuse audit: ${cell}: agreement with full prefill ${figure} is back at or above ${warnBelow}`;
}
