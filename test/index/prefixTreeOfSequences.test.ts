import { describe, expect, test } from "bun:test";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";
import { allSearchPaths, sharedPrefixLength, treeHits } from "../../src/index/contextTree.ts";
import { prefixTreeOfSequences } from "../../src/index/prefixTreeOfSequences.ts";
import { simulatePrefixCache } from "../../src/index/prefixCacheSimulator.ts";
import { randomContexts } from "../helpers/randomContexts.ts";

describe("prefixTreeOfSequences", () => {
  test("branch points, a context that is a prefix of another, identical contexts", () => {
    const set = contextSetFromArrays([[1, 2, 3], [1, 2], [1, 2, 4], [5, 6], [1, 2, 3]]);
    const tree = prefixTreeOfSequences(set, set.flat.slice());
    // Root -> [1,2] (4 contexts) and -> [5,6] (1 context), larger first.
    const top = tree.children[0]!;
    expect(top.length).toBe(2);
    expect(tree.prefixLength[top[0]!]).toBe(2);
    expect(tree.leafOf[0]).toBe(tree.leafOf[4]!); // identical contexts share a leaf
    expect(tree.contextsAt[tree.leafOf[0]!]).toBe(2);
    expect(tree.children[tree.leafOf[1]!]!.length).toBe(0); // contexts sit at leaves only
    expect(sharedPrefixLength(tree, 1)).toBe(2);
    expect(sharedPrefixLength(tree, 0)).toBe(3);
    expect(sharedPrefixLength(tree, 3)).toBe(0);
    expect(treeHits(tree)).toBe(2 + 2 + 2 + 1); // [1,2] reused by 3 others; [3] by its twin
  });

  test("tree hits equal the simulated hits at unlimited capacity, in any order", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const set = contextSetFromArrays(randomContexts(seed, { contexts: 80, maxBlocks: 6, corpus: 12, duplicateShare: 0.1 }));
      const tree = prefixTreeOfSequences(set, set.flat.slice());
      const sequences = Array.from({ length: set.size }, (_, c) => set.flat.subarray(set.offsets[c]!, set.offsets[c + 1]!));
      const simulated = simulatePrefixCache(sequences, { blockTokens: 1 });
      expect(treeHits(tree)).toBe(simulated.hitTokens);
      // Search paths lead to each context's leaf.
      const paths = allSearchPaths(tree);
      for (let c = 0; c < set.size; c++) {
        let node = 0;
        for (const step of paths[tree.leafOf[c]!]!) node = tree.children[node]![step]!;
        expect(node).toBe(tree.leafOf[c]!);
      }
    }
  });
});
