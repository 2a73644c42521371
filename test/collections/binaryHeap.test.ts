import { describe, expect, test } from "bun:test";
import { BinaryHeap } from "../../src/collections/binaryHeap.ts";

function drain<T>(heap: BinaryHeap<T>): T[] {
  const out: T[] = [];
  for (let item = heap.pop(); item !== undefined; item = heap.pop()) out.push(item);
  return out;
}

function randomInts(seed: number, n: number, range: number): number[] {
  let state = seed;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    out.push(state % range);
  }
  return out;
}

describe("BinaryHeap", () => {
  test("pops in the comparator's order, for random pushes with repeats", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const values = randomInts(seed, 200, 50);
      const heap = new BinaryHeap<number>((a, b) => a < b);
      for (const v of values) heap.push(v);
      expect(heap.size).toBe(values.length);
      expect(drain(heap)).toEqual([...values].sort((a, b) => a - b));
      expect(heap.size).toBe(0);
    }
  });

  test("a max order and a tie-breaking key", () => {
    const heap = new BinaryHeap<[number, number]>((a, b) => a[0] > b[0] || (a[0] === b[0] && a[1] < b[1]));
    for (const item of [[1, 3], [5, 2], [5, 1], [3, 0], [1, 1]] as [number, number][]) heap.push(item);
    expect(drain(heap)).toEqual([[5, 1], [5, 2], [3, 0], [1, 1], [1, 3]]);
  });

  test("interleaved pushes and pops always return the current minimum", () => {
    const heap = new BinaryHeap<number>((a, b) => a < b);
    const model: number[] = [];
    const ops = randomInts(7, 2000, 1000);
    for (const op of ops) {
      if (op % 3 === 0 && model.length > 0) {
        model.sort((a, b) => a - b);
        expect(heap.peek()).toBe(model[0]);
        expect(heap.pop()).toBe(model.shift());
      } else {
        heap.push(op);
        model.push(op);
      }
      expect(heap.size).toBe(model.length);
    }
  });

  test("reset builds a heap from any list; clear empties it", () => {
    const values = randomInts(3, 101, 30);
    const heap = new BinaryHeap<number>((a, b) => a < b);
    heap.push(-1);
    heap.reset([...values]);
    expect(drain(heap)).toEqual([...values].sort((a, b) => a - b));
    heap.push(4);
    heap.clear();
    expect(heap.size).toBe(0);
    expect(heap.peek()).toBeUndefined();
    expect(heap.pop()).toBeUndefined();
  });
});
