import { describe, expect, test } from "bun:test";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";
import { sharedPrefixLength, treeHits } from "../../src/index/contextTree.ts";
import { greedyPrefixTrie } from "../../src/index/greedyPrefixTrie.ts";
import { iteratedSearch } from "../../src/index/iteratedSearch.ts";
import { prefixTreeOfSequences } from "../../src/index/prefixTreeOfSequences.ts";
import { randomContexts } from "../helpers/randomContexts.ts";

describe("iteratedSearch", () => {
  const contexts = randomContexts(7, { contexts: 120, maxBlocks: 10, corpus: 60, duplicateShare: 0.05 });

  test("never lowers the hit count, is deterministic, and leaves private tails in input order", () => {
    const set = contextSetFromArrays(contexts);
    const start = greedyPrefixTrie(set, { lookahead: 4 }).ordered;
    const before = treeHits(prefixTreeOfSequences(set, start));
    const first = start.slice();
    const hits = iteratedSearch(set, first, { iterations: 40 });
    expect(hits).toBeGreaterThanOrEqual(before);
    expect(treeHits(prefixTreeOfSequences(set, first))).toBe(hits);

    const second = start.slice();
    iteratedSearch(set, second, { iterations: 40 });
    expect(Array.from(second)).toEqual(Array.from(first));

    const tree = prefixTreeOfSequences(set, first);
    for (let c = 0; c < set.size; c++) {
      const own = set.flat.subarray(set.offsets[c]!, set.offsets[c + 1]!);
      const mine = first.subarray(set.offsets[c]!, set.offsets[c + 1]!);
      expect(Array.from(mine).sort((a, b) => a - b)).toEqual(Array.from(own).sort((a, b) => a - b));
      const shared = new Set(mine.subarray(0, sharedPrefixLength(tree, c)));
      const tail = Array.from(mine.subarray(sharedPrefixLength(tree, c)));
      expect(tail).toEqual(Array.from(own).filter((b) => !shared.has(b)));
    }
  });
});
