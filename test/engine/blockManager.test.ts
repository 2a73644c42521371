import { describe, expect, test } from "bun:test";
import { BlockManager, type BlockManagerOptions } from "../../src/engine/blockManager.ts";
import type { GenerationRequest } from "../../src/engine/generationTypes.ts";
import { Sequence } from "../../src/engine/sequence.ts";
import type { BlockRunner } from "../../src/kv/kvBlockTable.ts";
import type { StoredPrefixBlock } from "../../src/kv/prefixBlockCache.ts";

const BLOCK_SIZE = 4;
const TOTAL_BLOCKS = 16;

/** A runner's ALLOC and FREE over ids 0..total-1, refusing double frees and unknown ids. */
class FakeBlockRunner implements BlockRunner {
  readonly freeIds: number[];
  readonly freed: number[] = [];
  constructor(total: number) {
    this.freeIds = Array.from({ length: total }, (_, i) => i);
  }
  async alloc(count: number): Promise<number[]> {
    if (count > this.freeIds.length) throw new Error(`alloc ${count}: ${this.freeIds.length} free`);
    return this.freeIds.splice(0, count);
  }
  async free(ids: readonly number[]): Promise<void> {
    for (const id of ids) {
      if (this.freeIds.includes(id)) throw new Error(`double free of block ${id}`);
      this.freeIds.push(id);
      this.freed.push(id);
    }
  }
}

const decoder = { decode: (ids: readonly number[]) => ids.map((id) => String.fromCharCode(97 + (id % 26))).join("") };

function sequence(promptIds: number[], extra: Partial<GenerationRequest> = {}): Sequence {
  const request: GenerationRequest = { promptIds, maxTokens: 4, sampling: { temperature: 0, topP: 1, topK: 0 }, ...extra };
  return new Sequence(request, decoder, BLOCK_SIZE, 4);
}

function setup(options: BlockManagerOptions = {}) {
  const runner = new FakeBlockRunner(TOTAL_BLOCKS);
  const manager = new BlockManager(runner, { block_size: BLOCK_SIZE, free_blocks: TOTAL_BLOCKS }, { prefixSeed: "model", ...options });
  return { runner, manager };
}

/** Admits the sequence and runs its whole prompt: blocks for it, the entries written, full blocks cached. */
async function prefill(manager: BlockManager, seq: Sequence): Promise<void> {
  manager.admit(seq);
  await manager.grow([{ table: seq.table, entries: seq.tokens.length }]);
  seq.table.length = seq.tokens.length;
  await manager.cacheStepBlocks([seq]);
}

// 10 tokens: two full blocks and a partial one.
const PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];

describe("BlockManager", () => {
  test("a prompt's full blocks are cached as they fill and shared by the next sequence with the same prefix", async () => {
    const { manager } = setup();
    const first = sequence(PROMPT);
    await prefill(manager, first);
    expect(first.table.blocks).toHaveLength(3);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 2 });
    expect(first.prefixHashes).toHaveLength(2);

    const second = sequence([...PROMPT.slice(0, 8), 42, 43, 44]);
    manager.admit(second);
    // Its first two blocks are the first sequence's, referenced, never written again.
    expect(second.table.blocks).toEqual(first.table.blocks.slice(0, 2));
    expect(second.table.length).toBe(8);
    expect(second.prefixCachedTokens).toBe(8);
    expect(second.uncached).toBe(3);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 2, hits: 2 });
    expect(manager.pool.used).toBe(3);
  });

  test("at least the last prompt token is computed: a prompt of exactly cached blocks shares all but the last block", async () => {
    const { manager } = setup();
    await prefill(manager, sequence(PROMPT.slice(0, 8)));
    const again = sequence(PROMPT.slice(0, 8));
    manager.admit(again);
    expect(again.table.blocks).toHaveLength(1);
    expect(again.uncached).toBe(4);
  });

  test("release: cached blocks stay in the cache, unreferenced once no sequence holds them; the rest go back to the runner", async () => {
    const { runner, manager } = setup();
    const first = sequence(PROMPT);
    await prefill(manager, first);
    const second = sequence(PROMPT);
    manager.admit(second);
    const [a, b, partial] = first.table.blocks;

    await manager.release([first.table]);
    expect(runner.freed).toEqual([partial!]);
    expect(first.table.blocks).toEqual([]);
    expect(first.prefixHashes).toEqual([]);
    // The second sequence still references both cached blocks.
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 2 });

    await manager.release([second.table]);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 0 });
    expect(manager.pool.used).toBe(2);

    // Unreferenced cached blocks give way when room is needed.
    await manager.makeRoom(TOTAL_BLOCKS);
    expect(manager.pool.free).toBe(TOTAL_BLOCKS);
    expect(runner.freed.sort((x, y) => x - y)).toEqual([a!, b!, partial!].sort((x, y) => x - y));
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 0, evictions: 2 });
  });

  test("referenced blocks are never evicted", async () => {
    const { manager } = setup();
    const holder = sequence(PROMPT);
    await prefill(manager, holder);
    await manager.makeRoom(TOTAL_BLOCKS);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 2, evictions: 0 });
    expect(manager.pool.used).toBe(3);
  });

  test("two sequences that computed the same blocks keep one copy: the later one's copy is freed", async () => {
    const { runner, manager } = setup();
    const first = sequence(PROMPT);
    const second = sequence(PROMPT);
    manager.admit(first);
    manager.admit(second);
    await manager.grow([
      { table: first.table, entries: 10 },
      { table: second.table, entries: 10 },
    ]);
    first.table.length = 10;
    second.table.length = 10;
    const secondOwn = second.table.blocks.slice(0, 2);
    await manager.cacheStepBlocks([first, second]);
    expect(second.table.blocks.slice(0, 2)).toEqual(first.table.blocks.slice(0, 2));
    expect(runner.freed.sort((x, y) => x - y)).toEqual(secondOwn.sort((x, y) => x - y));
    expect(manager.pool.used).toBe(4);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 2 });
    // Both release their reference; the shared blocks are freed only once, by eviction.
    await manager.release([first.table, second.table]);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 2, referenced: 0 });
    await manager.makeRoom(TOTAL_BLOCKS);
    expect(manager.pool.free).toBe(TOTAL_BLOCKS);
  });

  test("a different cache salt shares nothing", async () => {
    const { manager } = setup();
    await prefill(manager, sequence(PROMPT, { cacheSalt: "tenant-a" }));
    const other = sequence(PROMPT, { cacheSalt: "tenant-b" });
    manager.admit(other);
    expect(other.table.blocks).toEqual([]);
    const same = sequence(PROMPT, { cacheSalt: "tenant-a" });
    manager.admit(same);
    expect(same.table.blocks).toHaveLength(2);
  });

  test("with prefix caching off, nothing is shared and release frees every block", async () => {
    const { runner, manager } = setup({ prefixCache: false });
    const first = sequence(PROMPT);
    await prefill(manager, first);
    const second = sequence(PROMPT);
    manager.admit(second);
    expect(second.table.blocks).toEqual([]);
    expect(manager.prefixCacheStats).toBeNull();
    await manager.release([first.table]);
    expect(runner.freed).toHaveLength(3);
    expect(manager.pool.used).toBe(0);
  });

  test("a plain prompt waits for blocks a running sequence is computing, and not for others", async () => {
    const { manager } = setup();
    const running = sequence(PROMPT);
    manager.admit(running);
    const pending = manager.pendingPrefixBlocks([running]);
    expect(pending.size).toBe(2);
    expect(manager.waitsForSharedPrefix(sequence(PROMPT), pending)).toBe(true);
    expect(manager.waitsForSharedPrefix(sequence([99, ...PROMPT]), pending)).toBe(false);
    // Once the running one's blocks are written and cached, none are pending.
    await manager.grow([{ table: running.table, entries: 10 }]);
    running.table.length = 10;
    await manager.cacheStepBlocks([running]);
    expect(manager.pendingPrefixBlocks([running]).size).toBe(0);
  });

  test("KV events: stored blocks with their tokens and parents, removed on eviction, cleared on reset", async () => {
    const stored: StoredPrefixBlock[] = [];
    const removed: string[] = [];
    let cleared = 0;
    const { manager } = setup({ prefixEvents: { stored: (blocks) => stored.push(...blocks), removed: (hashes) => removed.push(...hashes), cleared: () => cleared++ } });
    const first = sequence(PROMPT);
    await prefill(manager, first);
    expect(stored.map((block) => block.tokens)).toEqual([
      [1, 2, 3, 4],
      [5, 6, 7, 8],
    ]);
    expect(stored[0]!.parent).toBeNull();
    expect(stored[1]!.parent).toBe(stored[0]!.hash);
    await manager.release([first.table]);
    await manager.makeRoom(TOTAL_BLOCKS);
    expect(removed.sort()).toEqual(stored.map((block) => block.hash).sort());

    const holder = sequence(PROMPT);
    await prefill(manager, holder);
    manager.reset({ block_size: BLOCK_SIZE, free_blocks: TOTAL_BLOCKS }, [holder]);
    expect(cleared).toBe(1);
    expect(holder.prefixHashes).toEqual([]);
    expect(manager.pool.free).toBe(TOTAL_BLOCKS);
    expect(manager.prefixCacheStats).toMatchObject({ blocks: 0 });
  });
});
