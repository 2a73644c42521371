/**
 * Local search over an ordering: take each context out of the prefix trie and
 * put it back where it shares the longest prefix.
 *
 * With every context in the trie, hits (unlimited cache) = Σ over trie nodes of
 * (contexts through the node − 1). Removing context c loses the nodes of its
 * path that others still use ("stay"); re-inserting it along the deepest trie
 * path made only of its own blocks gains that depth. A context moves only when
 * the new depth is strictly larger, so every move raises the hit count and the
 * retriever's order is disturbed only where it pays. Its new order is the
 * matched path, then its other blocks in their original order.
 */
import type { ContextSet } from "./contextSet.ts";

export interface ReinsertionOptions {
  /** Full passes over all contexts at most (stops early when a pass moves nothing). */
  passes?: number;
  /** Trie nodes explored per context at most, bounding the worst case. */
  exploreLimit?: number;
}

export interface ReinsertionResult {
  readonly moves: number;
  readonly passes: number;
}

/** Improves `ordered` (same offsets as `set`) in place. */
export function reinsertionSearch(set: ContextSet, ordered: Int32Array, options: ReinsertionOptions = {}): ReinsertionResult {
  const { offsets, flat } = set;
  const trie = new CountingTrie(set.blockIds.length);
  const pathNodes = new Int32Array(flat.length);
  for (let c = 0; c < set.size; c++) trie.insert(ordered, offsets[c]!, offsets[c + 1]!, pathNodes);

  const maxLength = maxContextLength(set);
  const used = new Uint8Array(maxLength);
  const chosen = new Int32Array(maxLength);
  const bestChosen = new Int32Array(maxLength);
  const stackNode = new Int32Array(maxLength + 1);
  const stackNext = new Int32Array(maxLength + 1);
  const passes = options.passes ?? 2;
  const exploreLimit = options.exploreLimit ?? 20_000;
  let moves = 0;
  let pass = 0;

  while (pass < passes) {
    pass++;
    let movedThisPass = 0;
    for (let c = 0; c < set.size; c++) {
      const start = offsets[c]!;
      const end = offsets[c + 1]!;
      const length = end - start;
      trie.remove(pathNodes, start, end);
      let stay = 0;
      while (stay < length && trie.count[pathNodes[start + stay]!]! > 0) stay++;

      // Depth-first search of trie paths made of this context's blocks.
      let bestDepth = 0;
      let explored = 0;
      let depth = 0;
      stackNode[0] = 0;
      stackNext[0] = 0;
      while (depth >= 0 && explored < exploreLimit) {
        if (stackNext[depth]! >= length) {
          depth--;
          if (depth >= 0) used[chosen[depth]!] = 0;
          continue;
        }
        const p = stackNext[depth]!++;
        if (used[p]) continue;
        const child = trie.child(stackNode[depth]!, ordered[start + p]!);
        if (child < 0) continue;
        explored++;
        used[p] = 1;
        chosen[depth] = p;
        depth++;
        stackNode[depth] = child;
        stackNext[depth] = 0;
        if (depth > bestDepth) {
          bestDepth = depth;
          bestChosen.set(chosen.subarray(0, depth));
        }
      }
      used.fill(0);

      if (bestDepth > stay) {
        const matched = bestChosen.subarray(0, bestDepth).map((p) => ordered[start + p]!);
        const matchedSet = new Set(matched);
        ordered.set(matched, start);
        let w = start + bestDepth;
        for (let f = start; f < end; f++) if (!matchedSet.has(flat[f]!)) ordered[w++] = flat[f]!;
        movedThisPass++;
      }
      trie.insert(ordered, start, end, pathNodes);
    }
    moves += movedThisPass;
    if (movedThisPass === 0) break;
  }
  return { moves, passes: pass };
}

function maxContextLength(set: ContextSet): number {
  let max = 0;
  for (let c = 0; c < set.size; c++) max = Math.max(max, set.offsets[c + 1]! - set.offsets[c]!);
  return max;
}

function grown(a: Int32Array): Int32Array<ArrayBuffer> {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}

/** An uncompressed prefix trie with a context count per node. */
class CountingTrie {
  private readonly children = new Map<number, number>();
  count: Int32Array<ArrayBuffer> = new Int32Array(1024);
  private parent = new Int32Array(1024);
  private blockOf = new Int32Array(1024);
  private nodeCount = 1;

  constructor(private readonly blockCount: number) {}

  /** The live child of `node` along `block`, or -1. */
  child(node: number, block: number): number {
    const c = this.children.get(node * this.blockCount + block);
    return c === undefined ? -1 : c;
  }

  insert(sequence: Int32Array, start: number, end: number, pathNodes: Int32Array): void {
    let node = 0;
    for (let f = start; f < end; f++) {
      const block = sequence[f]!;
      const key = node * this.blockCount + block;
      let next = this.children.get(key);
      if (next === undefined) {
        next = this.newNode(node, block);
        this.children.set(key, next);
      }
      this.count[next]!++;
      pathNodes[f] = next;
      node = next;
    }
  }

  remove(pathNodes: Int32Array, start: number, end: number): void {
    for (let f = end - 1; f >= start; f--) {
      const node = pathNodes[f]!;
      if (--this.count[node]! === 0) this.children.delete(this.parent[node]! * this.blockCount + this.blockOf[node]!);
    }
  }

  private newNode(parent: number, block: number): number {
    if (this.nodeCount === this.count.length) {
      this.count = grown(this.count);
      this.parent = grown(this.parent);
      this.blockOf = grown(this.blockOf);
    }
    const id = this.nodeCount++;
    this.parent[id] = parent;
    this.blockOf[id] = block;
    this.count[id] = 0;
    return id;
  }
}
