/**
 * CHESS's quality-aware backtracking signal (paper §3.3): the entropy and varentropy of each
 * decode step's next-token distribution, averaged over a sliding window of recent steps. When
 * either windowed mean exceeds its threshold the generation is deemed uncertain and the sparse
 * context should be reconstructed (the page selection recomputed).
 *
 * For a step with probabilities p = softmax(logits), in nats:
 *   entropy     H = −Σ p_i log p_i
 *   varentropy  V = Σ p_i (log p_i + H)²   (the variance of the surprisal −log p)
 *
 * Thresholds: the paper calibrates them offline as the 99th percentiles of the (per-page)
 * average entropy and varentropy on a calibration set (LongBench v2) and reconstructs on the
 * outliers above them. `calibrateThresholds` computes such percentiles from windowed means you
 * collected (`windowedMeans` turns per-step values into the means the trigger compares). The
 * defaults below are uncalibrated placeholders in the range where a language model is clearly
 * unsure (entropix-style cut-offs: a 16-step mean above 3 nats, or a mean varentropy above
 * 5 nats²). Calibrate them per model with `ctxr model calibrate-sparse` and pass the result to
 * `ctxr serve` (--sparse-entropy-threshold, --sparse-varentropy-threshold, --sparse-trigger-window).
 */

/** Windowed mean entropy (nats) above which reconstruction is asked for, when none is given. */
export const DEFAULT_ENTROPY_THRESHOLD = 3.0;
/** Windowed mean varentropy (nats²) above which reconstruction is asked for, when none is given. */
export const DEFAULT_VARENTROPY_THRESHOLD = 5.0;
/** Steps averaged over when none is given: about one page of generated tokens (block size 16). */
export const DEFAULT_TRIGGER_WINDOW = 16;
/** The longest window the command line accepts: each sequence keeps two f64 arrays of this length. */
export const MAX_TRIGGER_WINDOW = 4096;

export interface TokenUncertainty {
  /** H, nats. */
  entropy: number;
  /** Var(−log p), nats². */
  varentropy: number;
}

export interface UncertaintyTriggerOptions {
  /** Default DEFAULT_ENTROPY_THRESHOLD. */
  entropyThreshold?: number;
  /** Default DEFAULT_VARENTROPY_THRESHOLD. */
  varentropyThreshold?: number;
  /** Steps in the sliding window; default DEFAULT_TRIGGER_WINDOW. */
  windowSteps?: number;
  /** Steps observed (since construction or reset) before the trigger can fire; default windowSteps. */
  minSteps?: number;
}

/**
 * Entropy and varentropy of softmax(logits / temperature), in f64 with the log-sum-exp shift.
 * −Infinity logits are masked tokens (probability 0); NaN or +Infinity throws, as does a row with
 * no finite logit.
 */
export function tokenUncertainty(logits: ArrayLike<number>, temperature = 1): TokenUncertainty {
  if (!(temperature > 0) || !Number.isFinite(temperature)) throw new RangeError(`temperature must be a positive number (got ${temperature})`);
  const n = logits.length;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (Number.isNaN(x) || x === Infinity) throw new RangeError(`logits must not be NaN or +Infinity (logit ${i} is ${x})`);
    if (x > max) max = x;
  }
  if (max === -Infinity) throw new RangeError("logits need at least one finite value");
  const inv = 1 / temperature;
  let z = 0;
  for (let i = 0; i < n; i++) z += Math.exp((logits[i]! - max) * inv);
  const logZ = Math.log(z);
  // One pass for E[s] and E[s²] of the surprisal s = −log p would cancel badly; two passes.
  let entropy = 0;
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (x === -Infinity) continue;
    const logp = (x - max) * inv - logZ;
    entropy -= Math.exp(logp) * logp;
  }
  let varentropy = 0;
  for (let i = 0; i < n; i++) {
    const x = logits[i]!;
    if (x === -Infinity) continue;
    const logp = (x - max) * inv - logZ;
    const d = logp + entropy;
    varentropy += Math.exp(logp) * d * d;
  }
  return { entropy: Math.max(0, entropy), varentropy: Math.max(0, varentropy) };
}

/**
 * Thresholds at the given percentile (default 0.99, as in the paper) of windowed means collected
 * offline on a calibration set; linear interpolation between order statistics (NumPy's default).
 */
export function calibrateThresholds(
  samples: readonly TokenUncertainty[],
  percentile = 0.99,
): { entropyThreshold: number; varentropyThreshold: number } {
  if (samples.length === 0) throw new RangeError("calibrateThresholds needs at least one sample");
  if (!(percentile >= 0 && percentile <= 1)) throw new RangeError(`percentile must be in [0, 1] (got ${percentile})`);
  const quantile = (values: number[]): number => {
    values.sort((a, b) => a - b);
    const at = percentile * (values.length - 1);
    const lo = Math.floor(at);
    const hi = Math.min(lo + 1, values.length - 1);
    return values[lo]! + (values[hi]! - values[lo]!) * (at - lo);
  };
  return {
    entropyThreshold: quantile(samples.map((s) => s.entropy)),
    varentropyThreshold: quantile(samples.map((s) => s.varentropy)),
  };
}

/**
 * The mean entropy and varentropy of every full window of `windowSteps` consecutive steps of one
 * sequence (steps.length - windowSteps + 1 of them; none when the sequence is shorter): the values
 * UncertaintyTrigger compares with its thresholds once its window is full.
 */
export function windowedMeans(steps: readonly TokenUncertainty[], windowSteps: number): TokenUncertainty[] {
  if (!Number.isInteger(windowSteps) || windowSteps < 1) throw new RangeError(`windowSteps must be an integer >= 1 (got ${windowSteps})`);
  const means: TokenUncertainty[] = [];
  // Sums recomputed per window: a running sum would drift over long sequences and the windows are short.
  for (let end = windowSteps; end <= steps.length; end++) {
    let entropy = 0;
    let varentropy = 0;
    for (let i = end - windowSteps; i < end; i++) {
      entropy += steps[i]!.entropy;
      varentropy += steps[i]!.varentropy;
    }
    means.push({ entropy: entropy / windowSteps, varentropy: varentropy / windowSteps });
  }
  return means;
}

export class UncertaintyTrigger {
  readonly entropyThreshold: number;
  readonly varentropyThreshold: number;
  readonly windowSteps: number;
  readonly minSteps: number;

  private readonly entropies: Float64Array;
  private readonly varentropies: Float64Array;
  /** Steps observed since construction or reset. */
  private observed = 0;

  constructor(options: UncertaintyTriggerOptions = {}) {
    const {
      entropyThreshold = DEFAULT_ENTROPY_THRESHOLD,
      varentropyThreshold = DEFAULT_VARENTROPY_THRESHOLD,
      windowSteps = DEFAULT_TRIGGER_WINDOW,
    } = options;
    const minSteps = options.minSteps ?? windowSteps;
    if (typeof entropyThreshold !== "number" || Number.isNaN(entropyThreshold)) throw new RangeError(`entropyThreshold must be a number (got ${entropyThreshold})`);
    if (typeof varentropyThreshold !== "number" || Number.isNaN(varentropyThreshold)) throw new RangeError(`varentropyThreshold must be a number (got ${varentropyThreshold})`);
    if (!Number.isInteger(windowSteps) || windowSteps < 1) throw new RangeError(`windowSteps must be an integer >= 1 (got ${windowSteps})`);
    if (!Number.isInteger(minSteps) || minSteps < 1 || minSteps > windowSteps) {
      throw new RangeError(`minSteps must be an integer in [1, windowSteps] (got ${minSteps})`);
    }
    this.entropyThreshold = entropyThreshold;
    this.varentropyThreshold = varentropyThreshold;
    this.windowSteps = windowSteps;
    this.minSteps = minSteps;
    this.entropies = new Float64Array(windowSteps);
    this.varentropies = new Float64Array(windowSteps);
  }

  /** Steps in the window now (at most windowSteps). */
  get steps(): number {
    return Math.min(this.observed, this.windowSteps);
  }

  /** Mean entropy of the window (0 when empty). */
  get meanEntropy(): number {
    return this.mean(this.entropies);
  }

  /** Mean varentropy of the window (0 when empty). */
  get meanVarentropy(): number {
    return this.mean(this.varentropies);
  }

  /** Adds one step's uncertainty (from tokenUncertainty, or computed elsewhere). */
  observe(step: TokenUncertainty): void {
    if (!Number.isFinite(step.entropy) || !Number.isFinite(step.varentropy)) {
      throw new RangeError(`entropy and varentropy must be finite (got ${step.entropy}, ${step.varentropy})`);
    }
    const slot = this.observed % this.windowSteps;
    this.entropies[slot] = step.entropy;
    this.varentropies[slot] = step.varentropy;
    this.observed++;
  }

  /** Adds one step from its next-token logits; returns that step's uncertainty. */
  observeLogits(logits: ArrayLike<number>, temperature = 1): TokenUncertainty {
    const step = tokenUncertainty(logits, temperature);
    this.observe(step);
    return step;
  }

  /** True when at least minSteps were observed and the windowed mean entropy or varentropy is above its threshold. */
  shouldReconstruct(): boolean {
    if (this.observed < this.minSteps) return false;
    return this.meanEntropy > this.entropyThreshold || this.meanVarentropy > this.varentropyThreshold;
  }

  /** Forgets every step (after a reconstruction, so the next one needs fresh evidence). */
  reset(): void {
    this.observed = 0;
    this.entropies.fill(0);
    this.varentropies.fill(0);
  }

  private mean(values: Float64Array): number {
    const n = this.steps;
    if (n === 0) return 0;
    let sum = 0;
    for (let i = 0; i < n; i++) sum += values[i]!;
    return sum / n;
  }
}
