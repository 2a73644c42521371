/**
 * `ctxr reuse calibrate`'s figures: per policy and ratio, the mean of the requests' agreement
 * (answerAgreement.ts: the greedy tokens' common prefix share) with a one-sided 95% lower
 * confidence bound from a percentile bootstrap over requests; per policy, the smallest ratio
 * whose mean meets the target, and the smallest whose lower bound does.
 */
import { mulberry32 } from "./qualityRandom.ts";

export const BOOTSTRAP_RESAMPLES = 2000;
export const CONFIDENCE = 0.95;

/**
 * The one-sided lower confidence bound of the mean: the (1 − confidence) quantile of the means of
 * `resamples` resamples with replacement (seeded, so a report is reproducible).
 */
export function bootstrapLowerBound(values: readonly number[], confidence = CONFIDENCE, resamples = BOOTSTRAP_RESAMPLES, seed = 0x5eed): number {
  if (values.length === 0) return NaN;
  const random = mulberry32(seed);
  const means = new Float64Array(resamples);
  for (let r = 0; r < resamples; r++) {
    let sum = 0;
    for (let i = 0; i < values.length; i++) sum += values[Math.floor((random() / 2 ** 32) * values.length)]!;
    means[r] = sum / values.length;
  }
  means.sort();
  return means[Math.min(resamples - 1, Math.floor((1 - confidence) * resamples))]!;
}

export interface CellFigures {
  policy: string;
  ratio: number;
  requests: number;
  /** Mean greedy agreement, and its lower bound. */
  agreement: number;
  lowerBound: number;
  /** Share of requests whose first token's top-1 equals full prefill's. */
  topOneAgreement: number;
  /** Mean KL(full ‖ reused) of the first token, nats. */
  meanKl: number;
  /** Recomputed tokens over reused ones, summed over the requests (the ratio as applied). */
  recomputedShare: number;
}

export interface PolicyCalibration {
  policy: string;
  /** The smallest ratio whose mean agreement meets the target (null: none of those tried). */
  ratio: number | null;
  /** That ratio's lower bound. */
  lowerBound: number | null;
  /** The smallest ratio whose lower bound meets the target (null: none). */
  confidentRatio: number | null;
}

export interface RequestOutcome {
  agreement: number;
  topOneAgrees: boolean;
  klDivergence: number;
  /** Prompt tokens taken from cached chunks at a new position (recomputed ones included), and of them recomputed. */
  reusedTokens: number;
  recomputedTokens: number;
}

export function cellFigures(policy: string, ratio: number, outcomes: readonly RequestOutcome[]): CellFigures {
  const agreements = outcomes.map((o) => o.agreement);
  const n = outcomes.length;
  return {
    policy,
    ratio,
    requests: n,
    agreement: agreements.reduce((s, a) => s + a, 0) / n,
    lowerBound: bootstrapLowerBound(agreements),
    topOneAgreement: outcomes.filter((o) => o.topOneAgrees).length / n,
    meanKl: outcomes.reduce((s, o) => s + o.klDivergence, 0) / n,
    recomputedShare: share(outcomes.reduce((s, o) => s + o.recomputedTokens, 0), outcomes.reduce((s, o) => s + o.reusedTokens, 0)),
  };
}

/** Per policy (in the order first seen), from its cells. */
export function calibratePolicies(cells: readonly CellFigures[], target: number): PolicyCalibration[] {
  const policies = [...new Set(cells.map((c) => c.policy))];
  return policies.map((policy) => {
    const own = cells.filter((c) => c.policy === policy).sort((a, b) => a.ratio - b.ratio);
    const meeting = own.find((c) => c.agreement >= target);
    const confident = own.find((c) => c.lowerBound >= target);
    return { policy, ratio: meeting?.ratio ?? null, lowerBound: meeting?.lowerBound ?? null, confidentRatio: confident?.ratio ?? null };
  });
}

const share = (part: number, whole: number) => (whole === 0 ? 0 : part / whole);
