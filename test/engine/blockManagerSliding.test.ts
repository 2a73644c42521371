/**
 * The block manager on a model with two KV cache groups (global and sliding-window layers): the
 * sliding group frees blocks as they leave the window (chunked prefill and decode), keeps a window
 * checkpoint when a sequence leaves, resumes a later prompt only where both the full blocks and the
 * checkpoint are cached, hands checkpoint blocks back to the cache (never to the runner) as a
 * reader slides past them, evicts them for room, and tags their KV events with the group.
 */
import { describe, expect, test } from "bun:test";
import { BlockManager } from "../../src/engine/blockManager.ts";
import { Sequence } from "../../src/engine/sequence.ts";
import { NO_BLOCK, type BlockRunner } from "../../src/kv/kvBlockTable.ts";
import type { KvCacheGroupTag, PrefixCacheEvents, StoredPrefixBlock } from "../../src/kv/prefixBlockCache.ts";

const BLOCK = 4;
const WINDOW = 6;
const FULL_BLOCKS = 32;
const SLIDING_BLOCKS = 12;

/** ALLOC and FREE per group, refusing double frees and another group's ids. */
class TwoGroupRunner implements BlockRunner {
  readonly freeIds = [Array.from({ length: FULL_BLOCKS }, (_, i) => i), Array.from({ length: SLIDING_BLOCKS }, (_, i) => 100 + i)];
  readonly freed: number[][] = [[], []];
  async alloc(count: number, group = 0): Promise<number[]> {
    if (count > this.freeIds[group]!.length) throw new Error(`group ${group}: alloc ${count} of ${this.freeIds[group]!.length} free`);
    return this.freeIds[group]!.splice(0, count);
  }
  async free(ids: readonly number[], group = 0): Promise<void> {
    for (const id of ids) {
      if (this.freeIds[group]!.includes(id) || (group === 1) !== id >= 100) throw new Error(`group ${group}: bad free of ${id}`);
      this.freeIds[group]!.push(id);
      this.freed[group]!.push(id);
    }
  }
  held(group: number): number {
    return (group === 0 ? FULL_BLOCKS : SLIDING_BLOCKS) - this.freeIds[group]!.length;
  }
}


function setup() {
  const runner = new TwoGroupRunner();
  const recorded = { stored: [] as StoredPrefixBlock[], removed: [] as { hashes: readonly string[]; group?: KvCacheGroupTag }[] };
  const events: PrefixCacheEvents = {
    stored: (blocks) => recorded.stored.push(...blocks),
    removed: (hashes, group) => recorded.removed.push({ hashes, ...(group === undefined ? {} : { group }) }),
    cleared: () => {},
  };
  const info = {
    block_size: BLOCK,
    free_blocks: FULL_BLOCKS,
    kv_groups: [
      { kind: "full_attention" as const, layers: [1], num_blocks: FULL_BLOCKS, free_blocks: FULL_BLOCKS },
      { kind: "sliding_window" as const, sliding_window: WINDOW, layers: [0], num_blocks: SLIDING_BLOCKS, free_blocks: SLIDING_BLOCKS },
    ],
  };
  const manager = new BlockManager(runner, info, { prefixSeed: "model", prefixEvents: events });
  return { runner, manager, recorded };
}

const decoder = { decode: (ids: readonly number[]) => ids.map((id) => String.fromCharCode(97 + (id % 26))).join("") };
function sequence(promptIds: number[]): Sequence {
  return new Sequence({ promptIds, maxTokens: 4, sampling: { temperature: 0, topP: 1, topK: 0 } }, decoder, BLOCK, 4);
}

/** Runs the prompt's uncomputed tokens in chunks as the scheduler does; checks the bound after each step. */
async function run(manager: BlockManager, seq: Sequence, chunk: number): Promise<number> {
  let most = 0;
  while (seq.table.length < seq.tokens.length) {
    const count = Math.min(chunk, seq.tokens.length - seq.table.length);
    const grow = [{ table: seq.table, entries: seq.table.length + count }];
    expect(manager.fits(grow)).toBe(true);
    await manager.grow(grow);
    seq.table.length += count;
    await manager.cacheStepBlocks([seq]);
    const held = manager.sliding!.tableOf(seq.table).heldBlocks.length;
    most = Math.max(most, held);
    expect(held).toBeLessThanOrEqual(Math.ceil(WINDOW / BLOCK) + 1);
  }
  return most;
}

const PROMPT = Array.from({ length: 30 }, (_, i) => 10 + i);

describe("BlockManager with a sliding-window group", () => {
  test("a chunked prefill frees sliding blocks as they leave the window; the full group keeps every block", async () => {
    const { runner, manager } = setup();
    const seq = sequence(PROMPT);
    manager.admit(seq);
    expect(await run(manager, seq, 8)).toBe(Math.ceil(WINDOW / BLOCK) + 1);
    const sliding = manager.sliding!.tableOf(seq.table).blocks;
    // 30 entries: the last boundary is 28, whose window reads 23..27: blocks 5 and 6, and block 7 is written.
    expect(sliding.slice(0, 5).every((block) => block === NO_BLOCK)).toBe(true);
    expect(sliding.slice(5).every((block) => block >= 100)).toBe(true);
    expect(runner.held(1)).toBe(3);
    expect(seq.table.blocks).toHaveLength(8);
    expect(runner.freed[1]).toHaveLength(5);
  });

  test("a window checkpoint lets the next turn resume; its blocks go back to the cache, not the runner, as the reader slides past", async () => {
    const { runner, manager, recorded } = setup();
    const first = sequence(PROMPT);
    manager.admit(first);
    await run(manager, first, 8);
    await manager.release([first.table]);
    // 7 full blocks cached (28 entries); the checkpoint covers the window before 28: blocks 5 and 6.
    expect(runner.held(0)).toBe(7);
    expect(runner.held(1)).toBe(2);
    const slidingStored = recorded.stored.filter((block) => block.group?.index === 1);
    expect(slidingStored.map((block) => block.tokens)).toEqual([PROMPT.slice(20, 24), PROMPT.slice(24, 28)]);
    expect(slidingStored[0]!.group).toEqual({ index: 1, kind: "sliding_window", slidingWindow: WINDOW });
    expect(recorded.stored.filter((block) => block.group?.index === 0)).toHaveLength(7);

    const next = sequence([...PROMPT, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]);
    manager.admit(next);
    expect(next.prefixCachedTokens).toBe(28);
    expect(next.table.length).toBe(28);
    const checkpoint = manager.sliding!.tableOf(next.table).blocks;
    expect(checkpoint.slice(0, 5).every((block) => block === NO_BLOCK)).toBe(true);
    expect(checkpoint).toHaveLength(7);
    const freedBefore = runner.freed[1]!.length;
    await run(manager, next, 4);
    // The checkpoint blocks left its window: released to the cache, never freed to the runner.
    expect(runner.freed[1]!.slice(freedBefore)).not.toContain(checkpoint[5]!);
    expect(runner.freed[1]!.slice(freedBefore)).not.toContain(checkpoint[6]!);
    await manager.release([next.table]);

    // A prompt that shares only blocks 0..3 has no checkpoint there: it starts from nothing.
    const diverging = sequence([...PROMPT.slice(0, 17), 99, 98, 97, 96, 95, 94]);
    manager.admit(diverging);
    expect(diverging.prefixCachedTokens).toBe(0);
    expect(diverging.table.blocks).toHaveLength(0);
  });

  test("the window before the prompt's end stays as a checkpoint too: a next turn that re-renders the answer otherwise resumes there", async () => {
    const { runner, manager, recorded } = setup();
    const first = sequence(PROMPT);
    manager.admit(first);
    await run(manager, first, 8);
    // It generates 20 tokens, one a step, sliding far past its prompt's window.
    for (let k = 0; k < 20; k++) {
      first.tokens.push(300 + k);
      await run(manager, first, 1);
    }
    const promptCheckpoint = recorded.stored.filter((block) => block.group?.index === 1).map((block) => block.tokens);
    expect(promptCheckpoint).toEqual([PROMPT.slice(20, 24), PROMPT.slice(24, 28)]);
    await manager.release([first.table]);
    // Checkpoints: the prompt's (blocks 5, 6) and the end's (blocks 10, 11).
    expect(runner.held(1)).toBe(4);
    // The next turn keeps the prompt and drops the answer (a thinking model's template does): it resumes at the prompt's last block boundary.
    const next = sequence([...PROMPT, 400, 401, 402, 403, 404, 405]);
    manager.admit(next);
    expect(next.prefixCachedTokens).toBe(28);
    await run(manager, next, 8);
    await manager.release([next.table]);
  });

  test("room for a step: unreferenced window checkpoints are evicted, with group-tagged KV events", async () => {
    const { runner, manager, recorded } = setup();
    const first = sequence(PROMPT);
    manager.admit(first);
    await run(manager, first, 8);
    await manager.release([first.table]);
    expect(runner.held(1)).toBe(2);
    // A long unrelated prompt needs the whole sliding pool in one step.
    const big = sequence(Array.from({ length: 44 }, (_, i) => 200 + i));
    manager.admit(big);
    const grow = [{ table: big.table, entries: SLIDING_BLOCKS * BLOCK }];
    expect(manager.fits(grow)).toBe(false);
    await manager.makeRoomFor(grow);
    expect(manager.fits(grow)).toBe(true);
    expect(runner.held(1)).toBe(0);
    const removed = recorded.removed.filter((event) => event.group?.index === 1);
    expect(removed.flatMap((event) => event.hashes)).toHaveLength(2);
    expect(removed[0]!.group).toEqual({ index: 1, kind: "sliding_window", slidingWindow: WINDOW });
    // The full group's blocks stayed (it had room).
    expect(runner.held(0)).toBe(7);
  });

  test("a conversation's checkpoints do not add up: a turn that resumed from one drops the older ones of its prefix when it leaves", async () => {
    const { runner, manager, recorded } = setup();
    const slidingHashes = () => recorded.stored.filter((block) => block.group?.index === 1).map((block) => block.hash);
    /** A turn: the prompt computed, then `answer` tokens generated one a step; then it leaves. */
    const turn = async (promptIds: number[], answer: number): Promise<Sequence> => {
      const seq = sequence(promptIds);
      manager.admit(seq);
      await run(manager, seq, 8);
      for (let k = 0; k < answer; k++) {
        seq.tokens.push(500 + seq.tokens.length);
        await run(manager, seq, 1);
      }
      await manager.release([seq.table]);
      return seq;
    };
    const first = await turn(PROMPT, 20);
    // Turn 1's checkpoints: its prompt's end (28: blocks 5, 6) and its end (48: blocks 10, 11).
    expect(runner.held(1)).toBe(4);
    const firstCheckpoints = slidingHashes();
    expect(firstCheckpoints).toHaveLength(4);
    const second = await turn([...first.tokens, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69], 8);
    expect(second.prefixCachedTokens).toBe(48);
    // Turn 2 resumed at 48 (blocks 10, 11): turn 1's prompt checkpoint is dropped, with its KV events; 10, 11 and turn 2's own stay.
    const removed = () => recorded.removed.filter((event) => event.group?.index === 1).flatMap((event) => event.hashes);
    expect(removed()).toEqual(firstCheckpoints.slice(0, 2));
    expect(manager.sliding!.checkpointStats).toMatchObject({ superseded: 2, evictions: 0 });
    const secondCheckpoints = slidingHashes().slice(4);
    // Its prompt's end (60: blocks 13, 14) and its end (68: blocks 15, 16).
    expect(secondCheckpoints).toHaveLength(4);
    expect(runner.held(1)).toBe(6);
    const third = await turn([...second.tokens, 70, 71, 72, 73, 74, 75], 8);
    expect(third.prefixCachedTokens).toBe(68);
    // Turn 3 resumed at 68 (blocks 15, 16): everything of the conversation before block 15 goes.
    expect(removed()).toEqual([...firstCheckpoints, ...secondCheckpoints.slice(0, 2)]);
    expect(runner.held(1)).toBeLessThanOrEqual(6);
    // Regenerating turn 3 (its prompt again) resumes at its prompt's end; branching off before turn 3's resume point starts over.
    const again = sequence([...second.tokens, 70, 71, 72, 73, 74, 75]);
    manager.admit(again);
    expect(again.prefixCachedTokens).toBe(72);
    await manager.release([again.table]);
    const edited = sequence([...PROMPT, 90, 91, 92, 93]);
    manager.admit(edited);
    expect(edited.prefixCachedTokens).toBe(0);
    await manager.release([edited.table]);
  });
});
