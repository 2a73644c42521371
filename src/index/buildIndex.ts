/**
 * Offline context-index build: reorder each context's blocks so that contexts
 * share prefixes, then schedule them so sharers run back to back.
 *
 * Two ordering methods produce the same kind of tree:
 *  - "cluster": ContextPilot's Algorithm 4 (pairwise distances, linkage
 *    clustering, intersection tree, prefix reordering). O(N²) time and memory.
 *  - "trie": a greedy prefix trie over block co-occurrence, O(N·k²).
 * Scheduling is ContextPilot's Algorithm 5 over the tree's search paths.
 */
import { allSearchPaths, contextsDepthFirst, sharedPrefixLength, treeHits, type ContextTree } from "./contextTree.ts";
import { hoistCommonBlocks } from "./hoistCommonBlocks.ts";
import { reinsertionSearch } from "./reinsertionSearch.ts";
import { iteratedSearch } from "./iteratedSearch.ts";
import type { ContextSet } from "./contextSet.ts";
import { greedyPrefixTrie } from "./greedyPrefixTrie.ts";
import type { OrderedContexts } from "./orderedContexts.ts";
import { scheduleBySearchPath } from "./schedule.ts";
import { checkClusterFits } from "./clusterMemory.ts";
import { clusterOrdering } from "./clusterOrdering.ts";
import { DEFAULT_ALPHA, type LinkageMethod } from "../kernels/index.ts";

export type { LinkageMethod };
export type IndexMethod = "auto" | "cluster" | "trie";

/** Candidates the greedy trie compares one level ahead at each pick. */
export const DEFAULT_LOOKAHEAD = 4;
/**
 * Up to this many contexts, "auto" also runs exact clustering (O(N²): about
 * 0.2 s at 2,000) and keeps whichever ordering shares more prefix blocks.
 */
export const AUTO_CLUSTER_LIMIT = 2_000;
/** Up to this many contexts, the trie's ordering is refined by reinsertion search. */
export const REFINE_LIMIT = 4_000;

export interface IndexBuildOptions {
  /** Position weight of the context distance (paper eq. 1); cluster method only. */
  alpha?: number;
  linkage?: LinkageMethod;
  method?: IndexMethod;
  lookahead?: number;
  /** Iterated-search rounds after the trie (trades build time for hit ratio; default 0). */
  searchIterations?: number;
  /** Called now and then during long builds: done/total units of the named phase. */
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface ScheduledContext {
  /** Position of the context in the input. */
  readonly input: number;
  /** Dense block numbers in their new order (a permutation of the input's). */
  readonly blocks: Int32Array;
  /** Search path: child positions from the root down to the context's leaf. */
  readonly path: number[];
  /** Leading blocks this context shares with at least one other context. */
  readonly prefixBlocks: number;
}

export interface IndexBuildResult {
  /** Contexts in the order to run them. */
  readonly scheduled: ScheduledContext[];
  /** The method that produced the schedule. */
  readonly method: "cluster" | "trie";
  readonly tree: ContextTree;
}

export function buildContextIndex(set: ContextSet, options: IndexBuildOptions = {}): IndexBuildResult {
  const requested = options.method ?? "auto";
  if (requested === "cluster") {
    checkClusterFits(set);
    return scheduleOrderedContexts(set, orderByClustering(set, options), "cluster");
  }
  const trie = orderByTrie(set, options);
  if (requested === "trie" || set.size > AUTO_CLUSTER_LIMIT) return scheduleOrderedContexts(set, trie, "trie");
  // Small batches: clustering is cheap here, so keep whichever shares more.
  const cluster = orderByClustering(set, options);
  const better = treeHits(cluster.tree) > treeHits(trie.tree) ? "cluster" : "trie";
  return scheduleOrderedContexts(set, better === "cluster" ? cluster : trie, better);
}

function orderByClustering(set: ContextSet, options: IndexBuildOptions): OrderedContexts {
  return clusterOrdering(set, { alpha: options.alpha ?? DEFAULT_ALPHA, linkage: options.linkage ?? "average", onProgress: options.onProgress });
}

function orderByTrie(set: ContextSet, options: IndexBuildOptions): OrderedContexts {
  const onProgress = options.onProgress;
  const greedy = greedyPrefixTrie(set, {
    lookahead: options.lookahead ?? DEFAULT_LOOKAHEAD,
    onProgress: onProgress && ((done, total) => onProgress("ordering", done, total)),
  });
  const iterations = options.searchIterations ?? 0;
  let moved = false;
  if (set.size <= REFINE_LIMIT) moved = reinsertionSearch(set, greedy.ordered).moves > 0;
  if (iterations > 0) {
    iteratedSearch(set, greedy.ordered, { iterations });
    moved = true;
  }
  return moved ? { ordered: greedy.ordered, tree: hoistCommonBlocks(set, greedy.ordered) } : greedy;
}

export function scheduleOrderedContexts(
  set: ContextSet,
  { ordered, tree }: OrderedContexts,
  method: "cluster" | "trie",
): IndexBuildResult {
  const nodePaths = allSearchPaths(tree);
  const contextPaths = Array.from(tree.leafOf, (leaf) => nodePaths[leaf]!);
  const order = scheduleBySearchPath(contextPaths, Array.from(contextsDepthFirst(tree)));
  const scheduled = order.map((c) => ({
    input: c,
    blocks: ordered.subarray(set.offsets[c]!, set.offsets[c + 1]!),
    path: contextPaths[c]!,
    prefixBlocks: sharedPrefixLength(tree, c),
  }));
  return { scheduled, method, tree };
}
