/**
 * The radix tree of already-ordered contexts: contexts are sorted
 * lexicographically, neighbours' longest common prefixes give the branch
 * points (as in building a suffix tree from a sorted array and its LCPs).
 * Children are then ordered by how many contexts they hold (most first), so
 * that search paths and schedules put the largest sharing groups first.
 */
import { ContextTreeBuilder, type ContextTree } from "./contextTree.ts";
import type { ContextSet } from "./contextSet.ts";

export function prefixTreeOfSequences(set: ContextSet, ordered: Int32Array): ContextTree {
  const { offsets, size } = set;
  const sorted = Array.from({ length: size }, (_, i) => i).sort((a, b) => compareSequences(ordered, offsets, a, b) || a - b);

  // Nested structure first (node = prefix length + children + contexts), then emit in size order.
  interface Draft {
    prefixLength: number;
    children: Draft[];
    contexts: number[];
    weight: number;
  }
  const root: Draft = { prefixLength: 0, children: [], contexts: [], weight: 0 };
  const stack: Draft[] = [root];
  let previous = -1;
  for (const c of sorted) {
    const length = offsets[c + 1]! - offsets[c]!;
    const lcp = previous < 0 ? 0 : commonPrefix(ordered, offsets, previous, c);
    while (stack.length > 1 && stack[stack.length - 1]!.prefixLength > lcp) {
      const top = stack.pop()!;
      const below = stack[stack.length - 1]!;
      if (below.prefixLength < lcp) {
        // Split: a new internal node at the common prefix takes `top` as its child.
        const split: Draft = { prefixLength: lcp, children: [top], contexts: [], weight: 0 };
        below.children[below.children.length - 1] = split;
        stack.push(split);
      }
    }
    const parent = stack[stack.length - 1]!;
    if (parent.contexts.length > 0) {
      // A context that is a prefix of this one: keep contexts at leaves.
      parent.children.push({ prefixLength: parent.prefixLength, children: [], contexts: parent.contexts, weight: 0 });
      parent.contexts = [];
    }
    const last = parent.children[parent.children.length - 1];
    if (last !== undefined && last.prefixLength === length && lcp === length && last.children.length === 0) {
      last.contexts.push(c); // identical to the previous context: same leaf
    } else {
      const leaf: Draft = { prefixLength: length, children: [], contexts: [c], weight: 0 };
      parent.children.push(leaf);
      stack.push(leaf);
    }
    previous = c;
  }

  const weigh = (draft: Draft): number => {
    draft.weight = draft.contexts.length;
    for (const child of draft.children) draft.weight += weigh(child);
    return draft.weight;
  };
  weigh(root);

  const builder = new ContextTreeBuilder(size);
  const emit = (draft: Draft, node: number): void => {
    for (const c of draft.contexts) builder.placeContext(c, node);
    const children = [...draft.children].sort((a, b) => b.weight - a.weight);
    for (const child of children) emit(child, builder.addNode(node, child.prefixLength));
  };
  emit(root, builder.root);
  return builder.build();
}

function compareSequences(ordered: Int32Array, offsets: Int32Array, a: number, b: number): number {
  const aStart = offsets[a]!;
  const bStart = offsets[b]!;
  const aLength = offsets[a + 1]! - aStart;
  const bLength = offsets[b + 1]! - bStart;
  const n = Math.min(aLength, bLength);
  for (let i = 0; i < n; i++) {
    const d = ordered[aStart + i]! - ordered[bStart + i]!;
    if (d !== 0) return d;
  }
  return aLength - bLength;
}

function commonPrefix(ordered: Int32Array, offsets: Int32Array, a: number, b: number): number {
  const aStart = offsets[a]!;
  const bStart = offsets[b]!;
  const n = Math.min(offsets[a + 1]! - aStart, offsets[b + 1]! - bStart);
  let i = 0;
  while (i < n && ordered[aStart + i] === ordered[bStart + i]) i++;
  return i;
}
