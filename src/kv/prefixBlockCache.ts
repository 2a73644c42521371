/**
 * The automatic prefix cache's bookkeeping (issue 19), pure: full KV blocks named by a chained
 * hash (the parent block's hash, then the block's token ids, seeded with whatever else changes
 * the KV: the model identity, the KV dtype), so a block's name stands for its whole prefix.
 *
 * - `lookup` finds the longest run of cached blocks that starts a prompt;
 * - `acquire` / `release` count the running sequences that use a block (a referenced block is
 *   never evicted);
 * - `insert` registers a block a sequence has just filled;
 * - `evict` frees unreferenced blocks, least recently used first and leaves before their
 *   parents (a block whose longer prefixes are still cached stays: dropping it would strand
 *   them).
 *
 * Block ids are the runner's; this module never allocates or frees them itself: `evict` returns
 * the ids to free, `insert` tells the caller when an equal block was cached already.
 */
import { LruLeafHeap } from "../collections/lruLeafHeap.ts";
import { createSha256 } from "../runtime/hashing.ts";

/** Hex length of a block hash (128 bits of SHA-256). */
export const BLOCK_HASH_HEX_LENGTH = 32;

/**
 * The chained hash of a full block: sha256(seed-or-parent as UTF-8 ‖ token ids as u32 LE), its
 * first 128 bits in hex. A collision-resistant hash, because blocks are shared across requests
 * (and clients): a weak one would let a crafted prompt read another's KV.
 */
export function blockHash(parent: string, tokens: ArrayLike<number>, start = 0, end = tokens.length): string {
  // Admission hashes every block of a prompt (468 for 7.5K tokens): one reused hasher and buffer
  // make it several times faster than a createHash per block.
  const need = parent.length * 3 + (end - start) * 4;
  if (scratch.length < need) {
    scratch = new Uint8Array(Math.max(need, 2 * scratch.length));
    view = new DataView(scratch.buffer);
  }
  const offset = encoder.encodeInto(parent, scratch).written;
  for (let i = start; i < end; i++) {
    const token = tokens[i]!;
    if (!(Number.isInteger(token) && token >= 0 && token <= 0xffffffff)) throw new RangeError(`blockHash: token ${i - start} must be an integer in [0, 2^32) (got ${token})`);
    view.setUint32(offset + (i - start) * 4, token, true);
  }
  hasher.update(scratch.subarray(0, offset + (end - start) * 4));
  return hasher.digest().toString("hex", 0, BLOCK_HASH_HEX_LENGTH / 2);
}

const encoder = new TextEncoder();
let scratch = new Uint8Array(256);
let view = new DataView(scratch.buffer);
const hasher = createSha256();

/** What a prompt's first block chains from: the seed (model identity and KV layout). */
export function chainRoot(seed: string): string {
  return `seed:${seed}`;
}

/**
 * The hashes of a prompt's full blocks, in order: block i covers tokens [i·blockSize,
 * (i+1)·blockSize) and its hash chains those of blocks 0..i−1, starting from `seed`.
 */
export function promptBlockHashes(seed: string, tokens: ArrayLike<number>, blockSize: number): string[] {
  if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`promptBlockHashes: blockSize must be a positive integer (got ${blockSize})`);
  const out: string[] = [];
  let parent = chainRoot(seed);
  for (let start = 0; start + blockSize <= tokens.length; start += blockSize) {
    parent = blockHash(parent, tokens, start, start + blockSize);
    out.push(parent);
  }
  return out;
}

/**
 * How many of a chain's `keys`, from the first, are held, when the held ones are always a prefix
 * of the chain (a block is held only while its parent is): a binary search, log2(n) probes.
 */
export function heldPrefixLength<K>(keys: readonly K[], held: (key: K) => boolean): number {
  let low = 0;
  let high = keys.length;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (held(keys[middle - 1]!)) low = middle;
    else high = middle - 1;
  }
  return low;
}

interface CachedBlock {
  hash: string;
  parent: string | null;
  block: number;
  refs: number;
  /** Cached blocks whose parent this is. */
  children: number;
  lastUsed: number;
}

export interface PrefixBlockCacheStats {
  blocks: number;
  referenced: number;
  /** Not used by a running sequence (evictable once their longer prefixes are gone). */
  unreferenced: number;
  hits: number;
  queried: number;
  evictions: number;
}

/**
 * What the prefix cache tells the outside (KV events, issue 19 item 5): blocks stored with their
 * tokens, blocks evicted, everything dropped (a runner restart).
 */
export interface PrefixCacheEvents {
  stored(blocks: readonly StoredPrefixBlock[]): void;
  /** `group`: the KV cache group the blocks were of (a model with two groups; absent with one). */
  removed(hashes: readonly string[], group?: KvCacheGroupTag): void;
  cleared(): void;
}

/**
 * Which KV cache group a block belongs to on a model with two (vLLM's hybrid KV cache manager's
 * `group_idx`, `kv_cache_spec_kind` and `kv_cache_spec_sliding_window` of its KV events).
 */
export interface KvCacheGroupTag {
  index: number;
  kind: "full_attention" | "sliding_window";
  /** The window (sliding_window only). */
  slidingWindow?: number;
}

export interface StoredPrefixBlock {
  /** The block's KV cache group on a model with two (absent with one). */
  group?: KvCacheGroupTag;
  hash: string;
  /** The previous block's hash; null for a prompt's first block. */
  parent: string | null;
  tokens: readonly number[];
}

export class PrefixBlockCache {
  private readonly byHash = new Map<string, CachedBlock>();
  private readonly byBlock = new Map<number, CachedBlock>();
  /** Candidates for eviction, least recently used first. */
  private readonly leaves = new LruLeafHeap<CachedBlock>(
    (entry, lastUsed) => this.byHash.get(entry.hash) === entry && isEvictable(entry) && entry.lastUsed === lastUsed,
  );
  private tick = 0;
  private readonly counters = { hits: 0, queried: 0, evictions: 0 };

  /** `onRemoved`: told the hashes of each evict call's blocks. */
  constructor(private readonly onRemoved?: (hashes: readonly string[]) => void) {}

  get size(): number {
    return this.byHash.size;
  }

  /** The block holding `hash`, or undefined. */
  blockOf(hash: string): number | undefined {
    return this.byHash.get(hash)?.block;
  }

  /**
   * How many of `hashes` (a chain, from the first), are cached (a probe: counts nothing, touches
   * nothing). A cached block's parent is always cached (blocks are inserted under a cached parent
   * and only leaves are evicted), so the cached blocks of a chain are a prefix of it, found by
   * binary search: a 7.5K-token prompt's 468 blocks take 9 probes, not 468.
   */
  cachedRun(hashes: readonly string[]): number {
    return heldPrefixLength(hashes, (hash) => this.byHash.has(hash));
  }

  /**
   * The longest cached run of `hashes` from the first, at most `maxBlocks` (what else the hit needs
   * may bound it: a sliding-window group's checkpoints): their block ids (nothing is referenced).
   */
  lookup(hashes: readonly string[], maxBlocks = Infinity): number[] {
    const out = hashes.slice(0, Math.min(this.cachedRun(hashes), maxBlocks)).map((hash) => this.byHash.get(hash)!.block);
    this.counters.queried += hashes.length;
    this.counters.hits += out.length;
    return out;
  }

  /** One more running sequence uses these cached blocks (each must be cached). */
  acquire(hashes: readonly string[]): void {
    for (const hash of hashes) {
      const entry = this.entry(hash, "acquire");
      entry.refs++;
      entry.lastUsed = ++this.tick;
    }
  }

  /** A sequence no longer uses these blocks; unreferenced leaves become evictable. */
  release(hashes: readonly string[]): void {
    for (const hash of hashes) {
      const entry = this.entry(hash, "release");
      if (entry.refs === 0) throw new RangeError(`PrefixBlockCache.release: block ${hash} is not referenced`);
      entry.refs--;
      entry.lastUsed = ++this.tick;
      this.offer(entry);
    }
  }

  /**
   * Registers `block`, just filled by a sequence that keeps using it (refs 1), as `hash` under
   * `parent` (null for a prompt's first block; the parent must be cached). Returns the block now
   * cached for the hash: `block` itself, or an equal block cached before (then the caller frees
   * its own copy and uses that one, already referenced for it).
   */
  insert(hash: string, parent: string | null, block: number): number {
    const existing = this.byHash.get(hash);
    if (existing !== undefined) {
      existing.refs++;
      existing.lastUsed = ++this.tick;
      return existing.block;
    }
    if (this.byBlock.has(block)) throw new RangeError(`PrefixBlockCache.insert: block ${block} already holds another hash`);
    if (parent !== null) this.entry(parent, "insert (parent)").children++;
    const entry: CachedBlock = { hash, parent, block, refs: 1, children: 0, lastUsed: ++this.tick };
    this.byHash.set(hash, entry);
    this.byBlock.set(block, entry);
    return block;
  }

  /**
   * Evicts up to `count` unreferenced blocks (least recently used leaves first; a parent becomes
   * a leaf when its last cached child goes). Returns the freed block ids, to give back to the
   * runner.
   */
  evict(count: number): number[] {
    const freed: number[] = [];
    const hashes: string[] = [];
    while (freed.length < count) {
      const entry = this.leaves.pop();
      if (entry === null) break;
      const hash = entry.hash;
      this.byHash.delete(hash);
      this.byBlock.delete(entry.block);
      freed.push(entry.block);
      hashes.push(hash);
      this.counters.evictions++;
      if (entry.parent !== null) {
        const parent = this.byHash.get(entry.parent)!;
        parent.children--;
        this.offer(parent);
      }
    }
    if (hashes.length > 0) this.onRemoved?.(hashes);
    return freed;
  }

  get stats(): PrefixBlockCacheStats {
    let referenced = 0;
    for (const entry of this.byHash.values()) if (entry.refs > 0) referenced++;
    return { blocks: this.byHash.size, referenced, unreferenced: this.byHash.size - referenced, ...this.counters };
  }

  private entry(hash: string, what: string): CachedBlock {
    const entry = this.byHash.get(hash);
    if (entry === undefined) throw new RangeError(`PrefixBlockCache.${what}: block ${hash} is not cached`);
    return entry;
  }

  /** Puts an unreferenced leaf on the heap (stale entries are skipped when popped). */
  private offer(entry: CachedBlock): void {
    if (!isEvictable(entry)) return;
    this.leaves.push(entry, entry.lastUsed);
    if (this.leaves.size > 2 * this.byHash.size + 64) this.leaves.rebuild(this.evictableLeaves());
  }

  private *evictableLeaves(): Generator<readonly [CachedBlock, number]> {
    for (const entry of this.byHash.values()) if (isEvictable(entry)) yield [entry, entry.lastUsed];
  }
}

/** Not used by a running sequence and without a cached longer prefix. */
function isEvictable(entry: CachedBlock): boolean {
  return entry.refs === 0 && entry.children === 0;
}
