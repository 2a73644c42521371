import { describe, expect, test } from "bun:test";
import { RingBuffer } from "../../src/collections/ringBuffer.ts";

describe("RingBuffer", () => {
  test("keeps the last `capacity` items, oldest first", () => {
    const ring = new RingBuffer<number>(3);
    expect(ring.toArray()).toEqual([]);
    ring.push(1);
    ring.push(2);
    expect(ring.toArray()).toEqual([1, 2]);
    for (const n of [3, 4, 5]) ring.push(n);
    expect(ring.toArray()).toEqual([3, 4, 5]);
    expect(ring.length).toBe(3);
  });

  test("matches a plain array's tail for any number of pushes", () => {
    for (const capacity of [1, 2, 5]) {
      const ring = new RingBuffer<number>(capacity);
      const all: number[] = [];
      for (let n = 0; n < 17; n++) {
        ring.push(n);
        all.push(n);
        expect(ring.toArray()).toEqual(all.slice(-capacity));
      }
    }
  });

  test("clear empties it", () => {
    const ring = new RingBuffer<string>(2);
    ring.push("a");
    ring.clear();
    expect(ring.toArray()).toEqual([]);
    ring.push("b");
    expect(ring.toArray()).toEqual(["b"]);
  });

  test("a capacity that is not a positive integer is refused", () => {
    expect(() => new RingBuffer(0)).toThrow("positive integer, got 0");
    expect(() => new RingBuffer(1.5)).toThrow("positive integer");
  });
});
