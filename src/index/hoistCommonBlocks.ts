/**
 * Makes every internal node of the tree hold exactly the intersection of the
 * contexts below it: a block that all contexts under a node contain but place
 * later is moved up, right after the node's prefix (blocks ordered by their
 * summed positions). This never loses sharing — contexts that shared a prefix
 * still share it, one block later — and every hoisted block is shared by the
 * whole subtree. Returns the radix tree of the final order.
 */
import { contextsDepthFirst, type ContextTree } from "./contextTree.ts";
import type { ContextSet } from "./contextSet.ts";
import { prefixTreeOfSequences } from "./prefixTreeOfSequences.ts";

export function hoistCommonBlocks(set: ContextSet, ordered: Int32Array): ContextTree {
  const { offsets } = set;
  const count = new Int32Array(set.blockIds.length);
  const positionSum = new Float64Array(set.blockIds.length);
  for (;;) {
    const tree = prefixTreeOfSequences(set, ordered);
    const order = contextsDepthFirst(tree);
    const { first, end } = subtreeRanges(tree, order);
    const fixedUntil = new Int32Array(tree.nodeCount); // a node inside a rewritten subtree is skipped this round
    let changed = false;

    for (let node = 1; node < tree.nodeCount; node++) {
      const parent = tree.parent[node]!;
      fixedUntil[node] = fixedUntil[parent]!;
      if (fixedUntil[node] || tree.children[node]!.length === 0) continue;
      const prefixLength = tree.prefixLength[node]!;
      const members = order.subarray(first[node]!, end[node]!);
      const common = commonBlocksAfter(members, prefixLength);
      if (common.length === 0) continue;
      for (const c of members) rewrite(c, prefixLength, common);
      fixedUntil[node] = 1;
      changed = true;
    }
    if (!changed) return tree;
  }

  function commonBlocksAfter(members: Int32Array, prefixLength: number): Int32Array {
    const touched: number[] = [];
    for (const c of members) {
      for (let f = offsets[c]! + prefixLength; f < offsets[c + 1]!; f++) {
        const b = ordered[f]!;
        if (count[b] === 0) touched.push(b);
        count[b]!++;
        positionSum[b]! += f - offsets[c]!;
      }
    }
    const common = touched.filter((b) => count[b] === members.length);
    common.sort((a, b) => positionSum[a]! - positionSum[b]! || a - b);
    for (const b of touched) {
      count[b] = 0;
      positionSum[b] = 0;
    }
    return Int32Array.from(common);
  }

  function rewrite(c: number, prefixLength: number, common: Int32Array): void {
    const start = offsets[c]! + prefixLength;
    const rest = Array.from(ordered.subarray(start, offsets[c + 1]!));
    const hoisted = new Set(common);
    ordered.set(common, start);
    let w = start + common.length;
    for (const b of rest) if (!hoisted.has(b)) ordered[w++] = b;
  }
}

/** Each node's contexts are a contiguous range of the depth-first order. */
function subtreeRanges(tree: ContextTree, order: Int32Array): { first: Int32Array; end: Int32Array } {
  const first = new Int32Array(tree.nodeCount).fill(order.length);
  const end = new Int32Array(tree.nodeCount);
  for (let i = 0; i < order.length; i++) {
    let node = tree.leafOf[order[i]!]!;
    // Walk up while this position extends the range (each node is reached once per context: O(N·depth)).
    while (node >= 0) {
      if (i < first[node]!) first[node] = i;
      if (i + 1 > end[node]!) end[node] = i + 1;
      node = node === 0 ? -1 : tree.parent[node]!;
    }
  }
  return { first, end };
}
