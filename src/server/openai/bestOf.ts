/**
 * best_of (OpenAI completions): of the candidates generated for one prompt, the `n` returned are
 * those with the highest log probability per token, best first (ties: the earlier candidate).
 */
import type { GeneratedToken } from "../../engine/generationTypes.ts";

/** Mean logprob of the tokens (−Infinity for none). */
export function logprobPerToken(tokens: readonly GeneratedToken[]): number {
  if (tokens.length === 0) return -Infinity;
  let sum = 0;
  for (const token of tokens) sum += token.logprob ?? -Infinity;
  return sum / tokens.length;
}

/** Positions of the `n` best candidates, best first. */
export function bestCandidates(candidates: readonly { tokens: readonly GeneratedToken[] }[], n: number): number[] {
  const scores = candidates.map((candidate) => logprobPerToken(candidate.tokens));
  return [...candidates.keys()].sort((a, b) => scores[b]! - scores[a]! || a - b).slice(0, n);
}
