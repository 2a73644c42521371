/**
 * How far an answer from reused KV is from the one full prefill gives, on the same prompt
 * (issue 31's audit, adaptive ratio and `ctxr reuse calibrate` all use these definitions):
 *
 * - the first token: whether the two logit rows have the same top-1 token, and the KL
 *   divergence KL(full ‖ reused) of their softmax distributions (nats);
 * - the next greedy tokens: how many of the N tokens decoded greedily from the reused KV agree
 *   with full prefill's before the first difference. After a difference the two continue from
 *   different text, so later matches say nothing: the agreement is the common prefix over N.
 *
 * A sample's agreement (what `--reuse-target-agreement` aims at) is that prefix share; the first
 * token counts as one of the N.
 */

export interface FirstTokenComparison {
  /** The reused row's argmax is full prefill's argmax. */
  topOneAgrees: boolean;
  /** KL(full ‖ reused) in nats, ≥ 0. */
  klDivergence: number;
}

export interface GreedyComparison {
  /** Tokens compared (the shorter of the two sequences, at most the audit's N). */
  tokens: number;
  /** Leading tokens equal in both. */
  agreedPrefix: number;
  /** agreedPrefix / tokens (1 when no token was compared). */
  agreement: number;
}

/** One audited request's figures, keyed by what served it. */
export interface AgreementSample extends FirstTokenComparison, GreedyComparison {
  model: string;
  policy: string;
  ratio: number;
}

/** Index of the largest value; the first one on ties. */
export function argmax(row: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** log Σ exp(row), in f64, stable for any finite row. */
function logSumExp(row: ArrayLike<number>): number {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i]! > max) max = row[i]!;
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! - max);
  return max + Math.log(sum);
}

/**
 * KL(p ‖ q) of the softmax distributions of two logit rows of one vocabulary, in nats. Tokens
 * that p gives no mass (a -Infinity logit) add nothing; a token p gives mass and q excludes
 * makes it Infinity.
 */
export function klDivergence(pLogits: ArrayLike<number>, qLogits: ArrayLike<number>): number {
  if (pLogits.length !== qLogits.length) {
    throw new RangeError(`logit rows differ in length: ${pLogits.length} vs ${qLogits.length}`);
  }
  const pNorm = logSumExp(pLogits);
  const qNorm = logSumExp(qLogits);
  let kl = 0;
  for (let i = 0; i < pLogits.length; i++) {
    const logP = pLogits[i]! - pNorm;
    if (logP === -Infinity) continue;
    const logQ = qLogits[i]! - qNorm;
    kl += Math.exp(logP) * (logP - logQ);
  }
  // Rounding can leave a tiny negative sum for identical rows.
  return kl > 0 ? kl : 0;
}

/** The first token's figures: full prefill's row is the reference. */
export function compareFirstToken(fullLogits: ArrayLike<number>, reusedLogits: ArrayLike<number>): FirstTokenComparison {
  return {
    topOneAgrees: argmax(fullLogits) === argmax(reusedLogits),
    klDivergence: klDivergence(fullLogits, reusedLogits),
  };
}

/** The greedy continuations' figures (both start with the first generated token). */
export function compareGreedyTokens(fullTokens: readonly number[], reusedTokens: readonly number[]): GreedyComparison {
  const tokens = Math.min(fullTokens.length, reusedTokens.length);
  let agreedPrefix = 0;
  while (agreedPrefix < tokens && fullTokens[agreedPrefix] === reusedTokens[agreedPrefix]) agreedPrefix++;
  return { tokens, agreedPrefix, agreement: tokens === 0 ? 1 : agreedPrefix / tokens };
}
