/**
 * Iterated local search for users who trade build time for hit ratio
 * (`--search-iterations`): each iteration shuffles a few contexts of the best
 * ordering so far, lets reinsertion search re-place them, and keeps the result
 * when it shares at least as much. Deterministic: a fixed-seed generator.
 *
 * Finally every context keeps its shared prefix and gets its private tail back
 * in the original order (a private tail's order never changes a hit), so the
 * shuffles leave no trace in the retriever's order beyond what sharing needs.
 */
import type { ContextSet } from "./contextSet.ts";
import { sharedPrefixLength, treeHits } from "./contextTree.ts";
import { prefixTreeOfSequences } from "./prefixTreeOfSequences.ts";
import { reinsertionSearch } from "./reinsertionSearch.ts";
import { seededRandom } from "./seededRandom.ts";

export interface IteratedSearchOptions {
  iterations: number;
  /** Share of contexts shuffled per iteration (default 0.05, at least one). */
  perturbShare?: number;
  seed?: number;
}

/** Improves `ordered` in place; returns the hit blocks (unlimited cache) of the result. */
export function iteratedSearch(set: ContextSet, ordered: Int32Array, options: IteratedSearchOptions): number {
  const { offsets } = set;
  const random = seededRandom(options.seed ?? 0x9e3779b9);
  const share = options.perturbShare ?? 0.05;
  let best = ordered.slice();
  let bestHits = treeHits(prefixTreeOfSequences(set, best));

  for (let iteration = 0; iteration < options.iterations; iteration++) {
    const candidate = best.slice();
    let shuffled = 0;
    for (let c = 0; c < set.size; c++) {
      if (random() >= share && !(c === set.size - 1 && shuffled === 0)) continue;
      shuffleSegment(candidate, offsets[c]!, offsets[c + 1]!, random);
      shuffled++;
    }
    reinsertionSearch(set, candidate, { passes: 5 });
    const hits = treeHits(prefixTreeOfSequences(set, candidate));
    if (hits >= bestHits) {
      best = candidate;
      bestHits = hits;
    }
  }

  restorePrivateTails(set, best);
  ordered.set(best);
  return bestHits;
}

function restorePrivateTails(set: ContextSet, ordered: Int32Array): void {
  const tree = prefixTreeOfSequences(set, ordered);
  for (let c = 0; c < set.size; c++) {
    const start = set.offsets[c]!;
    const end = set.offsets[c + 1]!;
    const shared = sharedPrefixLength(tree, c);
    const prefix = new Set(ordered.subarray(start, start + shared));
    let w = start + shared;
    for (let f = start; f < end; f++) if (!prefix.has(set.flat[f]!)) ordered[w++] = set.flat[f]!;
  }
}

function shuffleSegment(values: Int32Array, start: number, end: number, random: () => number): void {
  for (let i = end - 1; i > start; i--) {
    const j = start + Math.floor(random() * (i - start + 1));
    const t = values[i]!;
    values[i] = values[j]!;
    values[j] = t;
  }
}
