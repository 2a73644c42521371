/**
 * Reuse planning per segment (pure): the longest exact prefix first (a radix
 * over chunk hashes: those variants need no recompute), then for every other
 * segment the cached variant with the lowest cache-fix overhead (CFO, Cache-Craft
 * eq. 12), or compute it when none is cached.
 */
import type { ChunkVariant, ChunkVariantIndex } from "./chunkVariantIndex.ts";
import { chooseVariant, type ContextScores } from "./reuseScores.ts";
import type { RecomputePolicy } from "./recomputeSelection.ts";
import type { SegmentedPrompt } from "./segmentedPrompt.ts";

export type SegmentPlan =
  | { kind: "prefix"; variant: ChunkVariant }
  | { kind: "reuse"; variant: ChunkVariant; cfo: number; beta: number; gamma: number }
  | { kind: "compute" };

export function planPrefill(index: ChunkVariantIndex, prompt: SegmentedPrompt, policy: RecomputePolicy, alpha: number, scores: ContextScores = "attention"): SegmentPlan[] {
  const hashes = prompt.segments.map((s) => s.hash);
  if (policy === "full") return hashes.map(() => ({ kind: "compute" }));
  const exact = index.longestExactPrefix(hashes);
  const plans: SegmentPlan[] = exact.map((variant) => ({ kind: "prefix", variant }));
  for (let s = exact.length; s < hashes.length; s++) {
    if (policy === "prefix") {
      plans.push({ kind: "compute" });
      continue;
    }
    const choice = chooseVariant(index.variantsOf(hashes[s]!), hashes.slice(0, s), alpha, scores);
    plans.push(choice === null ? { kind: "compute" } : { kind: "reuse", variant: choice.variant, cfo: choice.cfo, beta: choice.beta, gamma: choice.gamma });
  }
  return plans;
}
