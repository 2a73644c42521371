/**
 * The context index tree: a radix tree over reordered contexts.
 *
 * Node 0 is the root (empty prefix). Every other node extends its parent's
 * prefix by one or more blocks; `prefixLength[n]` is the length of the prefix
 * from the root through node n. Contexts sit at leaves; identical contexts share
 * one leaf. Children keep their creation order, which defines search paths.
 */
export interface ContextTree {
  readonly nodeCount: number;
  readonly parent: Int32Array;
  readonly prefixLength: Int32Array;
  readonly children: readonly (readonly number[])[];
  /** Context -> its leaf node. */
  readonly leafOf: Int32Array;
  /** Leaf node -> how many contexts sit there. */
  readonly contextsAt: Int32Array;
}

export class ContextTreeBuilder {
  private readonly parents: number[] = [-1];
  private readonly prefixLengths: number[] = [0];
  private readonly childLists: number[][] = [[]];
  private readonly leafOf: Int32Array;

  constructor(contextCount: number) {
    this.leafOf = new Int32Array(contextCount).fill(-1);
  }

  get root(): number {
    return 0;
  }

  addNode(parent: number, prefixLength: number): number {
    const id = this.parents.length;
    this.parents.push(parent);
    this.prefixLengths.push(prefixLength);
    this.childLists.push([]);
    this.childLists[parent]!.push(id);
    return id;
  }

  setPrefixLength(node: number, prefixLength: number): void {
    this.prefixLengths[node] = prefixLength;
  }

  placeContext(context: number, leaf: number): void {
    this.leafOf[context] = leaf;
  }

  build(): ContextTree {
    const nodeCount = this.parents.length;
    const contextsAt = new Int32Array(nodeCount);
    for (let c = 0; c < this.leafOf.length; c++) {
      const leaf = this.leafOf[c]!;
      if (leaf < 0) throw new Error(`context ${c} was never placed in the tree`);
      contextsAt[leaf]!++;
    }
    return {
      nodeCount,
      parent: Int32Array.from(this.parents),
      prefixLength: Int32Array.from(this.prefixLengths),
      children: this.childLists,
      leafOf: this.leafOf,
      contextsAt,
    };
  }
}

/**
 * A ContextTree from flat arrays: node parents (-1 for the root, node 0; every parent id smaller
 * than its child's) and prefix lengths in node id order, and the leaf of every context. Children
 * lists come out in id (creation) order.
 */
export function contextTreeFromArrays(parent: Int32Array, prefixLength: Int32Array, leafOf: Int32Array): ContextTree {
  const nodeCount = parent.length;
  if (prefixLength.length !== nodeCount || nodeCount < 1 || parent[0] !== -1) {
    throw new Error(`contextTreeFromArrays: need ${nodeCount} prefix lengths and a root (parent -1) at node 0`);
  }
  const children: number[][] = new Array(nodeCount);
  for (let node = 0; node < nodeCount; node++) children[node] = [];
  for (let node = 1; node < nodeCount; node++) {
    const p = parent[node]!;
    if (!(p >= 0 && p < node)) throw new Error(`contextTreeFromArrays: node ${node} has parent ${p}`);
    children[p]!.push(node);
  }
  const contextsAt = new Int32Array(nodeCount);
  for (let c = 0; c < leafOf.length; c++) {
    const leaf = leafOf[c]!;
    if (!(leaf >= 0 && leaf < nodeCount)) throw new Error(`context ${c} was never placed in the tree`);
    contextsAt[leaf]!++;
  }
  return { nodeCount, parent, prefixLength, children, leafOf, contextsAt };
}

/** Child positions from the root down to `node`. */
export function searchPath(tree: ContextTree, node: number): number[] {
  const path: number[] = [];
  let current = node;
  while (current !== 0) {
    const parent = tree.parent[current]!;
    path.push(tree.children[parent]!.indexOf(current));
    current = parent;
  }
  return path.reverse();
}

/** Search paths of every node, computed top-down in one pass (no repeated walks). */
export function allSearchPaths(tree: ContextTree): number[][] {
  const paths: number[][] = new Array(tree.nodeCount);
  paths[0] = [];
  const stack = [0];
  while (stack.length > 0) {
    const node = stack.pop()!;
    const base = paths[node]!;
    const kids = tree.children[node]!;
    for (let i = 0; i < kids.length; i++) {
      const child = kids[i]!;
      paths[child] = [...base, i];
      stack.push(child);
    }
  }
  return paths;
}

/**
 * Leading blocks a context shares with at least one other context: the whole
 * context when its leaf is shared, else its leaf's parent prefix.
 */
export function sharedPrefixLength(tree: ContextTree, context: number): number {
  const leaf = tree.leafOf[context]!;
  if (tree.contextsAt[leaf]! > 1) return tree.prefixLength[leaf]!;
  return tree.prefixLength[tree.parent[leaf]!]!;
}

/** Contexts in depth-first order of their leaves (children in creation order). */
export function contextsDepthFirst(tree: ContextTree): Int32Array {
  // Bucket contexts by leaf (counting sort keeps input order inside a leaf).
  const start = new Int32Array(tree.nodeCount + 1);
  for (let n = 0; n < tree.nodeCount; n++) start[n + 1] = start[n]! + tree.contextsAt[n]!;
  const fill = start.slice(0, tree.nodeCount);
  const byLeaf = new Int32Array(tree.leafOf.length);
  for (let c = 0; c < tree.leafOf.length; c++) byLeaf[fill[tree.leafOf[c]!]!++] = c;

  const order = new Int32Array(tree.leafOf.length);
  let written = 0;
  const stack = [0];
  while (stack.length > 0) {
    const node = stack.pop()!;
    for (let i = start[node]!; i < start[node + 1]!; i++) order[written++] = byLeaf[i]!;
    const kids = tree.children[node]!;
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]!);
  }
  return order;
}

/**
 * Prefix blocks reused when every context runs against an unlimited prefix
 * cache: each node's own blocks are computed once and reused by every other
 * context below it.
 */
export function treeHits(tree: ContextTree): number {
  const below = Int32Array.from(tree.contextsAt);
  // Children always have larger ids than their parents, so one backward sweep sums subtrees.
  for (let node = tree.nodeCount - 1; node > 0; node--) below[tree.parent[node]!]! += below[node]!;
  let hits = 0;
  for (let node = 1; node < tree.nodeCount; node++) {
    const own = tree.prefixLength[node]! - tree.prefixLength[tree.parent[node]!]!;
    hits += own * (below[node]! - 1);
  }
  return hits;
}
