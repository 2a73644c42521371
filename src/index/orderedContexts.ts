/**
 * What an ordering of a context set returns, and the options of the greedy prefix trie: the
 * contract its two twins (greedyPrefixTrie.ts, greedyPrefixTrieWasm.ts) and their callers share.
 */
import type { ContextTree } from "./contextTree.ts";

export interface OrderedContexts {
  /** Reordered dense block numbers; same offsets as the input set. */
  readonly ordered: Int32Array;
  readonly tree: ContextTree;
}

export interface GreedyTrieOptions {
  /** Candidates compared one level ahead at each pick (0 or 1: plain greedy). */
  lookahead?: number;
  /** Contexts finished so far (TS: every 1,024; WASM: only at the start and the end). */
  onProgress?: (done: number, total: number) => void;
}
