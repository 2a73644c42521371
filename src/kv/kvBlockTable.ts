/**
 * Server-side bookkeeping of the runner's paged KV cache: each sequence's block
 * table (the block ids its entries live in, entry s in table[s / block_size]) and
 * how many entries are written, and a pool that mirrors how many blocks the runner
 * has free. Blocks are allocated and freed through the runner's ALLOC and FREE,
 * many sequences' worth in one call (grow() and release() take batches).
 */

/** Just what the pool needs of the runner (RunnerProcess has it). */
export interface BlockRunner {
  /** `group`: the KV cache group (0, the default: the only one or the full-attention layers'; 1: the sliding-window layers'). */
  alloc(count: number, group?: number): Promise<number[]>;
  free(ids: readonly number[], group?: number): Promise<void>;
}

/** A sliding-window table's entry for a block that has left the window (the runner's NO_BLOCK). */
export const NO_BLOCK = 0xffffffff;

/** One sequence's blocks and written length. */
export class KvBlockTable {
  readonly blocks: number[] = [];
  /** Entries whose K/V is written (sequence indices 0 .. length-1). */
  length = 0;

  constructor(readonly blockSize: number) {}

  /** Entries the table can hold without more blocks. */
  get capacity(): number {
    return this.blocks.length * this.blockSize;
  }

  /** Blocks it holds (a sliding-window table's NO_BLOCK entries are none). */
  get heldBlocks(): number[] {
    return this.blocks.filter((block) => block !== NO_BLOCK);
  }

  /** Blocks to add so that it holds `entries` entries. */
  blocksNeeded(entries: number): number {
    return Math.max(0, blocksFor(entries, this.blockSize) - this.blocks.length);
  }
}

/** Blocks that hold `entries` entries. */
export function blocksFor(entries: number, blockSize: number): number {
  return Math.ceil(entries / blockSize);
}

/** A sequence's growth in one allocation batch. */
export interface GrowRequest {
  table: KvBlockTable;
  /** Entries it must be able to hold. */
  entries: number;
}

export class KvBlockPool {
  private freeCount: number;

  constructor(
    private readonly runner: BlockRunner,
    readonly blockSize: number,
    readonly totalBlocks: number,
    freeBlocks = totalBlocks,
    /** The runner's KV cache group these blocks are of. */
    readonly group = 0,
  ) {
    this.freeCount = freeBlocks;
  }

  /** Blocks the runner has free (as far as this pool's calls go). */
  get free(): number {
    return this.freeCount;
  }

  get used(): number {
    return this.totalBlocks - this.freeCount;
  }

  /** Blocks a batch of growth requests needs in all. */
  shortfall(requests: readonly GrowRequest[]): number {
    return requests.reduce((sum, request) => sum + request.table.blocksNeeded(request.entries), 0);
  }

  /**
   * Gives every table the blocks it needs, in one ALLOC. Throws (the runner's
   * out-of-blocks error, or this pool's when it knows there are too few) without
   * changing any table.
   */
  async grow(requests: readonly GrowRequest[]): Promise<void> {
    const needs = requests.map((request) => request.table.blocksNeeded(request.entries));
    const total = needs.reduce((a, b) => a + b, 0);
    if (total === 0) return;
    if (total > this.freeCount) throw new KvCacheFullError(total, this.freeCount);
    const ids = this.group === 0 ? await this.runner.alloc(total) : await this.runner.alloc(total, this.group);
    this.freeCount -= ids.length;
    let next = 0;
    requests.forEach((request, i) => {
      for (let k = 0; k < needs[i]!; k++) request.table.blocks.push(ids[next++]!);
    });
  }

  /** Frees every block of these tables in one FREE and empties them. */
  async release(tables: readonly KvBlockTable[]): Promise<void> {
    const ids: number[] = [];
    for (const table of tables) {
      ids.push(...table.heldBlocks);
      table.blocks.length = 0;
      table.length = 0;
    }
    if (ids.length === 0) return;
    this.freeCount += ids.length;
    if (this.group === 0) await this.runner.free(ids);
    else await this.runner.free(ids, this.group);
  }

  /** Forgets everything (the runner restarted with every block free). */
  reset(freeBlocks = this.totalBlocks): void {
    this.freeCount = freeBlocks;
  }
}

export class KvCacheFullError extends Error {
  constructor(
    readonly needed: number,
    readonly free: number,
  ) {
    super(`the KV cache has ${free} free blocks, ${needed} needed`);
    this.name = "KvCacheFullError";
  }
}
