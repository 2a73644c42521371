/**
 * The sliding-window KV cache group of a model with both global and sliding-window layers (vLLM's
 * hybrid KV cache manager; Gemma 3): its own block pool on the runner (group 1), a block table per
 * sequence beside the full-attention one (indexed alike, NO_BLOCK before the window), and its part
 * of the automatic prefix cache (window checkpoints).
 *
 * - As a sequence advances (each step of a prefill too), blocks that have left the window before
 *   its last block boundary are freed (or handed back to the checkpoint cache they came from):
 *   after a step a sequence holds at most ceil(window / block_size) + 1 sliding blocks.
 * - Checkpoints are kept when a sequence leaves the batch (it ends or is preempted), not at every
 *   block boundary: a checkpoint at every boundary would keep every block, which is what the
 *   group is there to avoid; the end of a turn is where the next turn of the conversation resumes.
 *   The blocks covering the window before its last cached full block stay, under those blocks'
 *   chained hashes.
 * - A prefix hit of P blocks needs full-attention blocks 0..P−1 and the checkpoints covering the
 *   window before P (slidingWindowSpan.ts); the lookup takes the longest P with both.
 * - A sequence that resumed from a checkpoint has moved its conversation past the checkpoints
 *   before it (same chained hashes: the same prefix): when it leaves, those unreferenced are
 *   dropped, so that a conversation holds the checkpoint it resumed from and its own two (its
 *   prompt's end and its end), not two for every turn. Only a request that branches off before
 *   the checkpoint it resumed from (an edit of an older message) loses by it.
 */
import type { KvGroupInfo } from "../runner/runnerProtocol.ts";
import { KvBlockPool, KvBlockTable, NO_BLOCK, type BlockRunner, type GrowRequest } from "./kvBlockTable.ts";
import type { KvCacheGroupTag, PrefixCacheEvents, StoredPrefixBlock } from "./prefixBlockCache.ts";
import { SlidingCheckpointCache, type SlidingCheckpointStats } from "./slidingCheckpointCache.ts";
import { checkpointSpan, firstLiveBlock, longestSlidingResume } from "./slidingWindowSpan.ts";

/** A sequence's sliding-window table and the checkpoint blocks it reads (block index → hash). */
class SlidingTable extends KvBlockTable {
  readonly checkpointed = new Map<number, string>();
  /** The first block of the checkpoint span it resumed from (0: it resumed from none). */
  resumedFrom = 0;
}

export class SlidingWindowGroup {
  readonly pool: KvBlockPool;
  readonly window: number;
  private readonly checkpoints: SlidingCheckpointCache | null;
  private readonly tables = new WeakMap<KvBlockTable, SlidingTable>();
  /** Its KV events' group fields (vLLM's group_idx 1, kv_cache_spec_kind "sliding_window"). */
  readonly tag: KvCacheGroupTag;

  constructor(
    runner: BlockRunner,
    group: Pick<KvGroupInfo, "free_blocks" | "num_blocks"> & { sliding_window: number },
    readonly blockSize: number,
    prefixCache: boolean,
    /** Told the checkpoints stored and evicted (the prefix cache's KV events, tagged with the group). */
    private readonly events?: PrefixCacheEvents,
  ) {
    this.window = group.sliding_window;
    this.tag = { index: 1, kind: "sliding_window", slidingWindow: this.window };
    this.pool = new KvBlockPool(runner, blockSize, group.num_blocks, group.free_blocks, 1);
    this.checkpoints = prefixCache ? new SlidingCheckpointCache() : null;
  }

  /** The sliding table beside a sequence's full-attention table (created empty on first use). */
  tableOf(full: KvBlockTable): KvBlockTable {
    return this.slidingOf(full);
  }

  /** Sliding blocks a sequence holds itself (not counting checkpoints it reads). */
  heldBy(full: KvBlockTable): number {
    const table = this.tables.get(full);
    return table === undefined ? 0 : table.heldBlocks.length;
  }

  get checkpointStats(): SlidingCheckpointStats | null {
    return this.checkpoints?.stats ?? null;
  }

  /** Blocks most a sequence holds between steps, and while running a step of `chunk` tokens. */
  blocksPerSequence(chunk = 0): number {
    return Math.ceil(this.window / this.blockSize) + 1 + Math.ceil(chunk / this.blockSize);
  }

  /** The sliding blocks the full tables' growth needs. */
  shortfall(requests: readonly GrowRequest[]): number {
    return this.pool.shortfall(this.slidingRequests(requests));
  }

  grow(requests: readonly GrowRequest[]): Promise<void> {
    return this.pool.grow(this.slidingRequests(requests));
  }

  /**
   * After a step: each sequence gives up the blocks before its window (firstLiveBlock of its
   * written length): its own are freed in one FREE, checkpoint blocks are released to the cache.
   * With `keep` (its prompt's full blocks, cached in the full-attention group, and their hashes),
   * the blocks of the window before its prompt's last block boundary become a checkpoint instead
   * of being freed: a next turn whose template re-renders this turn's answer otherwise (a thinking
   * model's reasoning left out) resumes at the end of this prompt.
   */
  async slide(steps: readonly { table: KvBlockTable; keep?: { blocks: number; hashes: readonly string[]; tokens: readonly number[] } }[]): Promise<void> {
    const spare = new KvBlockTable(this.blockSize);
    const stored: StoredPrefixBlock[] = [];
    for (const { table: full, keep } of steps) {
      const table = this.tables.get(full);
      if (table === undefined) continue;
      const first = Math.min(firstLiveBlock(full.length, this.window, this.blockSize), table.blocks.length);
      const span = keep === undefined || this.checkpoints === null ? { first: 0, end: 0 } : checkpointSpan(keep.blocks, this.window, this.blockSize);
      for (let i = 0; i < first; i++) {
        if (i >= span.first && i < span.end) this.checkpoint(table, i, keep!.hashes, keep!.tokens, spare.blocks, stored);
        this.drop(table, i, spare.blocks);
      }
    }
    if (stored.length > 0) this.events?.stored(stored);
    await this.pool.release([spare]);
  }

  /**
   * The longest resume (in full blocks, at most `fullRun`) whose window checkpoints are all cached,
   * where `hashes` are the prompt's chained block hashes.
   */
  resumableBlocks(hashes: readonly string[], fullRun: number): number {
    const checkpoints = this.checkpoints;
    if (checkpoints === null) return 0;
    return longestSlidingResume(fullRun, (i) => checkpoints.has(hashes[i]!), this.window, this.blockSize);
  }

  /** A sequence admitted at a prefix hit of `blocks` full blocks reads the checkpoints of its window. */
  share(full: KvBlockTable, hashes: readonly string[], blocks: number): void {
    const table = this.slidingOf(full);
    const { first, end } = checkpointSpan(blocks, this.window, this.blockSize);
    table.blocks.length = 0;
    table.resumedFrom = first;
    for (let i = 0; i < first; i++) table.blocks.push(NO_BLOCK);
    for (let i = first; i < end; i++) {
      table.blocks.push(this.checkpoints!.acquire(hashes[i]!));
      table.checkpointed.set(i, hashes[i]!);
    }
  }

  /**
   * A sequence leaves the batch with `cached` full blocks in the prefix cache (`hashes` theirs,
   * `tokens` its tokens): the blocks covering the window before block `cached` stay as
   * checkpoints; every other block is freed, checkpoints it read are released.
   */
  async release(full: KvBlockTable, hashes: readonly string[], cached: number, tokens: readonly number[]): Promise<void> {
    const table = this.tables.get(full);
    if (table === undefined) return;
    const spare = new KvBlockTable(this.blockSize);
    const stored: StoredPrefixBlock[] = [];
    if (this.checkpoints !== null && cached > 0) {
      const { first, end } = checkpointSpan(cached, this.window, this.blockSize);
      for (let i = first; i < end && i < table.blocks.length; i++) this.checkpoint(table, i, hashes, tokens, spare.blocks, stored);
    }
    for (let i = 0; i < table.blocks.length; i++) this.drop(table, i, spare.blocks);
    table.blocks.length = 0;
    table.length = 0;
    this.tables.delete(full);
    if (stored.length > 0) this.events?.stored(stored);
    if (this.checkpoints !== null && table.resumedFrom > 0) {
      const superseded = this.checkpoints.dropSuperseded(hashes.slice(0, table.resumedFrom));
      spare.blocks.push(...superseded.blocks);
      if (superseded.hashes.length > 0) this.events?.removed(superseded.hashes, this.tag);
    }
    await this.pool.release([spare]);
  }

  /**
   * Frees up to `count` unreferenced checkpoints, those whose full-attention prefix is gone
   * (`stranded`) first.
   */
  async evict(count: number, stranded: (hash: string) => boolean): Promise<void> {
    if (this.checkpoints === null || count <= 0) return;
    const { blocks, hashes } = this.checkpoints.evict(count, stranded);
    if (hashes.length > 0) this.events?.removed(hashes, this.tag);
    const spare = new KvBlockTable(this.blockSize);
    spare.blocks.push(...blocks);
    await this.pool.release([spare]);
  }

  /** ALLOC and FREE of this group's blocks one at a time, for a prefill that moves its window itself (slidingPrefillWindow.ts). */
  blockSource(): { alloc(count: number): Promise<number[]>; free(ids: readonly number[]): Promise<void> } {
    return {
      alloc: async (count) => {
        const spare = new KvBlockTable(this.blockSize);
        await this.pool.grow([{ table: spare, entries: count * this.blockSize }]);
        return spare.blocks;
      },
      free: async (ids) => {
        const spare = new KvBlockTable(this.blockSize);
        spare.blocks.push(...ids);
        await this.pool.release([spare]);
      },
    };
  }

  private slidingOf(full: KvBlockTable): SlidingTable {
    let table = this.tables.get(full);
    if (table === undefined) {
      table = new SlidingTable(this.blockSize);
      this.tables.set(full, table);
    }
    return table;
  }

  private slidingRequests(requests: readonly GrowRequest[]): GrowRequest[] {
    return requests.map((request) => ({ table: this.slidingOf(request.table), entries: request.entries }));
  }

  /** Entry i of a table, its own block, joins the checkpoint cache under hashes[i] (an equal one cached: to `spare`). */
  private checkpoint(table: SlidingTable, i: number, hashes: readonly string[], tokens: readonly number[], spare: number[], stored: StoredPrefixBlock[]): void {
    const block = table.blocks[i]!;
    if (block === NO_BLOCK || table.checkpointed.has(i)) return;
    table.blocks[i] = NO_BLOCK;
    if (this.checkpoints!.insert(hashes[i]!, block))
      stored.push({ hash: hashes[i]!, parent: i === 0 ? null : hashes[i - 1]!, tokens: tokens.slice(i * this.blockSize, (i + 1) * this.blockSize), group: this.tag });
    else spare.push(block);
  }

  /** Gives up entry i of a table: its own block goes to `spare`, a checkpoint back to the cache. */
  private drop(table: SlidingTable, i: number, spare: number[]): void {
    const block = table.blocks[i]!;
    if (block === NO_BLOCK) return;
    table.blocks[i] = NO_BLOCK;
    const hash = table.checkpointed.get(i);
    if (hash === undefined) spare.push(block);
    else {
      table.checkpointed.delete(i);
      this.checkpoints!.release(hash);
    }
  }
}
