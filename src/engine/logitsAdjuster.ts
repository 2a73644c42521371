/**
 * What a request asks to change in the logits before its next token is sampled, the way OpenAI
 * and vLLM define each knob (applied in this order, to a copy of the runner's logits):
 *
 * - repetition penalty (vLLM / Hugging Face): every token seen in the prompt or the output so far
 *   has its logit divided by the penalty when positive, multiplied by it when not (1: off);
 * - frequency and presence penalties (OpenAI): logit −= frequency · count + presence · [count > 0],
 *   count being the token's occurrences in the output so far (not the prompt);
 * - logit bias (OpenAI): a fixed amount added to a token's logit (−100 bans it, 100 forces it);
 * - allowed token ids (vLLM): every other token is impossible.
 *
 * The reported logprobs stay those of the raw logits (as OpenAI and vLLM report them by default).
 */

export interface LogitsAdjustments {
  /** > 0; 1 is off. */
  repetitionPenalty?: number;
  /** −2 to 2; 0 is off. */
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** Token id → bias in [−100, 100]. */
  logitBias?: ReadonlyMap<number, number>;
  /** The only tokens that may be generated (at least one). */
  allowedTokenIds?: readonly number[];
}

/** An adjustment out of range; `field` is the request field. */
export class LogitsAdjustmentError extends RangeError {
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
    this.name = "LogitsAdjustmentError";
  }
}

/** Throws LogitsAdjustmentError naming the request field when an adjustment is out of range. */
export function checkLogitsAdjustments(adjustments: LogitsAdjustments, vocab: number): void {
  const { repetitionPenalty, frequencyPenalty, presencePenalty, logitBias } = adjustments;
  if (repetitionPenalty !== undefined && !(Number.isFinite(repetitionPenalty) && repetitionPenalty > 0)) {
    throw new LogitsAdjustmentError(`must be a number > 0 (1: off), got ${repetitionPenalty}`, "repetition_penalty");
  }
  for (const [field, value] of [
    ["frequency_penalty", frequencyPenalty],
    ["presence_penalty", presencePenalty],
  ] as const) {
    if (value !== undefined && !(Number.isFinite(value) && value >= -2 && value <= 2)) throw new LogitsAdjustmentError(`must be between -2 and 2, got ${value}`, field);
  }
  const allowed = adjustments.allowedTokenIds;
  if (allowed !== undefined) {
    if (allowed.length === 0) throw new LogitsAdjustmentError("must list at least one token id", "allowed_token_ids");
    for (const id of allowed) if (!(Number.isSafeInteger(id) && id >= 0 && id < vocab)) throw new LogitsAdjustmentError(`token ${id} is not in the model's vocabulary (0 to ${vocab - 1})`, "allowed_token_ids");
  }
  for (const [id, bias] of logitBias ?? []) {
    if (!(Number.isSafeInteger(id) && id >= 0 && id < vocab)) throw new LogitsAdjustmentError(`token ${id} is not in the model's vocabulary (0 to ${vocab - 1})`, "logit_bias");
    if (!(Number.isFinite(bias) && bias >= -100 && bias <= 100)) throw new LogitsAdjustmentError(`the bias of token ${id} must be between -100 and 100, got ${bias}`, "logit_bias");
  }
}

/** Whether any adjustment would change the logits. */
export function adjustsLogits(adjustments: LogitsAdjustments): boolean {
  return (
    (adjustments.repetitionPenalty ?? 1) !== 1 ||
    (adjustments.frequencyPenalty ?? 0) !== 0 ||
    (adjustments.presencePenalty ?? 0) !== 0 ||
    (adjustments.logitBias !== undefined && adjustments.logitBias.size > 0) ||
    adjustments.allowedTokenIds !== undefined
  );
}

/** One sequence's adjustments, following its tokens. */
export class LogitsAdjuster {
  /** Tokens of the prompt and the output so far (repetition penalty). */
  private readonly seen = new Set<number>();
  /** Occurrences of each token in the output so far (frequency and presence penalties). */
  private readonly outputCounts = new Map<number, number>();
  private scratch = new Float32Array(0);
  private readonly allowed: ReadonlySet<number> | null;

  constructor(
    private readonly adjustments: LogitsAdjustments,
    promptIds: readonly number[],
  ) {
    if ((adjustments.repetitionPenalty ?? 1) !== 1) for (const id of promptIds) this.seen.add(id);
    this.allowed = adjustments.allowedTokenIds === undefined ? null : new Set(adjustments.allowedTokenIds);
  }

  /** A token was generated. */
  observe(id: number): void {
    if ((this.adjustments.repetitionPenalty ?? 1) !== 1) this.seen.add(id);
    this.outputCounts.set(id, (this.outputCounts.get(id) ?? 0) + 1);
  }

  /** The adjusted logits: a copy (the input is left as it is), reused by the next call. */
  apply(logits: Float32Array): Float32Array {
    if (this.scratch.length !== logits.length) this.scratch = new Float32Array(logits.length);
    const out = this.scratch;
    out.set(logits);
    const { repetitionPenalty = 1, frequencyPenalty = 0, presencePenalty = 0, logitBias } = this.adjustments;
    if (repetitionPenalty !== 1) {
      for (const id of this.seen) {
        const value = out[id]!;
        out[id] = value > 0 ? value / repetitionPenalty : value * repetitionPenalty;
      }
    }
    if (frequencyPenalty !== 0 || presencePenalty !== 0) {
      for (const [id, count] of this.outputCounts) out[id] = out[id]! - frequencyPenalty * count - presencePenalty;
    }
    if (logitBias !== undefined) for (const [id, bias] of logitBias) out[id] = out[id]! + bias;
    if (this.allowed !== null) for (let id = 0; id < out.length; id++) if (!this.allowed.has(id)) out[id] = -Infinity;
    return out;
  }
}
