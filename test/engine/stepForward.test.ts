/**
 * A step's FORWARD sequences (stepForward.ts): a sparse decode step reads its compacted table; on a
 * model with two KV groups the sliding group gets the whole sliding table and the token's true
 * index there (slidingIndices), so the sliding layers keep their window.
 */
import { describe, expect, test } from "bun:test";
import { stepForwardSequences } from "../../src/engine/stepForward.ts";
import type { Sequence } from "../../src/engine/sequence.ts";
import type { StepRun } from "../../src/engine/stepRun.ts";
import { KvBlockTable, NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import type { SlidingWindowGroup } from "../../src/kv/slidingWindowGroup.ts";

const B = 16;

/** A sequence of `length` cached entries and one more token, whose sparse decode keeps `pages`. */
function sequence(length: number, pages: number[] | null): Sequence {
  const table = new KvBlockTable(B);
  table.blocks.push(...Array.from({ length: Math.floor(length / B) + 1 }, (_, i) => 100 + i));
  table.length = length;
  const sparse =
    pages === null
      ? null
      : {
          decodeEntry(full: readonly number[], at: number) {
            return { table: pages.map((p) => full[p]!), index: (pages.length - 1) * B + (at % B) };
          },
        };
  return { table, tokens: Array.from({ length: length + 1 }, (_, i) => 7 + i), sparse, promptLength: length + 1, request: {} } as unknown as Sequence;
}

/** A sliding group whose table of a sequence holds blocks 500.. inside its last 3 pages, NO_BLOCK before. */
const sliding = {
  tableOf(full: KvBlockTable) {
    return { blocks: full.blocks.map((_, i) => (i >= full.blocks.length - 3 ? 500 + i : NO_BLOCK)) };
  },
} as unknown as SlidingWindowGroup;

describe("stepForwardSequences", () => {
  test("two KV groups, a sparse decode step: the compacted table, the whole sliding table and the true index there", () => {
    const s = sequence(100, [0, 5, 6]);
    const [forward] = stepForwardSequences([{ sequence: s, count: 1, decode: true }], sliding);
    expect(forward!.table).toEqual([100, 105, 106]);
    expect(forward!.indices).toEqual([2 * B + 4]);
    expect(forward!.positions).toEqual([100]);
    expect(forward!.slidingTable).toEqual([NO_BLOCK, NO_BLOCK, NO_BLOCK, NO_BLOCK, 504, 505, 506]);
    expect(forward!.slidingIndices).toEqual([100]);
    expect(forward!.tokens).toEqual([107]);
  });

  test("a dense decode (the planner kept every page), a prefill and one KV group give no sliding indices", () => {
    const dense = sequence(40, [0, 1, 2]);
    const prefill = sequence(40, null);
    const plan: StepRun[] = [
      { sequence: dense, count: 1, decode: true },
      { sequence: prefill, count: 1, decode: false },
    ];
    const [d, p] = stepForwardSequences(plan, sliding);
    expect(d!.indices).toEqual([40]);
    expect(d!.slidingIndices).toBeUndefined();
    expect(d!.slidingTable).toEqual([500, 501, 502]);
    expect(Array.from(p!.indices)).toEqual([40]);
    expect(p!.slidingIndices).toBeUndefined();
    const [one] = stepForwardSequences([{ sequence: sequence(100, [0, 5, 6]), count: 1, decode: true }], null);
    expect(one!.slidingTable).toBeUndefined();
    expect(one!.slidingIndices).toBeUndefined();
    expect(one!.indices).toEqual([2 * B + 4]);
  });
});
