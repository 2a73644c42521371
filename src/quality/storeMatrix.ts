/**
 * The quality benchmark's storing-policy axis (issue 31, item 7): each example's chunks are first
 * stored by one policy's request (the warm-up, qualityClient.ts), then every measured cell reuses
 * them. Item 1 measures every stored variant's shift whichever policy stored it, so a cell's
 * accuracy should not depend on the storer; this axis, crossed with the server's
 * `--reuse-scoring` mode, is what shows it.
 */
import type { QualityPolicy, WarmUpResult } from "./qualityClient.ts";

/** Policies a warm-up may use (the request API's ctxr.policy values). */
export const STORING_POLICIES: readonly QualityPolicy[] = ["cachecraft", "prophet", "epic", "none", "prefix", "full"];

/**
 * How the benchmark's server scores stored variants: `sync` and `idle` are `ctxr serve
 * --reuse-scoring` modes (idle: the question comes right after the warm-up, before the idle time
 * may have scored its chunks); `idle-settled` is `idle` with each question waiting until no shift
 * measurement is pending or running (what a request meets once the engine has had its idle time).
 */
export const REUSE_SCORING_MODES = ["sync", "idle", "idle-settled"] as const;
export type ReuseScoringMode = (typeof REUSE_SCORING_MODES)[number];

/** The server's `--reuse-scoring` for a benchmark mode. */
export function serverReuseScoring(mode: ReuseScoringMode): "sync" | "idle" {
  return mode === "sync" ? "sync" : "idle";
}

/** Today's behaviour: chunks stored by a cachecraft request (at ratio 0), shifts measured in the store-back. */
export const DEFAULT_STORE_POLICIES: readonly QualityPolicy[] = ["cachecraft"];
export const DEFAULT_REUSE_SCORING_MODES: readonly ReuseScoringMode[] = ["sync"];

/** A comma-separated list of distinct values from `allowed`; throws a message naming `flag` and the bad value. */
function parseList<T extends string>(flag: string, text: string, allowed: readonly T[]): T[] {
  const items = text.split(",").map((s) => s.trim());
  if (items.every((s) => s.length === 0)) throw new Error(`${flag} needs at least one of ${allowed.join(", ")}`);
  const out: T[] = [];
  for (const item of items) {
    if (item.length === 0) throw new Error(`${flag}: empty entry in '${text}'`);
    if (!(allowed as readonly string[]).includes(item)) throw new Error(`${flag}: unknown '${item}' (one of ${allowed.join(", ")})`);
    if (out.includes(item as T)) throw new Error(`${flag}: '${item}' given twice`);
    out.push(item as T);
  }
  return out;
}

/** `--store-policies cachecraft,prophet,epic,none,full`. */
export function parseStorePolicies(text: string): QualityPolicy[] {
  return parseList("--store-policies", text, STORING_POLICIES);
}

/** `--reuse-scoring sync,idle,idle-settled`. */
export function parseReuseScoringModes(text: string): ReuseScoringMode[] {
  return parseList("--reuse-scoring", text, REUSE_SCORING_MODES);
}

/**
 * Whether a warm-up left chunks for the cells to reuse. A chunk equal to one an earlier example
 * stored is found rather than stored again, so fewer than `documents` can still be a full cache;
 * none stored means the storer stores nothing (`full`), and the cells would reuse only what the
 * first of them stores in the measured order: not a measurement of this storer.
 */
export function warmUpStored(warmUp: WarmUpResult): boolean {
  return warmUp.chunksStored > 0;
}

/** The per-storer warm-up tally a benchmark reports. */
export class WarmUpTally {
  examples = 0;
  documents = 0;
  chunksStored = 0;
  /** Examples whose warm-up stored fewer chunks than documents. */
  partial = 0;
  /** Examples whose warm-up stored nothing (their cells were not asked). */
  empty = 0;
  readonly servedPolicies = new Set<string>();
  /** idle-settled: how long each question waited for the idle time to score the warm-up's chunks (ms). */
  readonly settledMs: number[] = [];

  add(warmUp: WarmUpResult): void {
    this.examples++;
    this.documents += warmUp.documents;
    this.chunksStored += Math.min(warmUp.chunksStored, warmUp.documents);
    if (warmUp.chunksStored === 0) this.empty++;
    else if (warmUp.chunksStored < warmUp.documents) this.partial++;
    if (warmUp.servedPolicy !== null) this.servedPolicies.add(warmUp.servedPolicy);
  }

  summary() {
    const settled = [...this.settledMs].sort((a, b) => a - b);
    const settleMedian = settled.length === 0 ? null : settled.length % 2 ? settled[settled.length >> 1]! : (settled[settled.length / 2 - 1]! + settled[settled.length / 2]!) / 2;
    return {
      examples: this.examples,
      documents: this.documents,
      chunks_stored: this.chunksStored,
      partial: this.partial,
      empty: this.empty,
      served_policies: [...this.servedPolicies],
      settle_ms_median: settleMedian,
    };
  }
}
