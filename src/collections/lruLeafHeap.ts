/**
 * The least recently used leaf of a tree (a prefix cache, a context index), found lazily: a leaf
 * is pushed with its last-use time whenever it becomes a leaf or is used, and entries that went
 * stale since (the node was used again, gained a child or is gone) are dropped when they reach the
 * top. Equal times come out in push order.
 */
import { BinaryHeap } from "./binaryHeap.ts";

interface LeafEntry<N> {
  node: N;
  lastUsed: number;
  order: number;
}

export class LruLeafHeap<N> {
  private readonly heap = new BinaryHeap<LeafEntry<N>>(
    (a, b) => a.lastUsed < b.lastUsed || (a.lastUsed === b.lastUsed && a.order < b.order),
  );
  private order = 0;

  /** `isCurrent(node, lastUsed)`: whether the node is still a leaf last used at `lastUsed`. */
  constructor(private readonly isCurrent: (node: N, lastUsed: number) => boolean) {}

  /** Entries held, stale ones included. */
  get size(): number {
    return this.heap.size;
  }

  push(node: N, lastUsed: number): void {
    this.heap.push({ node, lastUsed, order: this.order++ });
  }

  /** The least recently used current leaf, left on the heap; null when there is none. */
  peek(): N | null {
    for (let top = this.heap.peek(); top !== undefined; top = this.heap.peek()) {
      if (this.isCurrent(top.node, top.lastUsed)) return top.node;
      this.heap.pop();
    }
    return null;
  }

  /** Removes and returns the least recently used current leaf; null when there is none. */
  pop(): N | null {
    const leaf = this.peek();
    if (leaf !== null) this.heap.pop();
    return leaf;
  }

  clear(): void {
    this.heap.clear();
  }

  /** Drops every stale entry: the heap holds exactly `leaves` (each with its last-use time). */
  rebuild(leaves: Iterable<readonly [N, number]>): void {
    const entries: LeafEntry<N>[] = [];
    for (const [node, lastUsed] of leaves) entries.push({ node, lastUsed, order: this.order++ });
    this.heap.reset(entries);
  }
}
