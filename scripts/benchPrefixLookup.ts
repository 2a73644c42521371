/**
 * The prefix cache's admission bookkeeping on its own (scripts/bench-prefix-cache.ts, part 4):
 * a PrefixBlockCache holding `cachedBlocks` unreferenced blocks (chains of whole prompts, as
 * ended requests leave them), then per request what the scheduler does to admit a plain prompt:
 * hash its full blocks (chained SHA-256, promptBlockHashes) and look up the longest cached run;
 * acquire and release (the references a running sequence holds) are timed too. Medians over
 * `repeats` requests, each timed on its own.
 */
import { seededRandom } from "../src/index/seededRandom.ts";
import { PrefixBlockCache, promptBlockHashes } from "../src/kv/prefixBlockCache.ts";
import { median } from "./benchKit.ts";

export interface PrefixLookupOptions {
  cachedBlocks: number;
  promptTokens: number;
  /** Of the measured prompt, tokens that a cached prompt shares (the rest is new). */
  sharedTokens: number;
  blockSize: number;
  repeats: number;
}

export interface PrefixLookupResult extends PrefixLookupOptions {
  promptBlocks: number;
  hitBlocks: number;
  /** Medians, ms per request. */
  hashMs: number;
  lookupMs: number;
  /** The same hashes looked up once more (the cache's entries and the strings' hash codes now warm). */
  lookupAgainMs: number;
  lookupMissMs: number;
  acquireReleaseMs: number;
  fillMs: number;
}

const SEED = "bench-prefix-lookup";

function randomTokens(count: number, next: () => number): number[] {
  return Array.from({ length: count }, () => Math.floor(next() * 32000));
}

function timed(run: () => void): number {
  const started = performance.now();
  run();
  return performance.now() - started;
}

export function benchPrefixLookup(options: PrefixLookupOptions): PrefixLookupResult {
  const { cachedBlocks, promptTokens, sharedTokens, blockSize, repeats } = options;
  const next = seededRandom(19);
  const cache = new PrefixBlockCache();
  const cachedPrompts: number[][] = [];
  let block = 0;
  const fillMs = timed(() => {
    while (block < cachedBlocks) {
      const tokens = randomTokens(promptTokens, next);
      const hashes = promptBlockHashes(SEED, tokens, blockSize).slice(0, cachedBlocks - block);
      hashes.forEach((hash, i) => cache.insert(hash, i === 0 ? null : hashes[i - 1]!, block++));
      cache.release(hashes);
      cachedPrompts.push(tokens);
    }
  });

  const hash: number[] = [];
  const lookup: number[] = [];
  const lookupAgain: number[] = [];
  const lookupMiss: number[] = [];
  const acquireRelease: number[] = [];
  let hitBlocks = 0;
  let promptBlocks = 0;
  for (let r = 0; r < repeats; r++) {
    const shared = cachedPrompts[r % cachedPrompts.length]!.slice(0, sharedTokens);
    const prompt = [...shared, ...randomTokens(promptTokens - sharedTokens, next)];
    let hashes: string[] = [];
    hash.push(timed(() => (hashes = promptBlockHashes(SEED, prompt, blockSize))));
    let hit: number[] = [];
    lookup.push(timed(() => (hit = cache.lookup(hashes))));
    lookupAgain.push(timed(() => cache.lookup(hashes)));
    const held = hashes.slice(0, hit.length);
    acquireRelease.push(timed(() => (cache.acquire(held), cache.release(held))));
    const fresh = promptBlockHashes(SEED, randomTokens(promptTokens, next), blockSize);
    lookupMiss.push(timed(() => cache.lookup(fresh)));
    hitBlocks = hit.length;
    promptBlocks = hashes.length;
  }
  if (cache.size !== cachedBlocks) throw new Error(`the cache holds ${cache.size} blocks, not ${cachedBlocks}`);
  return {
    ...options,
    promptBlocks,
    hitBlocks,
    hashMs: median(hash),
    lookupMs: median(lookup),
    lookupAgainMs: median(lookupAgain),
    lookupMissMs: median(lookupMiss),
    acquireReleaseMs: median(acquireRelease),
    fillMs,
  };
}
