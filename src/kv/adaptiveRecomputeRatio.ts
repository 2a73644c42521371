/**
 * A recompute ratio set by a quality target (issue 31, item 5): for each model and policy, the
 * ratio to serve now, moved by the audit's agreement samples (src/quality/answerAgreement.ts:
 * an `AgreementSample` fits `AgreementObservation`, so wiring the audit is
 * `audit.onSample((sample) => ratios.observe(sample))`).
 *
 * The rule, per (model, policy) cell, with target A, margin m and window W:
 *
 * - **Which samples count.** Agreement is taken to rise with the ratio. A sample taken at the
 *   cell's current ratio counts. One taken at another ratio (the audit runs after the request,
 *   so samples of requests served before a move arrive after it) counts only where it says
 *   something about the current ratio: below the target at a higher ratio (the current one can
 *   do no better), or at least A + m at a lower ratio (the current one does at least as well).
 *   Every other sample is dropped. The window restarts at each move.
 * - **Up at once.** After each counted sample, when the mean of the window's last W samples
 *   (default 16) is below A, the ratio rises, with no confirmation wait: by `upStep` (default
 *   0.1: from 0.05 to 0.6 in six moves) when the mean is 1 − A or more below the target
 *   (agreement collapsed), by that share of `upStep` for a smaller shortfall, never by less than
 *   two `downStep`s (noise near the target). While fewer than W samples have counted, the
 *   missing ones are taken as A + m (a prior that the current ratio is just enough), so samples
 *   far below the target move it at once (at A = 0.9, two requests that agree on nothing; at
 *   A = 0.99, one) and one a little below does not. The ratio that failed becomes the cell's
 *   known-low ratio.
 * - **Down slowly.** When W samples have counted and their mean is at least A + m (m: default
 *   a fifth of 1 − A, the disagreement the target allows), the ratio falls by `downStep`
 *   (default 0.01), never to or below the known-low ratio. The known-low ratio is forgotten
 *   after `probeAfter` counted samples without a move up, so a workload that gets easier is
 *   followed down again.
 * - Always within [min, max].
 *
 * Settling: the cell walks down to one `downStep` above the highest ratio that failed, where
 * the window's mean stays between A and A + m.
 */

/** What the controller reads of an audited request (an AgreementSample has these fields). */
export interface AgreementObservation {
  model: string;
  policy: string;
  /** The recompute ratio the audited request was served with. */
  ratio: number;
  /** The sample's agreement, 0..1 (the greedy tokens' common prefix share). */
  agreement: number;
}

export interface AdaptiveRatioSettings {
  /** The agreement to hold, 0 < A ≤ 1. */
  target: number;
  minRatio: number;
  maxRatio: number;
  /** Where every cell starts (clamped into [min, max]). */
  initialRatio: number;
  /** Hysteresis: a move down needs the window's mean at least target + margin (default a fifth of 1 − target). */
  margin?: number;
  /** Samples a move down needs, and the span of their mean (default 16). */
  window?: number;
  upStep?: number;
  downStep?: number;
  /** Counted samples after which the known-low ratio is forgotten (default 20 windows). */
  probeAfter?: number;
}

export const ADAPTIVE_RATIO_DEFAULTS = { marginShare: 0.2, window: 16, upStep: 0.1, downStep: 0.01 } as const;

/** One cell's figures (/v1/stats, /metrics). */
export interface AdaptiveRatioCell {
  model: string;
  policy: string;
  ratio: number;
  /** Samples seen, and counted under the rule above. */
  samples: number;
  counted: number;
  movesUp: number;
  movesDown: number;
  /** Mean agreement of the current window (null: empty). */
  windowAgreement: number | null;
  /** The highest ratio that recently failed (null: none, or forgotten). */
  knownLow: number | null;
}

/** Ratios are compared at this precision (a ratio that travelled through JSON or a sum of steps). */
const SAME = 1e-9;

class Cell {
  ratio: number;
  samples = 0;
  counted = 0;
  movesUp = 0;
  movesDown = 0;
  knownLow: number | null = null;
  sinceUp = 0;
  window: number[] = [];

  constructor(
    readonly model: string,
    readonly policy: string,
    initial: number,
  ) {
    this.ratio = initial;
  }
}

export class AdaptiveRecomputeRatios {
  private readonly cells = new Map<string, Cell>();
  readonly target: number;
  readonly minRatio: number;
  readonly maxRatio: number;
  readonly initialRatio: number;
  readonly margin: number;
  readonly window: number;
  readonly upStep: number;
  readonly downStep: number;
  readonly probeAfter: number;

  constructor(settings: AdaptiveRatioSettings) {
    const { target, minRatio, maxRatio } = settings;
    if (!(target > 0 && target <= 1)) throw new RangeError(`the target agreement must be above 0 and at most 1, got ${target}`);
    if (!(minRatio >= 0 && maxRatio <= 1 && minRatio <= maxRatio)) throw new RangeError(`the ratios must satisfy 0 ≤ min ≤ max ≤ 1, got [${minRatio}, ${maxRatio}]`);
    this.target = target;
    this.minRatio = minRatio;
    this.maxRatio = maxRatio;
    this.initialRatio = this.clamp(settings.initialRatio);
    this.margin = settings.margin ?? ADAPTIVE_RATIO_DEFAULTS.marginShare * (1 - target);
    this.window = settings.window ?? ADAPTIVE_RATIO_DEFAULTS.window;
    this.upStep = settings.upStep ?? ADAPTIVE_RATIO_DEFAULTS.upStep;
    this.downStep = settings.downStep ?? ADAPTIVE_RATIO_DEFAULTS.downStep;
    this.probeAfter = settings.probeAfter ?? 20 * this.window;
    if (!(this.margin >= 0 && this.window >= 1 && this.upStep > 0 && this.downStep > 0 && this.probeAfter >= 1)) {
      throw new RangeError("margin ≥ 0, window ≥ 1, steps > 0 and probeAfter ≥ 1 are needed");
    }
  }

  /** The ratio a request of this model and policy gets now (a new cell starts at the initial ratio). */
  ratioFor(model: string, policy: string): number {
    return this.cell(model, policy).ratio;
  }

  /** Takes one audited request's agreement; returns its cell's ratio after it. */
  observe(sample: AgreementObservation): number {
    const cell = this.cell(sample.model, sample.policy);
    cell.samples++;
    const agreement = Math.min(1, Math.max(0, sample.agreement));
    if (!this.counts(cell.ratio, sample.ratio, agreement)) return cell.ratio;
    cell.counted++;
    cell.sinceUp++;
    cell.window.push(agreement);
    if (cell.window.length > this.window) cell.window.shift();
    if (cell.knownLow !== null && cell.sinceUp >= this.probeAfter) cell.knownLow = null;

    const prior = Math.min(1, this.target + this.margin);
    const windowMean = (sum(cell.window) + (this.window - cell.window.length) * prior) / this.window;
    if (windowMean < this.target) {
      if (cell.ratio < this.maxRatio - SAME) {
        cell.knownLow = cell.ratio;
        this.move(cell, Math.min(this.maxRatio, cell.ratio + this.upStepFor(this.target - windowMean)));
        cell.movesUp++;
      }
      cell.sinceUp = 0;
      return cell.ratio;
    }
    if (cell.window.length === this.window && sum(cell.window) / this.window >= Math.min(1, this.target + this.margin) - SAME) {
      const floor = Math.max(this.minRatio, cell.knownLow === null ? -Infinity : cell.knownLow + SAME);
      const next = Math.max(this.minRatio, cell.ratio - this.downStep);
      if (next < cell.ratio - SAME && next >= floor) {
        this.move(cell, next);
        cell.movesDown++;
      }
    }
    return cell.ratio;
  }

  get cellStats(): AdaptiveRatioCell[] {
    return [...this.cells.values()].map((cell) => ({
      model: cell.model,
      policy: cell.policy,
      ratio: cell.ratio,
      samples: cell.samples,
      counted: cell.counted,
      movesUp: cell.movesUp,
      movesDown: cell.movesDown,
      windowAgreement: cell.window.length === 0 ? null : sum(cell.window) / cell.window.length,
      knownLow: cell.knownLow,
    }));
  }

  /** Whether a sample taken at `taken` says something about the cell's `current` ratio (the rule above). */
  private counts(current: number, taken: number, agreement: number): boolean {
    if (Math.abs(taken - current) <= SAME) return true;
    if (taken > current) return agreement < this.target;
    return agreement >= Math.min(1, this.target + this.margin);
  }

  /** The step up for a window mean this far below the target: the full step for a shortfall of 1 − target or more. */
  private upStepFor(shortfall: number): number {
    const share = this.target < 1 ? shortfall / (1 - this.target) : 1;
    return Math.min(this.upStep, Math.max(2 * this.downStep, this.upStep * share));
  }

  private move(cell: Cell, ratio: number): void {
    // Rounded to the steps' precision, so that a ratio reached by many steps reads as set.
    cell.ratio = Math.round(ratio * 1e6) / 1e6;
    cell.window = [];
  }

  private cell(model: string, policy: string): Cell {
    const key = `${model}\u0000${policy}`;
    let cell = this.cells.get(key);
    if (cell === undefined) this.cells.set(key, (cell = new Cell(model, policy, this.initialRatio)));
    return cell;
  }

  private clamp(ratio: number): number {
    return Math.min(this.maxRatio, Math.max(this.minRatio, ratio));
  }
}

function sum(values: readonly number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}
