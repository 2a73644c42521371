/**
 * Offline context-index build: reorder each context's blocks and schedule the
 * contexts so that a prefix cache hits as often as possible.
 * (TEMPORARY placeholder implementation while the real one is written: keeps input order.)
 */
import type { ContextSet } from "./contextSet.ts";
import { contextBlocks } from "./contextSet.ts";

export type LinkageMethod = "average" | "single" | "complete";
export type IndexMethod = "auto" | "cluster" | "trie";

export interface IndexBuildOptions {
  /** Position weight of the context distance (paper eq. 1). */
  alpha?: number;
  linkage?: LinkageMethod;
  method?: IndexMethod;
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
  /** Leading blocks this context shares with its group (its node's prefix). */
  readonly prefixBlocks: number;
}

export interface IndexBuildResult {
  /** Contexts in the order to run them. */
  readonly scheduled: ScheduledContext[];
  /** The method that produced the schedule ("cluster" or "trie"). */
  readonly method: "cluster" | "trie";
}

export function buildContextIndex(set: ContextSet, _options: IndexBuildOptions = {}): IndexBuildResult {
  const scheduled: ScheduledContext[] = [];
  for (let i = 0; i < set.size; i++) {
    scheduled.push({ input: i, blocks: contextBlocks(set, i).slice(), path: [i], prefixBlocks: 0 });
  }
  return { scheduled, method: "trie" };
}
