/**
 * The owner of the running sequences' KV blocks (nano-vllm's block manager): the pool that mirrors
 * the runner's free blocks, and the automatic prefix cache of full blocks. A sequence admitted with
 * an empty table shares the cached blocks of its longest cached prefix (referenced, never
 * written); its full blocks join the cache as they fill; when it ends or is preempted its cached
 * blocks stay in the cache, unreferenced, and the rest go back to the pool.
 */
import { slidingGroupOf, type RunnerInfo } from "../runner/runnerProtocol.ts";
import type { ChunkCache } from "../kv/chunkCache.ts";
import { KvBlockPool, KvBlockTable, type BlockRunner, type GrowRequest } from "../kv/kvBlockTable.ts";
import { PrefixBlockCache, blockHash, chainRoot, type KvCacheGroupTag, type PrefixBlockCacheStats, type PrefixCacheEvents, type StoredPrefixBlock } from "../kv/prefixBlockCache.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import { SlidingWindowGroup } from "../kv/slidingWindowGroup.ts";
import { DEFAULT_KV_POLICY } from "./schedulerTypes.ts";
import type { Sequence } from "./sequence.ts";

export interface BlockManagerOptions {
  /** Automatic prefix caching (default true), its hash seed (the model identity and KV settings) and its KV events. */
  prefixCache?: boolean;
  prefixSeed?: string;
  prefixEvents?: PrefixCacheEvents;
  /** The chunk cache of KV-managed prefills: it holds pool blocks too, and gives them back first. */
  chunkCache?: ChunkCache | null;
  /** The server's recompute policy (a "full" prefill uses no cache at all). */
  kvPolicy?: RecomputePolicy;
}

type PoolInfo = Pick<RunnerInfo, "block_size" | "free_blocks" | "kv_groups">;

const FULL_ATTENTION_GROUP: KvCacheGroupTag = { index: 0, kind: "full_attention" };

export class BlockManager {
  private blockPool: KvBlockPool;
  /** Automatic prefix cache of plain prompts' full blocks (null: off). */
  private prefix: PrefixBlockCache | null;
  /** The sequence each admitted table belongs to (tables of others are freed whole). */
  private readonly tableOwner = new WeakMap<KvBlockTable, Sequence>();
  /** The sliding-window layers' group (a model with two KV groups), or null. */
  private slidingGroup: SlidingWindowGroup | null;

  constructor(
    private readonly runner: BlockRunner,
    info: PoolInfo,
    private readonly options: BlockManagerOptions = {},
  ) {
    this.blockPool = this.newPool(info);
    this.prefix = this.newPrefixCache();
    this.slidingGroup = this.newSlidingGroup(info);
  }

  /** The sliding-window group of a model with two KV groups (null with one). */
  get sliding(): SlidingWindowGroup | null {
    return this.slidingGroup;
  }

  private newSlidingGroup(info: PoolInfo): SlidingWindowGroup | null {
    const group = slidingGroupOf(info);
    if (group === null) return null;
    return new SlidingWindowGroup(this.runner, group, info.block_size, this.options.prefixCache ?? true, this.options.prefixEvents);
  }

  /** The full-attention group's KV event fields on a model with two groups (none with one). */
  private get fullGroupTag(): KvCacheGroupTag | undefined {
    return this.slidingGroup === null ? undefined : FULL_ATTENTION_GROUP;
  }

  /** The pool of the runner's blocks (replaced when the runner restarts). */
  get pool(): KvBlockPool {
    return this.blockPool;
  }

  get blockSize(): number {
    return this.blockPool.blockSize;
  }

  /** Whether full blocks are prefix-cached. */
  get prefixCaching(): boolean {
    return this.prefix !== null;
  }

  /** Prefix-cache statistics (null when it is off). */
  get prefixCacheStats(): PrefixBlockCacheStats | null {
    return this.prefix?.stats ?? null;
  }

  /**
   * The runner restarted with every block free: a new pool, and an empty prefix cache (the
   * runner's blocks are gone, and with them every cached prefix); `sequences` hold none any more.
   */
  reset(info: PoolInfo, sequences: Iterable<Sequence>): void {
    this.blockPool = this.newPool(info);
    this.slidingGroup = this.newSlidingGroup(info);
    if (this.prefix !== null) {
      this.prefix = this.newPrefixCache();
      this.options.prefixEvents?.cleared();
    }
    for (const sequence of sequences) sequence.prefixHashes = [];
  }

  private newPool(info: PoolInfo): KvBlockPool {
    const pool = new KvBlockPool(this.runner, info.block_size, info.free_blocks);
    this.chunkCache?.attachPool(pool);
    return pool;
  }

  private newPrefixCache(): PrefixBlockCache | null {
    if (!(this.options.prefixCache ?? true)) return null;
    const events = this.options.prefixEvents;
    return new PrefixBlockCache(events === undefined ? undefined : (hashes) => {
      const group = this.fullGroupTag;
      if (group === undefined) events.removed(hashes);
      else events.removed(hashes, group);
    });
  }

  private get chunkCache(): ChunkCache | null {
    return this.options.chunkCache ?? null;
  }

  /** Blocks to add so that the step's tables hold their entries, and the ALLOC that adds them. */
  shortfall(requests: readonly GrowRequest[]): number {
    return this.blockPool.shortfall(requests);
  }

  /** Whether every group's pool has the blocks the step's growth needs. */
  fits(requests: readonly GrowRequest[]): boolean {
    const sliding = this.slidingGroup;
    return this.blockPool.shortfall(requests) <= this.blockPool.free && (sliding === null || sliding.shortfall(requests) <= sliding.pool.free);
  }

  async grow(requests: readonly GrowRequest[]): Promise<void> {
    await this.blockPool.grow(requests);
    await this.slidingGroup?.grow(requests);
  }

  /**
   * A sequence joins the running batch: its table is its own from now on, and with an empty table
   * it starts from its longest cached prefix.
   */
  admit(sequence: Sequence): void {
    this.tableOwner.set(sequence.table, sequence);
    this.shareCachedPrefix(sequence);
  }

  /** The chained hashes of the sequence's first `blocks` full blocks (each block hashed once per sequence). */
  private blockHashes(sequence: Sequence, blocks: number): string[] {
    const known = sequence.blockHashes;
    if (known.length < blocks) {
      const blockSize = this.blockSize;
      const salt = sequence.request.cacheSalt;
      const seed = (this.options.prefixSeed ?? "") + (salt === undefined ? "" : `|salt=${JSON.stringify(salt)}`);
      let parent = known.length === 0 ? chainRoot(seed) : known[known.length - 1]!;
      for (let i = known.length; i < blocks; i++) {
        parent = blockHash(parent, sequence.tokens, i * blockSize, (i + 1) * blockSize);
        known.push(parent);
      }
    }
    return known.slice(0, blocks);
  }

  /**
   * A sequence being admitted with an empty table starts from its longest cached prefix: those
   * blocks join its table (referenced, never written: at least its last token is computed).
   *
   * A segmented prompt consults the chunk cache's exact-prefix variants too and takes whichever
   * reaches further (one exact prefix, never both); its managed prefill then starts after the
   * blocks. A "full" prefill uses no cache at all.
   */
  private shareCachedPrefix(sequence: Sequence): void {
    if (this.prefix === null || sequence.table.blocks.length > 0 || sequence.request.promptLogprobs != null) return;
    const blockSize = this.blockSize;
    const segments = sequence.request.segments;
    const hashes = this.blockHashes(sequence, Math.floor(((segments === undefined ? sequence.tokens.length : sequence.promptLength) - 1) / blockSize));
    if (segments !== undefined) {
      if ((sequence.request.kvPolicy ?? this.options.kvPolicy ?? DEFAULT_KV_POLICY) === "full") return;
      const exactVariants = this.chunkCache?.index.longestExactPrefix(segments.segments.map((segment) => segment.hash)) ?? [];
      const variantTokens = exactVariants.reduce((sum, variant) => sum + variant.tokenCount, 0);
      if (this.prefix.cachedRun(hashes) * blockSize <= variantTokens && variantTokens > 0) return;
    }
    const sliding = this.slidingGroup;
    const hit = this.prefix.lookup(hashes, sliding === null ? Infinity : sliding.resumableBlocks(hashes, this.prefix.cachedRun(hashes)));
    if (hit.length === 0) return;
    const held = hashes.slice(0, hit.length);
    this.prefix.acquire(held);
    sliding?.share(sequence.table, hashes, hit.length);
    sequence.prefixHashes = held;
    sequence.table.blocks.push(...hit);
    sequence.table.length = hit.length * blockSize;
    if (sequence.generated === 0 && sequence.ttftMs === null) sequence.prefixCachedTokens = Math.max(sequence.prefixCachedTokens, hit.length * blockSize);
  }

  /**
   * Registers a sequence's newly filled blocks of exact KV (prompt or generated tokens whose KV
   * is written) in the prefix cache, held by the sequence, so that requests admitted from now on
   * find them. A block another sequence cached first replaces this sequence's copy (equal tokens
   * after an equal prefix: the same KV), and the copy's id goes to `spare`, to free.
   */
  private cacheFilledBlocks(sequence: Sequence, spare: number[]): void {
    if (this.prefix === null) return;
    const table = sequence.table;
    const blockSize = this.blockSize;
    const full = Math.min(Math.floor(Math.min(table.length, sequence.exactTokens) / blockSize), table.blocks.length);
    const held = sequence.prefixHashes.length;
    if (full <= held) return;
    const hashes = this.blockHashes(sequence, full);
    const stored: StoredPrefixBlock[] = [];
    for (let i = held; i < full; i++) {
      const block = table.blocks[i]!;
      const parent = i === 0 ? null : hashes[i - 1]!;
      const cached = this.prefix.insert(hashes[i]!, parent, block);
      if (cached !== block) {
        table.blocks[i] = cached;
        spare.push(block);
      } else if (this.options.prefixEvents !== undefined) {
        const group = this.fullGroupTag;
        stored.push({ hash: hashes[i]!, parent, tokens: sequence.tokens.slice(i * blockSize, (i + 1) * blockSize), ...(group === undefined ? {} : { group }) });
      }
    }
    sequence.prefixHashes = hashes;
    if (stored.length > 0) this.options.prefixEvents!.stored(stored);
  }

  /** After a step: the step's sequences' filled blocks join the prefix cache; duplicate copies are freed. */
  async cacheStepBlocks(sequences: readonly Sequence[]): Promise<void> {
    if (this.prefix !== null) {
      const spare = new KvBlockTable(this.blockSize);
      for (const sequence of sequences) this.cacheFilledBlocks(sequence, spare.blocks);
      await this.blockPool.release([spare]);
    }
    await this.slidingGroup?.slide(sequences.map((sequence) => ({ table: sequence.table, ...this.promptCheckpoint(sequence) })));
  }

  /**
   * The window checkpoint at the end of a prompt (its last full block), once those full blocks
   * are cached as exact KV: the sliding group keeps it as the sequence slides past. A segmented
   * prompt's too, when its managed prefill was exact that far (a repeat then resumes from the
   * prefix cache, which may reach past the chunk cache's exact-prefix variants).
   */
  private promptCheckpoint(sequence: Sequence): { keep?: { blocks: number; hashes: readonly string[]; tokens: readonly number[] } } {
    const blocks = Math.floor(sequence.promptLength / this.blockSize);
    if (this.prefix === null || blocks === 0 || sequence.prefixHashes.length < blocks) return {};
    return { keep: { blocks, hashes: sequence.prefixHashes, tokens: sequence.tokens } };
  }

  /**
   * Gives back the blocks of ended or preempted sequences' tables: full blocks of exact KV
   * (cached as they filled) stay in the prefix cache, unreferenced by the sequence; the rest go
   * back to the pool. After a failed step the table's length does not count that step's entries,
   * so only blocks written by earlier steps are kept. A segmented prompt readmitted later runs its
   * managed prefill again.
   */
  async release(tables: readonly KvBlockTable[]): Promise<void> {
    const toFree: KvBlockTable[] = [];
    for (const table of tables) {
      const sequence = this.tableOwner.get(table);
      if (sequence === undefined) {
        toFree.push(table);
        continue;
      }
      const spare = new KvBlockTable(this.blockSize);
      if (this.prefix !== null) {
        this.cacheFilledBlocks(sequence, spare.blocks);
        this.prefix.release(sequence.prefixHashes);
      }
      await this.slidingGroup?.release(table, sequence.prefixHashes, sequence.prefixHashes.length, sequence.tokens);
      spare.blocks.push(...table.blocks.slice(sequence.prefixHashes.length));
      table.blocks.length = 0;
      table.length = 0;
      sequence.prefixHashes = [];
      if (sequence.request.segments !== undefined) {
        sequence.managedPending = true;
        sequence.exactTokens = 0;
      }
      toFree.push(spare);
    }
    await this.blockPool.release(toFree);
  }

  /**
   * The hashes of prompt blocks that running plain sequences are about to compute (their prompt's
   * full blocks not yet written).
   */
  pendingPrefixBlocks(running: readonly Sequence[]): Set<string> {
    const pending = new Set<string>();
    if (this.prefix === null) return pending;
    for (const sequence of running) this.addPendingBlocks(sequence, pending);
    return pending;
  }

  /** Adds the prompt blocks the sequence is about to compute to `pending` (nothing when prefix caching is off). */
  addPendingBlocks(sequence: Sequence, pending: Set<string>): void {
    if (this.prefix === null || sequence.request.segments !== undefined || sequence.done || sequence.cancelled) return;
    const blockSize = this.blockSize;
    const written = Math.floor(sequence.table.length / blockSize);
    const promptBlocks = Math.floor(sequence.promptLength / blockSize);
    if (written >= promptBlocks) return;
    const hashes = this.blockHashes(sequence, promptBlocks);
    for (let i = written; i < promptBlocks; i++) pending.add(hashes[i]!);
  }

  /**
   * Requests arriving together with a common prefix compute it once: a plain prompt whose next
   * uncached block is one a running sequence is computing (`pending`) waits, and is admitted once
   * those blocks are cached, to start after them.
   */
  waitsForSharedPrefix(sequence: Sequence, pending: ReadonlySet<string>): boolean {
    // With a sliding-window group the running sequence's blocks alone are no hit (its window
    // checkpoint comes when it ends): waiting would only delay.
    if (this.slidingGroup !== null) return false;
    if (this.prefix === null || pending.size === 0 || sequence.request.segments !== undefined || sequence.table.blocks.length > 0) return false;
    const hashes = this.blockHashes(sequence, Math.floor((sequence.tokens.length - 1) / this.blockSize));
    const run = this.prefix.cachedRun(hashes);
    return run < hashes.length && pending.has(hashes[run]!);
  }

  /**
   * Frees what the step's growth lacks in each group if cached KV can give it: full-attention
   * blocks (makeRoom), then the sliding group's window checkpoints, those whose full-attention
   * prefix was evicted first.
   */
  async makeRoomFor(requests: readonly GrowRequest[]): Promise<void> {
    await this.makeRoom(this.blockPool.shortfall(requests));
    const sliding = this.slidingGroup;
    if (sliding === null) return;
    const prefix = this.prefix;
    await sliding.evict(sliding.shortfall(requests) - sliding.pool.free, (hash) => prefix === null || prefix.blockOf(hash) === undefined);
  }

  /** Frees window checkpoints until the sliding group has `blocks` free (or none is left to evict); those whose full-attention prefix is gone first. */
  async makeSlidingRoom(blocks: number): Promise<void> {
    const sliding = this.slidingGroup;
    if (sliding === null || blocks <= sliding.pool.free) return;
    const prefix = this.prefix;
    await sliding.evict(blocks - sliding.pool.free, (hash) => prefix === null || prefix.blockOf(hash) === undefined);
  }

  /** Frees up to `blocks` pool blocks from unreferenced prefix blocks only (chunk caches stay): room for background work's scratch tables. */
  async makeScratchRoom(blocks: number): Promise<void> {
    if (blocks <= this.blockPool.free || this.prefix === null) return;
    const evicted = new KvBlockTable(this.blockSize);
    evicted.blocks.push(...this.prefix.evict(blocks - this.blockPool.free));
    await this.blockPool.release([evicted]);
  }

  /** Frees at least `blocks` pool blocks if cached KV can give them: chunk caches first, then unreferenced prefix blocks. */
  async makeRoom(blocks: number): Promise<void> {
    if (blocks <= this.blockPool.free) return;
    if (this.chunkCache !== null) await this.chunkCache.reclaim(blocks);
    if (blocks <= this.blockPool.free || this.prefix === null) return;
    const evicted = new KvBlockTable(this.blockSize);
    evicted.blocks.push(...this.prefix.evict(blocks - this.blockPool.free));
    await this.blockPool.release([evicted]);
  }
}
