/** GenerationalMemo: bounded by bytes, keeps what keeps being used, refuses entries over a generation. */
import { describe, expect, test } from "bun:test";
import { GenerationalMemo } from "../../src/proxy/generationalMemo.ts";

const sizeOf = (key: string, value: number[]) => key.length + value.length;

describe("GenerationalMemo", () => {
  test("never holds more than its budget", () => {
    const memo = new GenerationalMemo<number[]>(1000, sizeOf);
    for (let i = 0; i < 5000; i++) {
      memo.set(`key ${i}`, [i, i, i]);
      expect(memo.bytes).toBeLessThanOrEqual(1000);
    }
    expect(memo.get("key 4999")).toEqual([4999, 4999, 4999]);
    expect(memo.get("key 0")).toBeUndefined();
  });

  test("an entry read in every generation survives", () => {
    const memo = new GenerationalMemo<number[]>(200, sizeOf);
    memo.set("kept", [1]);
    for (let i = 0; i < 1000; i++) {
      memo.set(`other ${i}`, [i]);
      if (i % 10 === 0) expect(memo.get("kept")).toEqual([1]);
    }
  });

  test("an entry over half the budget is not kept", () => {
    const memo = new GenerationalMemo<number[]>(100, sizeOf);
    memo.set("small", [1]);
    memo.set("big", new Array(60).fill(0));
    expect(memo.get("big")).toBeUndefined();
    expect(memo.get("small")).toEqual([1]);
  });
});
