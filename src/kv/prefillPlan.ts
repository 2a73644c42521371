/**
 * Reuse planning per segment (pure): the longest exact prefix first — either the
 * prompt's first `cachedTokens` tokens, already in its block table from the
 * automatic prefix cache ("blocks"; a segment they end inside is computed from
 * there), or else a radix over chunk hashes (exact variants: no recompute) —
 * then for every other segment the cached variant with the lowest cache-fix
 * overhead (CFO, Cache-Craft eq. 12), or compute it when none is cached.
 */
import type { ChunkVariant, ChunkVariantIndex } from "./chunkVariantIndex.ts";
import { chooseVariant, type ContextScores } from "./reuseScores.ts";
import type { RecomputePolicy } from "./recomputeSelection.ts";
import { segmentBounds, type SegmentedPrompt } from "./segmentedPrompt.ts";

export type SegmentPlan =
  | { kind: "blocks" }
  | { kind: "prefix"; variant: ChunkVariant }
  | { kind: "reuse"; variant: ChunkVariant; cfo: number; beta: number; gamma: number }
  | { kind: "compute" };

export function planPrefill(
  index: ChunkVariantIndex,
  prompt: SegmentedPrompt,
  policy: RecomputePolicy,
  alpha: number,
  scores: ContextScores = "attention",
  cachedTokens = 0,
): SegmentPlan[] {
  const hashes = prompt.segments.map((s) => s.hash);
  if (policy === "full") return hashes.map(() => ({ kind: "compute" }));
  const plans: SegmentPlan[] = [];
  if (cachedTokens > 0) {
    const bounds = segmentBounds(prompt);
    while (plans.length < hashes.length && bounds[plans.length + 1]! <= cachedTokens) plans.push({ kind: "blocks" });
    if (plans.length < hashes.length && bounds[plans.length]! < cachedTokens) plans.push({ kind: "compute" });
  } else {
    plans.push(...index.longestExactPrefix(hashes).map((variant): SegmentPlan => ({ kind: "prefix", variant })));
  }
  for (let s = plans.length; s < hashes.length; s++) {
    if (policy === "prefix") {
      plans.push({ kind: "compute" });
      continue;
    }
    const choice = chooseVariant(index.variantsOf(hashes[s]!), hashes.slice(0, s), alpha, scores);
    plans.push(choice === null ? { kind: "compute" } : { kind: "reuse", variant: choice.variant, cfo: choice.cfo, beta: choice.beta, gamma: choice.gamma });
  }
  return plans;
}
