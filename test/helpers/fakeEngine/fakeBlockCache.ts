/**
 * The fake engine's prefix cache: `capacityBlocks` fixed-size token blocks named by chained
 * hashes (vLLM-style: a block's hash covers its parent's, so it stands for its whole prefix),
 * least recently used blocks evicted first (leaves before their parents), every change told to a
 * PrefixCacheEvents listener (the KV events publisher) and kept as the true contents that tests
 * compare a subscriber's view with.
 *
 * A request is admitted whole: the longest cached run of its blocks is its hit (never the whole
 * prompt: as vLLM, the last prompt token is always computed), the rest of its full blocks (prompt
 * and answer) are stored while it runs (evicting others when full; a block in use is never
 * evicted), and `release` ends it.
 */
import { PrefixBlockCache, promptBlockHashes, type PrefixCacheEvents, type StoredPrefixBlock } from "../../../src/kv/prefixBlockCache.ts";

export interface FakeBlock {
  parent: string | null;
  tokens: readonly number[];
}

export interface Admission {
  /** The request's block hashes it holds until release, in the cache it was admitted to. */
  held: string[];
  cache: PrefixBlockCache;
  /** Prompt tokens found cached. */
  cachedTokens: number;
}

export class FakeBlockCache {
  private cache: PrefixBlockCache;
  private readonly free: number[] = [];
  private readonly blocks = new Map<string, FakeBlock>();

  constructor(
    readonly blockSize: number,
    readonly capacityBlocks: number,
    private readonly seed: string,
    private readonly events: PrefixCacheEvents | null,
  ) {
    this.cache = this.newCache();
    for (let block = capacityBlocks - 1; block >= 0; block--) this.free.push(block);
  }

  /** The true contents: cached block hashes (32 hex characters) with their parent and tokens. */
  get contents(): ReadonlyMap<string, FakeBlock> {
    return this.blocks;
  }

  /** The block hashes of a token sequence. */
  hashes(tokens: readonly number[]): string[] {
    return promptBlockHashes(this.seed, tokens, this.blockSize);
  }

  /** Looks `promptTokens` up, then stores the full blocks of `tokens` (the prompt, then the answer) that are not cached. */
  admit(promptTokens: readonly number[], tokens: readonly number[]): Admission {
    const hashes = this.hashes(tokens);
    const promptBlocks = Math.floor(Math.max(0, promptTokens.length - 1) / this.blockSize);
    const cached = this.cache.cachedRun(hashes);
    this.cache.acquire(hashes.slice(0, cached));
    const held = hashes.slice(0, cached);
    const stored: StoredPrefixBlock[] = [];
    for (let i = cached; i < hashes.length; i++) {
      const block = this.free.pop() ?? this.evictOne();
      if (block === null) break;
      const parent = i === 0 ? null : hashes[i - 1]!;
      const entry = { parent, tokens: tokens.slice(i * this.blockSize, (i + 1) * this.blockSize) };
      this.cache.insert(hashes[i]!, parent, block);
      this.blocks.set(hashes[i]!, entry);
      stored.push({ hash: hashes[i]!, ...entry });
      held.push(hashes[i]!);
    }
    if (stored.length > 0) this.events?.stored(stored);
    return { held, cache: this.cache, cachedTokens: Math.min(cached, promptBlocks) * this.blockSize };
  }

  release(admission: Admission): void {
    admission.cache.release(admission.held);
  }

  /** Drops every block (a restart); `tell`: publish AllBlocksCleared. Requests still running keep nothing. */
  clear(tell: boolean): void {
    this.cache = this.newCache();
    this.blocks.clear();
    this.free.length = 0;
    for (let block = this.capacityBlocks - 1; block >= 0; block--) this.free.push(block);
    if (tell) this.events?.cleared();
  }

  private newCache(): PrefixBlockCache {
    const cache: PrefixBlockCache = new PrefixBlockCache((hashes) => {
      // Evictions of a cache replaced by clear() are not this one's.
      if (cache !== this.cache) return;
      for (const hash of hashes) this.blocks.delete(hash);
      this.events?.removed(hashes);
    });
    return cache;
  }

  private evictOne(): number | null {
    return this.cache.evict(1)[0] ?? null;
  }
}
