/**
 * Scalable context ordering: a greedy prefix trie over block co-occurrence.
 *
 * Starting at the root with every context, each group of contexts is partitioned
 * (see greedyPartition.ts): the block shared by the most contexts becomes the
 * next prefix block of all of them, and so on. Each sub-group recurses with its
 * block placed. A group whose contexts all hold the same block extends its node
 * instead of branching, so the result is a radix tree whose internal nodes hold
 * exactly what their contexts share. Cost is about O(N·k²) (times the lookahead
 * width): no pairwise distances.
 *
 * A context's order is the prefix blocks chosen along its path, then its other
 * blocks in their original (retrieval) order.
 *
 * Two twins give identical results (ordered blocks, node ids, parents, prefix
 * lengths, leaves): `greedyPrefixTrieWasm` (wasm/src/prefix_trie.rs, the default:
 * no JIT warm-up, several times faster) and `greedyPrefixTrieTs` below, the
 * reference. `greedyPrefixTrie` picks the WASM one unless CTXR_KERNELS=ts is set
 * or the module cannot be loaded (the same choice as src/kernels `kernels()`).
 */
import { kernels } from "../kernels/index.ts";
import { ContextTreeBuilder } from "./contextTree.ts";
import type { ContextSet } from "./contextSet.ts";
import { GreedyPartitioner } from "./greedyPartition.ts";
import { greedyPrefixTrieWasm } from "./greedyPrefixTrieWasm.ts";
import type { GreedyTrieOptions, OrderedContexts } from "./orderedContexts.ts";

interface PendingGroup {
  /** Tree node the group hangs under (or extends). */
  node: number;
  /** Blocks already placed in each member's prefix. */
  depth: number;
  contexts: Int32Array;
}

/** The greedy prefix trie, by the WASM twin unless CTXR_KERNELS=ts (or WASM is unavailable). */
export function greedyPrefixTrie(set: ContextSet, options: GreedyTrieOptions = {}): OrderedContexts {
  return kernels().name === "wasm" ? greedyPrefixTrieWasm(set, options) : greedyPrefixTrieTs(set, options);
}

/** The TypeScript twin: the reference the WASM version is tested against. */
export function greedyPrefixTrieTs(set: ContextSet, options: GreedyTrieOptions = {}): OrderedContexts {
  const { flat, offsets } = set;
  const ordered = new Int32Array(flat.length);
  const taken = new Uint8Array(flat.length);
  const placed = new Int32Array(set.size);
  const partitioner = new GreedyPartitioner(flat, offsets, taken, set.blockIds.length, options.lookahead ?? 0);
  const tree = new ContextTreeBuilder(set.size);
  const onProgress = options.onProgress;
  let finished = 0;

  const lengthOf = (c: number): number => offsets[c + 1]! - offsets[c]!;

  const placeBlock = (context: number, block: number): void => {
    const start = offsets[context]!;
    const end = offsets[context + 1]!;
    for (let f = start; f < end; f++) {
      if (flat[f] === block && !taken[f]) {
        taken[f] = 1;
        ordered[start + placed[context]!++] = block;
        return;
      }
    }
  };

  const finishAt = (context: number, leaf: number): void => {
    const start = offsets[context]!;
    const end = offsets[context + 1]!;
    for (let f = start; f < end; f++) {
      if (taken[f]) continue;
      taken[f] = 1;
      ordered[start + placed[context]!++] = flat[f]!;
    }
    tree.placeContext(context, leaf);
    finished++;
    if (onProgress !== undefined && (finished & 1023) === 0) onProgress(finished, set.size);
  };

  const all = new Int32Array(set.size);
  for (let i = 0; i < set.size; i++) all[i] = i;
  const pending: PendingGroup[] = [{ node: tree.root, depth: 0, contexts: all }];

  while (pending.length > 0) {
    const group = pending.pop()!;
    const { groups, leftovers } = partitioner.partition(group.contexts);
    const isRoot = group.node === tree.root;

    if (groups.length === 1 && leftovers.length === 0 && !isRoot) {
      // Every context holds the block: extend this node instead of branching.
      const { block, members } = groups[0]!;
      for (let i = 0; i < members.length; i++) placeBlock(members[i]!, block);
      tree.setPrefixLength(group.node, group.depth + 1);
      pending.push({ node: group.node, depth: group.depth + 1, contexts: members });
      continue;
    }

    if (groups.length === 0 && !isRoot && leftovers.every((c) => placed[c] === lengthOf(c))) {
      // Identical contexts: this node is their shared leaf.
      for (let i = 0; i < leftovers.length; i++) finishAt(leftovers[i]!, group.node);
      continue;
    }

    const children: PendingGroup[] = [];
    for (const { block, members } of groups) {
      for (let i = 0; i < members.length; i++) placeBlock(members[i]!, block);
      children.push({ node: tree.addNode(group.node, group.depth + 1), depth: group.depth + 1, contexts: members });
    }
    let identicalLeaf = -1;
    for (let i = 0; i < leftovers.length; i++) {
      const c = leftovers[i]!;
      if (placed[c] === lengthOf(c)) {
        if (identicalLeaf < 0) identicalLeaf = tree.addNode(group.node, group.depth);
        finishAt(c, identicalLeaf);
      } else {
        finishAt(c, tree.addNode(group.node, lengthOf(c)));
      }
    }
    // Depth-first, first (largest) child first.
    for (let i = children.length - 1; i >= 0; i--) pending.push(children[i]!);
  }

  return { ordered, tree: tree.build() };
}

export { greedyPrefixTrieWasm };
