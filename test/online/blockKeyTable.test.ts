import { describe, expect, test } from "bun:test";
import { BlockKeyTable } from "../../src/online/blockKeyTable.ts";

describe("BlockKeyTable", () => {
  test("interns keys to dense numbers and gives released numbers to new keys", () => {
    const table = new BlockKeyTable();
    expect(table.intern("s:a")).toBe(0);
    expect(table.intern("s:b")).toBe(1);
    expect(table.intern("s:a")).toBe(0);
    expect(table.size).toBe(2);
    const withTwo = table.bytes;
    table.release(0);
    expect(table.size).toBe(1);
    expect(table.bytes).toBeLessThan(withTwo);
    expect(() => table.keyOf(0)).toThrow("not in use");
    expect(table.intern("s:c")).toBe(0);
    expect(table.keyOf(0)).toBe("s:c");
    expect(table.keyOf(1)).toBe("s:b");
    // Releasing twice is harmless.
    table.release(1);
    table.release(1);
    expect(table.size).toBe(1);
  });

  test("bytes follow the keys held, not every key ever interned", () => {
    const table = new BlockKeyTable();
    for (let round = 0; round < 50; round++) {
      const numbers = Array.from({ length: 100 }, (_, i) => table.intern(`s:${round}-${i}-${"x".repeat(100)}`));
      for (const n of numbers) table.release(n);
    }
    expect(table.size).toBe(0);
    // 100 array slots stay, their keys are gone.
    expect(table.bytes).toBe(100 * 8);
    table.clear();
    expect(table.bytes).toBe(0);
  });
});
