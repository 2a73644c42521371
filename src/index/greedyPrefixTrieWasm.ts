/**
 * The greedy prefix trie computed by the WASM module (wasm/src/prefix_trie.rs): the same
 * algorithm as greedyPrefixTrieTs in greedyPrefixTrie.ts, with identical results, in one call
 * (progress is reported only at the start and the end).
 */
import { wasmGreedyPrefixTrie } from "../kernels/index.ts";
import type { ContextSet } from "./contextSet.ts";
import { contextTreeFromArrays } from "./contextTree.ts";
import type { GreedyTrieOptions, OrderedContexts } from "./orderedContexts.ts";

/** Largest lookahead the module takes (u32); more candidates than blocks never exist anyway. */
const MAX_LOOKAHEAD = 0xffffffff;

export function greedyPrefixTrieWasm(set: ContextSet, options: GreedyTrieOptions = {}): OrderedContexts {
  const onProgress = options.onProgress;
  onProgress?.(0, set.size);
  const { ordered, parent, prefixLength, leafOf } = wasmGreedyPrefixTrie(
    { flat: set.flat, offsets: set.offsets, blockCount: set.blockIds.length },
    candidateCount(options.lookahead),
  );
  const tree = contextTreeFromArrays(parent, prefixLength, leafOf);
  onProgress?.(set.size, set.size);
  return { ordered, tree };
}

/**
 * The lookahead as the TS twin uses it: it collects candidates while fewer than `lookahead`,
 * so 2.5 means 3, and anything not > 0 (NaN included) means plain greedy.
 */
function candidateCount(lookahead: number | undefined): number {
  if (lookahead === undefined || !(lookahead > 0)) return 0;
  return Math.min(Math.ceil(lookahead), MAX_LOOKAHEAD);
}
