import { describe, expect, test } from "bun:test";
import { contextSetFromArrays, type BlockId, type ContextSet } from "../../src/index/contextSet.ts";
import { treeHits } from "../../src/index/contextTree.ts";
import { greedyPrefixTrie, greedyPrefixTrieTs, greedyPrefixTrieWasm } from "../../src/index/greedyPrefixTrie.ts";
import type { OrderedContexts } from "../../src/index/orderedContexts.ts";
import { randomContexts, seededRandom } from "../helpers/randomContexts.ts";

const twins = [
  { name: "ts", build: greedyPrefixTrieTs },
  { name: "wasm", build: greedyPrefixTrieWasm },
];

/** Every field of the result, as plain arrays: equal means bit-identical. */
function plain({ ordered, tree }: OrderedContexts) {
  return {
    ordered: Array.from(ordered),
    nodeCount: tree.nodeCount,
    parent: Array.from(tree.parent),
    prefixLength: Array.from(tree.prefixLength),
    children: tree.children.map((kids) => [...kids]),
    leafOf: Array.from(tree.leafOf),
    contextsAt: Array.from(tree.contextsAt),
  };
}

/** The first field where the twins differ, with its first differing index, or null. */
function firstDifference(a: OrderedContexts, b: OrderedContexts): string | null {
  const pa = plain(a);
  const pb = plain(b);
  for (const key of Object.keys(pa) as (keyof typeof pa)[]) {
    const x = JSON.stringify(pa[key]);
    const y = JSON.stringify(pb[key]);
    if (x === y) continue;
    if (!Array.isArray(pa[key])) return `${key}: ${x} vs ${y}`;
    const xs = pa[key] as unknown[];
    const ys = pb[key] as unknown[];
    let i = 0;
    while (i < Math.min(xs.length, ys.length) && JSON.stringify(xs[i]) === JSON.stringify(ys[i])) i++;
    return `${key}[${i}]: ${JSON.stringify(xs[i])} vs ${JSON.stringify(ys[i])} (lengths ${xs.length}, ${ys.length})`;
  }
  return null;
}

/** Reordered contexts with the user's block ids. */
function orderedIds(set: ContextSet, { ordered }: OrderedContexts): BlockId[][] {
  const out: BlockId[][] = [];
  for (let c = 0; c < set.size; c++) {
    out.push(Array.from(ordered.subarray(set.offsets[c]!, set.offsets[c + 1]!), (b) => set.blockIds[b]!));
  }
  return out;
}

describe("greedy prefix trie: known answers", () => {
  // A, B share {9, 5, 6}; C, D share only 9; E, F share {5, 6}. Block 9 is held by 4 contexts at
  // position 0 and 5 by 4 at positions 1, 1, 0, 0, so plain greedy takes 9 first; one level of
  // lookahead sees that 5's group goes on to share 6 (value 3 + 3) while 9's shares only
  // 5 between A and B (value 3 + 1), and takes 5.
  const set = contextSetFromArrays([
    [9, 5, 6],
    [9, 5, 6],
    [9, 1],
    [9, 2],
    [5, 6, 3],
    [5, 6, 4],
  ]);

  for (const { name, build } of twins) {
    test(`${name}: plain greedy (lookahead 0) takes the most popular block first`, () => {
      const result = build(set, { lookahead: 0 });
      expect(orderedIds(set, result)).toEqual([[9, 5, 6], [9, 5, 6], [9, 1], [9, 2], [5, 6, 3], [5, 6, 4]]);
      const t = result.tree;
      expect(t.nodeCount).toBe(8);
      expect(Array.from(t.parent)).toEqual([-1, 0, 0, 1, 1, 1, 2, 2]);
      expect(Array.from(t.prefixLength)).toEqual([0, 1, 2, 3, 2, 2, 3, 3]);
      expect(t.children.map((k) => [...k])).toEqual([[1, 2], [3, 4, 5], [6, 7], [], [], [], [], []]);
      expect(Array.from(t.leafOf)).toEqual([3, 3, 4, 5, 6, 7]);
      expect(Array.from(t.contextsAt)).toEqual([0, 0, 0, 2, 1, 1, 1, 1]);
      expect(treeHits(t)).toBe(7);
    });

    test(`${name}: lookahead 4 takes the block whose group shares more one level down`, () => {
      const result = build(set, { lookahead: 4 });
      expect(orderedIds(set, result)).toEqual([[5, 6, 9], [5, 6, 9], [9, 1], [9, 2], [5, 6, 3], [5, 6, 4]]);
      const t = result.tree;
      expect(t.nodeCount).toBe(8);
      expect(Array.from(t.parent)).toEqual([-1, 0, 0, 1, 1, 1, 2, 2]);
      expect(Array.from(t.prefixLength)).toEqual([0, 2, 1, 3, 3, 3, 2, 2]);
      expect(t.children.map((k) => [...k])).toEqual([[1, 2], [3, 4, 5], [6, 7], [], [], [], [], []]);
      expect(Array.from(t.leafOf)).toEqual([3, 3, 6, 7, 4, 5]);
      expect(treeHits(t)).toBe(8);
    });

    test(`${name}: empty set, empty and identical contexts, one context`, () => {
      const empty = build(contextSetFromArrays([]), { lookahead: 4 });
      expect(plain(empty)).toEqual({
        ordered: [], nodeCount: 1, parent: [-1], prefixLength: [0], children: [[]], leafOf: [], contextsAt: [0],
      });

      const one = build(contextSetFromArrays([["a", "b"]]), { lookahead: 4 });
      expect(plain(one)).toEqual({
        ordered: [0, 1], nodeCount: 2, parent: [-1, 0], prefixLength: [0, 2], children: [[1], []], leafOf: [1], contextsAt: [0, 1],
      });

      // Empty contexts share the root's empty prefix: one leaf for all of them, under the root.
      const mixed = contextSetFromArrays([[], [1, 2], [], [2, 1], [3]]);
      const r = build(mixed, { lookahead: 1 });
      expect(orderedIds(mixed, r)).toEqual([[], [1, 2], [], [1, 2], [3]]);
      // root -> node 1 (the {1,2} group, extended to prefix 2), node 2 (empties), node 3 ([3])
      expect(Array.from(r.tree.parent)).toEqual([-1, 0, 0, 0]);
      expect(Array.from(r.tree.prefixLength)).toEqual([0, 2, 0, 1]);
      expect(Array.from(r.tree.leafOf)).toEqual([2, 1, 2, 1, 3]);
      expect(Array.from(r.tree.contextsAt)).toEqual([0, 2, 2, 1]);
    });
  }

  test("greedyPrefixTrie gives the same result as both twins", () => {
    expect(plain(greedyPrefixTrie(set, { lookahead: 4 }))).toEqual(plain(greedyPrefixTrieTs(set, { lookahead: 4 })));
    expect(plain(greedyPrefixTrie(set))).toEqual(plain(greedyPrefixTrieWasm(set)));
  });

  test("the WASM twin reports progress at the start and the end", () => {
    const calls: Array<[number, number]> = [];
    greedyPrefixTrieWasm(set, { lookahead: 4, onProgress: (done, total) => calls.push([done, total]) });
    expect(calls).toEqual([[0, 6], [6, 6]]);
  });

  test("the WASM twin rejects a context that holds a block twice", () => {
    const bad = contextSetFromArrays([[1, 2], [3, 4, 3]]);
    expect(() => greedyPrefixTrieWasm(bad, { lookahead: 4 })).toThrow(/greedyPrefixTrie: context 1 holds block \d+ twice/);
    // and keeps working afterwards
    expect(plain(greedyPrefixTrieWasm(set, { lookahead: 4 }))).toEqual(plain(greedyPrefixTrieTs(set, { lookahead: 4 })));
  });
});

describe("greedy prefix trie: WASM == TS on random workloads", () => {
  const random = seededRandom(20_261);
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));

  interface Case {
    seed: number;
    contexts: number;
    maxBlocks: number;
    corpus: number;
    mixedIds: boolean;
    duplicateShare: number;
  }
  const cases: Case[] = [];
  for (let i = 0; i < 64; i++) {
    const contexts = i < 8 ? 1 + (i % 2) : i < 56 ? int(3, 80) : 2_000;
    const maxBlocks = 1 + (i % 20); // k from 1 to 20
    cases.push({
      seed: 1_000 + i,
      contexts,
      maxBlocks,
      // small corpora force shared blocks (deep tries, lookahead ties); large ones give leaves
      corpus: random() < 0.5 ? int(maxBlocks, maxBlocks + 6) : int(maxBlocks, Math.max(maxBlocks, contexts * 3)),
      mixedIds: i % 3 === 0,
      duplicateShare: i % 4 === 1 ? 0.3 : i % 4 === 2 ? 0.05 : 0,
    });
  }

  for (const lookahead of [0, 1, 4, 8]) {
    test(`lookahead ${lookahead}: ${cases.length} workloads (sizes 1, 2, small, 2,000; k 1..20)`, () => {
      for (const c of cases) {
        const set = contextSetFromArrays(randomContexts(c.seed, c));
        const ts = greedyPrefixTrieTs(set, { lookahead });
        const wasm = greedyPrefixTrieWasm(set, { lookahead });
        const diff = firstDifference(ts, wasm);
        expect(diff === null ? null : `${JSON.stringify(c)}: ${diff}`).toBeNull();
      }
    }, 60_000);
  }

  test("other lookaheads: 2, 2.5 (means 3), 1000, -1 (plain greedy)", () => {
    for (const c of cases.filter((_, i) => i % 4 === 0)) {
      const set = contextSetFromArrays(randomContexts(c.seed, c));
      for (const lookahead of [2, 2.5, 1000, -1]) {
        const diff = firstDifference(greedyPrefixTrieTs(set, { lookahead }), greedyPrefixTrieWasm(set, { lookahead }));
        expect(diff === null ? null : `lookahead ${lookahead}, ${JSON.stringify(c)}: ${diff}`).toBeNull();
      }
    }
  }, 60_000);

  test("one big workload of many near-identical contexts (deep trie)", () => {
    const set = contextSetFromArrays(randomContexts(77, { contexts: 3_000, maxBlocks: 20, corpus: 24, duplicateShare: 0.5 }));
    for (const lookahead of [0, 4]) {
      expect(firstDifference(greedyPrefixTrieTs(set, { lookahead }), greedyPrefixTrieWasm(set, { lookahead }))).toBeNull();
    }
  }, 60_000);
});
