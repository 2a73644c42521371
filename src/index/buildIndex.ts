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
import { allSearchPaths, contextsDepthFirst, sharedPrefixLength, type ContextTree } from "./contextTree.ts";
import type { ContextSet } from "./contextSet.ts";
import { greedyPrefixTrie, type OrderedContexts } from "./greedyPrefixTrie.ts";
import { scheduleBySearchPath } from "./schedule.ts";

export type LinkageMethod = "average" | "single" | "complete";
export type IndexMethod = "auto" | "cluster" | "trie";

export const DEFAULT_ALPHA = 0.001;
/** Candidates the greedy trie compares one level ahead at each pick. */
export const DEFAULT_LOOKAHEAD = 4;

export interface IndexBuildOptions {
  /** Position weight of the context distance (paper eq. 1); cluster method only. */
  alpha?: number;
  linkage?: LinkageMethod;
  method?: IndexMethod;
  lookahead?: number;
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
  const method = options.method === "cluster" ? "cluster" : "trie";
  const onProgress = options.onProgress;
  const ordering: OrderedContexts = greedyPrefixTrie(set, {
    lookahead: options.lookahead ?? DEFAULT_LOOKAHEAD,
    onProgress: onProgress && ((done, total) => onProgress("ordering", done, total)),
  });
  return scheduleOrderedContexts(set, ordering, method);
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
