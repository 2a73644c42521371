/**
 * The chunk-cache variant index (Cache-Craft §3.3, Fig. 18): per chunk hash, the variants of its
 * KV that are stored (each computed after some prefix of other chunks), with the metadata to score
 * them, a frequency-reuse counter f_r for eviction, and a trie over chunk hashes to find the
 * longest run of exact-prefix variants at the start of a prompt (plain prefix caching).
 *
 * Limits: at most M variants per chunk (maxVariantsPerChunk), at most N×M variants in all
 * (maxVariants), and/or at most maxBytes of KV. Each is optional (absent: unbounded). Adding a
 * variant evicts to make room, lowest f_r first. No I/O: the caller frees the KV of what is
 * evicted.
 */
import type { VariantMetadata } from "./reuseScores.ts";

/** One stored chunk-cache variant. */
export interface ChunkVariant {
  /** Unique id (the KV store's key). */
  id: string;
  /** chunkHash of the chunk's tokens. */
  chunkHash: string;
  tokenCount: number;
  /** Hashes of the chunks before it when it was computed, in order (equal to meta.prefix). */
  prefix: string[];
  /**
   * Computed with the exact full prefix (no reused or fixed-up KV before it): reusable with no
   * recompute by an exact prefix match.
   */
  exact: boolean;
  meta: VariantMetadata;
  /** Cache-Craft's f_r: Σ 1/CFO over its uses (see recordUse). */
  frequencyReuse: number;
  /** Size of its KV. */
  bytes: number;
  createdAt: number;
  lastUsedAt: number;
}

export interface ChunkVariantIndexOptions {
  /** M: variants per chunk. */
  maxVariantsPerChunk?: number;
  /** N×M: variants in all. */
  maxVariants?: number;
  /** Total bytes of the stored variants. */
  maxBytes?: number;
}

/** Smallest CFO recordUse divides by: a use at CFO 0 (nothing to recompute) would add 1/0 = ∞. */
export const MIN_RECORDED_CFO = 0.01;

interface Entry {
  variant: ChunkVariant;
  /** Insertion order, the last tie-break. */
  seq: number;
}

interface TrieNode {
  children: Map<string, TrieNode>;
  /** Ids of the exact variants whose prefix + own chunk is this node's path. */
  exact: Set<string>;
}

function trieNode(): TrieNode {
  return { children: new Map(), exact: new Set() };
}

function checkLimit(name: string, value: number | undefined, allowZero: boolean): void {
  if (value === undefined) return;
  if (!Number.isInteger(value) || value < (allowZero ? 0 : 1)) {
    throw new RangeError(`ChunkVariantIndex: ${name} must be ${allowZero ? "a non-negative" : "a positive"} integer (got ${value})`);
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export class ChunkVariantIndex {
  readonly maxVariantsPerChunk: number;
  readonly maxVariants: number;
  readonly maxBytes: number;
  private readonly entries = new Map<string, Entry>();
  private readonly byChunk = new Map<string, Set<string>>();
  private readonly root = trieNode();
  private totalBytes = 0;
  private nextSeq = 0;

  constructor(options: ChunkVariantIndexOptions = {}) {
    checkLimit("maxVariantsPerChunk", options.maxVariantsPerChunk, false);
    checkLimit("maxVariants", options.maxVariants, false);
    checkLimit("maxBytes", options.maxBytes, true);
    this.maxVariantsPerChunk = options.maxVariantsPerChunk ?? Infinity;
    this.maxVariants = options.maxVariants ?? Infinity;
    this.maxBytes = options.maxBytes ?? Infinity;
  }

  /** Number of stored variants. */
  get size(): number {
    return this.entries.size;
  }

  /** Total bytes of the stored variants. */
  get bytes(): number {
    return this.totalBytes;
  }

  /** Number of chunks with at least one variant. */
  get chunkCount(): number {
    return this.byChunk.size;
  }

  get(id: string): ChunkVariant | undefined {
    return this.entries.get(id)?.variant;
  }

  has(id: string): boolean {
    return this.entries.has(id);
  }

  /** The variants of a chunk, in insertion order (a new array). */
  variantsOf(chunkHash: string): ChunkVariant[] {
    return [...(this.byChunk.get(chunkHash) ?? [])].map((id) => this.entries.get(id)!.variant);
  }

  /** All variants, in insertion order. */
  all(): ChunkVariant[] {
    return [...this.entries.values()].map((entry) => entry.variant);
  }

  /**
   * Stores a variant (a shallow copy; the index updates the copy's frequencyReuse and lastUsedAt)
   * and returns the variants evicted to make room, in eviction order:
   * 1. while its chunk has M variants, the chunk's own variant with the lowest f_r;
   * 2. while the index would exceed N×M variants or maxBytes, the variant with the lowest f_r
   *    among the others (any chunk).
   * Ties in f_r go to the least recently used, then the oldest (createdAt), then the first added.
   * The new variant never evicts itself, except that one larger than maxBytes on its own is not
   * stored and comes back as the only evicted variant (nothing else is touched). A duplicate id
   * throws.
   */
  add(variant: ChunkVariant): ChunkVariant[] {
    this.check(variant);
    const stored: ChunkVariant = { ...variant, prefix: [...variant.prefix] };
    if (stored.bytes > this.maxBytes) return [stored];
    const evicted: ChunkVariant[] = [];
    const own = this.byChunk.get(stored.chunkHash);
    while (own !== undefined && own.size > 0 && own.size >= this.maxVariantsPerChunk) {
      evicted.push(this.removeEntry(this.lowest(own)!));
    }
    while (this.entries.size > 0 && (this.entries.size + 1 > this.maxVariants || this.totalBytes + stored.bytes > this.maxBytes)) {
      evicted.push(this.removeEntry(this.lowest(this.entries.keys())!));
    }
    this.entries.set(stored.id, { variant: stored, seq: this.nextSeq++ });
    let ids = this.byChunk.get(stored.chunkHash);
    if (!ids) this.byChunk.set(stored.chunkHash, (ids = new Set()));
    ids.add(stored.id);
    this.totalBytes += stored.bytes;
    if (stored.exact) {
      let node = this.root;
      for (const hash of [...stored.prefix, stored.chunkHash]) {
        let child = node.children.get(hash);
        if (!child) node.children.set(hash, (child = trieNode()));
        node = child;
      }
      node.exact.add(stored.id);
    }
    return evicted;
  }

  /**
   * Counts a use of a variant at the given CFO: f_r += 1 / max(cfo, MIN_RECORDED_CFO) (the floor
   * keeps a use with nothing to recompute, CFO 0, finite: it counts as much as CFO 0.01), and
   * lastUsedAt = now. Returns the variant, or undefined when the id is not stored (e.g. evicted
   * meanwhile).
   */
  recordUse(id: string, cfo: number, now: number = Date.now()): ChunkVariant | undefined {
    if (!(cfo >= 0) || !Number.isFinite(cfo)) throw new RangeError(`ChunkVariantIndex.recordUse: cfo must be finite and >= 0 (got ${cfo})`);
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    entry.variant.frequencyReuse += 1 / Math.max(cfo, MIN_RECORDED_CFO);
    entry.variant.lastUsedAt = now;
    return entry.variant;
  }

  /** Removes a variant; returns it, or undefined when it was not stored. */
  remove(id: string): ChunkVariant | undefined {
    return this.entries.has(id) ? this.removeEntry(id) : undefined;
  }

  /**
   * Exact prefix matching: for a prompt's chunk hashes (chunk 0 first), the exact variants for
   * chunks 0..k−1 where variant i's prefix is exactly chunkHashes[0..i), for the longest such run
   * from the start (k = 0: none). When several exact variants share a prefix and chunk, the most
   * recently used is taken (then the most recently created, then the last added).
   */
  longestExactPrefix(chunkHashes: readonly string[]): ChunkVariant[] {
    const run: ChunkVariant[] = [];
    let node = this.root;
    for (const hash of chunkHashes) {
      const child = node.children.get(hash);
      if (!child || child.exact.size === 0) break;
      run.push(this.newest(child.exact));
      node = child;
    }
    return run;
  }

  private check(variant: ChunkVariant): void {
    const fail = (what: string): never => {
      throw new RangeError(`ChunkVariantIndex.add: ${what} (variant ${variant.id})`);
    };
    if (typeof variant.id !== "string") fail("id must be a string");
    if (this.entries.has(variant.id)) fail("a variant with this id is already stored");
    if (!Number.isInteger(variant.tokenCount) || variant.tokenCount < 0) fail(`tokenCount must be a non-negative integer (got ${variant.tokenCount})`);
    if (!(variant.bytes >= 0) || !Number.isFinite(variant.bytes)) fail(`bytes must be finite and >= 0 (got ${variant.bytes})`);
    if (!(variant.frequencyReuse >= 0) || !Number.isFinite(variant.frequencyReuse)) {
      fail(`frequencyReuse must be finite and >= 0 (got ${variant.frequencyReuse})`);
    }
    if (!sameList(variant.prefix, variant.meta.prefix)) fail("prefix and meta.prefix differ");
    if (variant.meta.tokenInter.length !== variant.tokenCount) fail(`meta.tokenInter has ${variant.meta.tokenInter.length} entries, tokenCount is ${variant.tokenCount}`);
    if (variant.meta.tokenShift !== undefined && variant.meta.tokenShift.length !== variant.tokenCount) fail(`meta.tokenShift has ${variant.meta.tokenShift.length} entries, tokenCount is ${variant.tokenCount}`);
  }

  /** The id with the lowest f_r (then least recently used, oldest, first added). */
  private lowest(ids: Iterable<string>): string | undefined {
    let best: Entry | undefined;
    for (const id of ids) {
      const entry = this.entries.get(id)!;
      if (best === undefined || ChunkVariantIndex.evictsBefore(entry, best)) best = entry;
    }
    return best?.variant.id;
  }

  private static evictsBefore(x: Entry, y: Entry): boolean {
    const a = x.variant;
    const b = y.variant;
    if (a.frequencyReuse !== b.frequencyReuse) return a.frequencyReuse < b.frequencyReuse;
    if (a.lastUsedAt !== b.lastUsedAt) return a.lastUsedAt < b.lastUsedAt;
    if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt;
    return x.seq < y.seq;
  }

  private newest(ids: Iterable<string>): ChunkVariant {
    let best: Entry | undefined;
    for (const id of ids) {
      const entry = this.entries.get(id)!;
      if (best === undefined) {
        best = entry;
        continue;
      }
      const a = entry.variant;
      const b = best.variant;
      if (a.lastUsedAt > b.lastUsedAt || (a.lastUsedAt === b.lastUsedAt && (a.createdAt > b.createdAt || (a.createdAt === b.createdAt && entry.seq > best.seq)))) {
        best = entry;
      }
    }
    return best!.variant;
  }

  private removeEntry(id: string): ChunkVariant {
    const { variant } = this.entries.get(id)!;
    this.entries.delete(id);
    const ids = this.byChunk.get(variant.chunkHash)!;
    ids.delete(id);
    if (ids.size === 0) this.byChunk.delete(variant.chunkHash);
    this.totalBytes -= variant.bytes;
    if (variant.exact) {
      const path = [...variant.prefix, variant.chunkHash];
      const nodes = [this.root];
      for (const hash of path) nodes.push(nodes[nodes.length - 1]!.children.get(hash)!);
      nodes[nodes.length - 1]!.exact.delete(id);
      // Prune nodes left with neither variants nor children.
      for (let d = path.length; d > 0; d--) {
        const node = nodes[d]!;
        if (node.exact.size > 0 || node.children.size > 0) break;
        nodes[d - 1]!.children.delete(path[d - 1]!);
      }
    }
    return variant;
  }
}
