import { describe, expect, test } from "bun:test";
import { contextSetFromArrays, type ContextSet } from "../../src/index/contextSet.ts";
import { treeHits } from "../../src/index/contextTree.ts";
import { greedyPrefixTrie } from "../../src/index/greedyPrefixTrie.ts";
import { prefixTreeOfSequences } from "../../src/index/prefixTreeOfSequences.ts";
import { reinsertionSearch } from "../../src/index/reinsertionSearch.ts";
import { randomContexts } from "../helpers/randomContexts.ts";

const sortedSegment = (a: Int32Array, set: ContextSet, c: number) => Array.from(a.subarray(set.offsets[c]!, set.offsets[c + 1]!)).sort((x, y) => x - y);

describe("reinsertionSearch", () => {
  test("moves a context to the deeper prefix it can share, the rest in original order", () => {
    // Contexts 1 and 2 start with [7, 8]; context 0 holds 7 and 8 but starts with 1 (shared with nobody).
    const set = contextSetFromArrays([[1, 8, 2, 7], [7, 8, 3], [7, 8, 4], [1, 9]]);
    const ordered = set.flat.slice(); // as given: context 0 shares only block 1 with context 3
    const before = treeHits(prefixTreeOfSequences(set, ordered));
    const { moves } = reinsertionSearch(set, ordered);
    expect(moves).toBeGreaterThan(0);
    const blocks = (c: number) => Array.from(ordered.subarray(set.offsets[c]!, set.offsets[c + 1]!), (b) => set.blockIds[b]);
    expect(blocks(0)).toEqual([7, 8, 1, 2]);
    expect(treeHits(prefixTreeOfSequences(set, ordered))).toBeGreaterThan(before);
  });

  test("never lowers the hit count and keeps every context a permutation of itself", () => {
    for (let seed = 1; seed <= 15; seed++) {
      const set = contextSetFromArrays(randomContexts(seed, { contexts: 150, maxBlocks: 8, corpus: 40, duplicateShare: 0.05 }));
      const { ordered } = greedyPrefixTrie(set, { lookahead: 0 });
      const before = treeHits(prefixTreeOfSequences(set, ordered));
      const input = ordered.slice();
      reinsertionSearch(set, ordered, { passes: 3 });
      expect(treeHits(prefixTreeOfSequences(set, ordered))).toBeGreaterThanOrEqual(before);
      for (let c = 0; c < set.size; c++) expect(sortedSegment(ordered, set, c)).toEqual(sortedSegment(input, set, c));
    }
  });
});
