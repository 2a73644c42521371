import { describe, expect, test } from "bun:test";
import { LruLeafHeap } from "../../src/collections/lruLeafHeap.ts";

interface Node {
  name: string;
  lastUsed: number;
  leaf: boolean;
  alive: boolean;
}

function node(name: string, lastUsed: number): Node {
  return { name, lastUsed, leaf: true, alive: true };
}

function heapOf(): LruLeafHeap<Node> {
  return new LruLeafHeap<Node>((n, lastUsed) => n.alive && n.leaf && n.lastUsed === lastUsed);
}

function popAll(heap: LruLeafHeap<Node>): string[] {
  const out: string[] = [];
  for (let n = heap.pop(); n !== null; n = heap.pop()) out.push(n.name);
  return out;
}

describe("LruLeafHeap", () => {
  test("least recently used first; equal times in push order", () => {
    const heap = heapOf();
    for (const n of [node("c", 3), node("a", 1), node("b2", 2), node("b1", 2)]) heap.push(n, n.lastUsed);
    expect(popAll(heap)).toEqual(["a", "b2", "b1", "c"]);
  });

  test("skips entries gone stale: used again, no longer a leaf, or removed", () => {
    const heap = heapOf();
    const used = node("used", 1);
    const parent = node("parent", 2);
    const removed = node("removed", 3);
    const plain = node("plain", 4);
    for (const n of [used, parent, removed, plain]) heap.push(n, n.lastUsed);
    used.lastUsed = 10;
    heap.push(used, used.lastUsed);
    parent.leaf = false;
    removed.alive = false;
    expect(heap.peek()?.name).toBe("plain");
    expect(popAll(heap)).toEqual(["plain", "used"]);
    expect(heap.peek()).toBeNull();
  });

  test("rebuild keeps exactly the given leaves", () => {
    const heap = heapOf();
    const a = node("a", 5);
    const b = node("b", 1);
    for (let i = 0; i < 50; i++) heap.push(a, i);
    heap.push(b, 1);
    expect(heap.size).toBe(51);
    heap.rebuild([[a, a.lastUsed], [b, b.lastUsed]]);
    expect(heap.size).toBe(2);
    expect(popAll(heap)).toEqual(["b", "a"]);
  });
});
