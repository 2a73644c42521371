/**
 * The sliding-window group's part of the automatic prefix cache (pure bookkeeping): "window
 * checkpoints", sliding-layer KV blocks kept under the same chained block hash as the
 * full-attention block of the same index (the hash names the whole prefix, so it names this
 * block's sliding KV too). A sequence leaves its window before its last block boundary here when
 * it ends; a later prompt with that prefix resumes there (slidingWindowSpan.ts). Blocks are
 * referenced while running sequences read them and evicted least recently used first otherwise.
 * Block ids are the runner's (group 1); this module never allocates or frees them.
 */

interface Checkpoint {
  hash: string;
  block: number;
  refs: number;
  lastUsed: number;
}

export interface SlidingCheckpointStats {
  blocks: number;
  referenced: number;
  evictions: number;
  /** Checkpoints dropped because a later one of the same prefix took over (dropSuperseded). */
  superseded: number;
}

export class SlidingCheckpointCache {
  private readonly byHash = new Map<string, Checkpoint>();
  private tick = 0;
  private evictions = 0;
  private superseded = 0;

  get size(): number {
    return this.byHash.size;
  }

  has(hash: string): boolean {
    return this.byHash.has(hash);
  }

  blockOf(hash: string): number | undefined {
    return this.byHash.get(hash)?.block;
  }

  /** A running sequence reads this cached block (it must be cached). */
  acquire(hash: string): number {
    const entry = this.entry(hash, "acquire");
    entry.refs++;
    entry.lastUsed = ++this.tick;
    return entry.block;
  }

  release(hash: string): void {
    const entry = this.entry(hash, "release");
    if (entry.refs === 0) throw new RangeError(`SlidingCheckpointCache.release: block ${hash} is not referenced`);
    entry.refs--;
    entry.lastUsed = ++this.tick;
  }

  /**
   * Keeps `block` (unreferenced) as `hash`'s sliding KV. Returns false when the hash is cached
   * already (equal KV): the caller frees its own copy then.
   */
  insert(hash: string, block: number): boolean {
    const existing = this.byHash.get(hash);
    if (existing !== undefined) {
      existing.lastUsed = ++this.tick;
      return false;
    }
    this.byHash.set(hash, { hash, block, refs: 0, lastUsed: ++this.tick });
    return true;
  }

  /**
   * Evicts up to `count` unreferenced checkpoints, those whose prefix `stranded` says can no longer
   * be resumed first (their full-attention blocks are gone), then least recently used. Returns
   * the freed blocks and their hashes.
   */
  evict(count: number, stranded: (hash: string) => boolean = () => false): { blocks: number[]; hashes: string[] } {
    const candidates = [...this.byHash.values()].filter((entry) => entry.refs === 0);
    candidates.sort((a, b) => Number(stranded(b.hash)) - Number(stranded(a.hash)) || a.lastUsed - b.lastUsed);
    const blocks: number[] = [];
    const hashes: string[] = [];
    for (const entry of candidates.slice(0, Math.max(0, count))) {
      this.byHash.delete(entry.hash);
      blocks.push(entry.block);
      hashes.push(entry.hash);
      this.evictions++;
    }
    return { blocks, hashes };
  }

  /**
   * Drops the unreferenced checkpoints among `hashes` (blocks of a prefix that a later checkpoint
   * extends). Returns the freed blocks and their hashes.
   */
  dropSuperseded(hashes: readonly string[]): { blocks: number[]; hashes: string[] } {
    const blocks: number[] = [];
    const dropped: string[] = [];
    for (const hash of hashes) {
      const entry = this.byHash.get(hash);
      if (entry === undefined || entry.refs > 0) continue;
      this.byHash.delete(hash);
      blocks.push(entry.block);
      dropped.push(hash);
      this.superseded++;
    }
    return { blocks, hashes: dropped };
  }

  get stats(): SlidingCheckpointStats {
    let referenced = 0;
    for (const entry of this.byHash.values()) if (entry.refs > 0) referenced++;
    return { blocks: this.byHash.size, referenced, evictions: this.evictions, superseded: this.superseded };
  }

  private entry(hash: string, what: string): Checkpoint {
    const entry = this.byHash.get(hash);
    if (entry === undefined) throw new RangeError(`SlidingCheckpointCache.${what}: block ${hash} is not cached`);
    return entry;
  }
}
