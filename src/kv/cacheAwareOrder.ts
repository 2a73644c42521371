/**
 * Cache-aware admission order of queued KV-managed prefills (Strata §4.3), pure:
 *
 * 1. delay hits: a request that needs a chunk that is not cached yet but that an
 *    earlier queued request (or a running one) will compute is deferred — it stays
 *    at the front of the queue and runs right after, as a hit, instead of
 *    computing the chunk again;
 * 2. balanced batches (Strata Algorithm 1): requests are taken in queue order
 *    while the batch's load (tokens read from host or disk) stays within
 *    `loadBoundRatio` × its compute (tokens to compute); each admitted request pulls
 *    its bundle hits (queued requests sharing a chunk with it) in right behind it;
 *    loading-bound requests are deprioritised, keep their order, and fill the rest.
 *    The first request of the queue always goes first (no starvation).
 */

export interface QueuedPrefill {
  /** Hashes of the chunks with no cached variant (they will be computed). */
  newChunks: readonly string[];
  /** Hashes of the chunks with a cached variant. */
  cachedChunks: readonly string[];
  /** Tokens of cached chunks that sit on host or disk (a load). */
  loadTokens: number;
  /** Tokens to compute (new chunks and the question). */
  computeTokens: number;
}

export interface CacheAwareOrderOptions {
  /** Load/compute ratio above which a batch is loading-bound (Strata's default 100). */
  loadBoundRatio?: number;
  /** Chunks some running request is computing right now. */
  inFlight?: (hash: string) => boolean;
}

export interface CacheAwareOrder {
  /** Queue indices to admit, in order. */
  admit: number[];
  /** Queue indices deferred on a delay hit (they stay queued, in their order). */
  deferred: number[];
}

export function cacheAwareOrder(queue: readonly QueuedPrefill[], options: CacheAwareOrderOptions = {}): CacheAwareOrder {
  const ratio = options.loadBoundRatio ?? 100;
  const inFlight = options.inFlight ?? (() => false);

  // 1. Delay hits: the first request to need a new chunk computes it.
  const claimed = new Set<string>();
  const candidates: number[] = [];
  const deferred: number[] = [];
  queue.forEach((request, i) => {
    if (request.newChunks.some((hash) => claimed.has(hash) || inFlight(hash))) {
      deferred.push(i);
      return;
    }
    for (const hash of request.newChunks) claimed.add(hash);
    candidates.push(i);
  });

  // 2. Balanced batch with bundle hits.
  const chunksOf = (i: number) => new Set([...queue[i]!.newChunks, ...queue[i]!.cachedChunks]);
  const admit: number[] = [];
  const deprioritised: number[] = [];
  const taken = new Set<number>();
  let load = 0;
  let compute = 0;
  const take = (i: number) => {
    taken.add(i);
    admit.push(i);
    load += queue[i]!.loadTokens;
    compute += queue[i]!.computeTokens;
  };
  for (const i of candidates) {
    if (taken.has(i)) continue;
    const request = queue[i]!;
    const loadingBound = (load + request.loadTokens) > ratio * Math.max(1, compute + request.computeTokens);
    if (admit.length > 0 && loadingBound) {
      deprioritised.push(i);
      continue;
    }
    take(i);
    const mine = chunksOf(i);
    for (const j of candidates) {
      if (taken.has(j) || deprioritised.includes(j)) continue;
      if ([...chunksOf(j)].some((hash) => mine.has(hash))) take(j);
    }
  }
  for (const i of deprioritised) if (!taken.has(i)) admit.push(i);
  return { admit, deferred };
}
