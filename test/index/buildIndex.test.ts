import { describe, expect, test } from "bun:test";
import { buildContextIndex, type IndexBuildResult } from "../../src/index/buildIndex.ts";
import { contextBlocks, contextSetFromArrays, type ContextSet } from "../../src/index/contextSet.ts";
import type { ContextTree } from "../../src/index/contextTree.ts";
import { randomContexts } from "../helpers/randomContexts.ts";

const shapes = [
  { contexts: 1, maxBlocks: 5, corpus: 10 },
  { contexts: 2, maxBlocks: 3, corpus: 3 },
  { contexts: 60, maxBlocks: 6, corpus: 15, duplicateShare: 0.2 },
  { contexts: 300, maxBlocks: 15, corpus: 200, mixedIds: true },
  { contexts: 500, maxBlocks: 3, corpus: 40, duplicateShare: 0.1 },
];

function sorted(values: Iterable<number>): number[] {
  return [...values].sort((a, b) => a - b);
}

function descendantContexts(tree: ContextTree, node: number, byLeaf: Map<number, number[]>): number[] {
  const out = [...(byLeaf.get(node) ?? [])];
  for (const child of tree.children[node]!) out.push(...descendantContexts(tree, child, byLeaf));
  return out;
}

function checkInvariants(set: ContextSet, result: IndexBuildResult): void {
  const { scheduled, tree } = result;
  expect(sorted(scheduled.map((s) => s.input))).toEqual(Array.from({ length: set.size }, (_, i) => i));

  for (const s of scheduled) {
    // A permutation of the input context.
    expect(sorted(s.blocks)).toEqual(sorted(contextBlocks(set, s.input)));
    expect(new Set(s.blocks).size).toBe(s.blocks.length);
    // The path leads to the context's leaf.
    let node = 0;
    for (const step of s.path) node = tree.children[node]![step]!;
    expect(node).toBe(tree.leafOf[s.input]!);
  }

  // Scheduled groups (first path element) are contiguous and share their group's prefix.
  const seenGroups = new Set<number>();
  let previousKey: number | undefined;
  for (const s of scheduled) {
    const key = s.path[0]!;
    if (key !== previousKey) {
      expect(seenGroups.has(key)).toBe(false);
      seenGroups.add(key);
      previousKey = key;
    }
  }
  const byGroup = new Map<number, typeof scheduled>();
  for (const s of scheduled) byGroup.set(s.path[0]!, [...(byGroup.get(s.path[0]!) ?? []), s]);
  for (const [key, members] of byGroup) {
    const groupNode = tree.children[0]![key]!;
    const prefixLength = tree.prefixLength[groupNode]!;
    const prefix = Array.from(members[0]!.blocks.subarray(0, prefixLength));
    for (const member of members) expect(Array.from(member.blocks.subarray(0, prefixLength))).toEqual(prefix);
  }

  // Each node's prefix is the intersection of the contexts below it; leaves hold only identical contexts.
  const blocksOf = new Map(scheduled.map((s) => [s.input, s.blocks]));
  const byLeaf = new Map<number, number[]>();
  for (let c = 0; c < set.size; c++) byLeaf.set(tree.leafOf[c]!, [...(byLeaf.get(tree.leafOf[c]!) ?? []), c]);
  for (let node = 1; node < tree.nodeCount; node++) {
    const below = descendantContexts(tree, node, byLeaf);
    expect(below.length).toBeGreaterThan(0);
    const prefixLength = tree.prefixLength[node]!;
    const prefix = blocksOf.get(below[0]!)!.subarray(0, prefixLength);
    let common = new Set(blocksOf.get(below[0]!)!);
    for (const c of below) {
      expect(Array.from(blocksOf.get(c)!.subarray(0, prefixLength))).toEqual(Array.from(prefix));
      const own = new Set(blocksOf.get(c)!);
      common = new Set([...common].filter((b) => own.has(b)));
    }
    if (tree.children[node]!.length > 0) expect(sorted(common)).toEqual(sorted(prefix));
    if (tree.contextsAt[node]! > 1) {
      const sets = (byLeaf.get(node) ?? []).map((c) => sorted(contextBlocks(set, c)).join(","));
      expect(new Set(sets).size).toBe(1);
    }
  }
}

describe("buildContextIndex", () => {
  for (const [i, shape] of shapes.entries()) {
    test(`invariants hold on random workload #${i} (${shape.contexts} contexts)`, () => {
      for (let seed = 1; seed <= 5; seed++) {
        const set = contextSetFromArrays(randomContexts(seed * 7919 + i, shape));
        for (const method of ["auto", "trie", "cluster"] as const) checkInvariants(set, buildContextIndex(set, { method }));
      }
    });
  }

  test("the same input always gives the same output", () => {
    const contexts = randomContexts(42, { contexts: 400, maxBlocks: 12, corpus: 150, duplicateShare: 0.1 });
    const render = (r: IndexBuildResult) => JSON.stringify(r.scheduled.map((s) => [s.input, Array.from(s.blocks), s.path]));
    const first = render(buildContextIndex(contextSetFromArrays(contexts)));
    const second = render(buildContextIndex(contextSetFromArrays(contexts.map((c) => [...c]))));
    expect(second).toBe(first);
  });

  test("identical contexts, in any order, merge into one leaf with one order", () => {
    const set = contextSetFromArrays([[1, 2, 3], [3, 1, 2], [9, 8], [2, 3, 1], [4, 5, 6]]);
    const result = buildContextIndex(set);
    const leaf = result.tree.leafOf;
    expect(leaf[0]).toBe(leaf[1]!);
    expect(leaf[1]).toBe(leaf[3]!);
    expect(result.tree.contextsAt[leaf[0]!]).toBe(3);
    const orders = result.scheduled.filter((s) => [0, 1, 3].includes(s.input)).map((s) => Array.from(s.blocks).join());
    expect(new Set(orders).size).toBe(1);
    expect(result.scheduled.find((s) => s.input === 0)!.prefixBlocks).toBe(3);
  });

  test("the shared prefix comes first, the other blocks keep their original order", () => {
    // The paper's Figure 6 example: C1 {2,1,3}, C2 {2,6,1}, C3 {4,1,0}.
    const set = contextSetFromArrays([[2, 1, 3], [2, 6, 1], [4, 1, 0]]);
    const result = buildContextIndex(set);
    const byInput = new Map(result.scheduled.map((s) => [s.input, Array.from(s.blocks, (b) => set.blockIds[b])]));
    // All three share block 1; C1 and C2 also share 2.
    expect(byInput.get(0)!.slice(0, 2).sort()).toEqual([1, 2]);
    expect(byInput.get(1)!.slice(0, 2)).toEqual(byInput.get(0)!.slice(0, 2));
    expect(byInput.get(0)![2]).toBe(3);
    expect(byInput.get(1)![2]).toBe(6);
    expect(byInput.get(2)).toEqual([1, 4, 0]);
    expect(result.scheduled[2]!.input).toBe(2); // the larger sharing group runs first
  });
});
