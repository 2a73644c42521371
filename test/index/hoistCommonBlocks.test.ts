import { describe, expect, test } from "bun:test";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";
import { treeHits } from "../../src/index/contextTree.ts";
import { hoistCommonBlocks } from "../../src/index/hoistCommonBlocks.ts";
import { prefixTreeOfSequences } from "../../src/index/prefixTreeOfSequences.ts";
import { randomContexts } from "../helpers/randomContexts.ts";

describe("hoistCommonBlocks", () => {
  test("a block every context under a node holds moves up behind the node's prefix", () => {
    // Both contexts start with 1 and both hold 9, but later and at different places.
    const set = contextSetFromArrays([[1, 2, 9], [1, 3, 4, 9]]);
    const ordered = set.flat.slice();
    const tree = hoistCommonBlocks(set, ordered);
    const blocks = (c: number) => Array.from(ordered.subarray(set.offsets[c]!, set.offsets[c + 1]!), (b) => set.blockIds[b]);
    expect(blocks(0)).toEqual([1, 9, 2]);
    expect(blocks(1)).toEqual([1, 9, 3, 4]);
    expect(treeHits(tree)).toBe(2);
  });

  test("never lowers the hit count on random orders", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const set = contextSetFromArrays(randomContexts(seed, { contexts: 60, maxBlocks: 6, corpus: 10, duplicateShare: 0.1 }));
      const ordered = set.flat.slice();
      const before = treeHits(prefixTreeOfSequences(set, ordered));
      expect(treeHits(hoistCommonBlocks(set, ordered))).toBeGreaterThanOrEqual(before);
    }
  });
});
