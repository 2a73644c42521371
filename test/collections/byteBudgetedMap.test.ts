import { describe, expect, test } from "bun:test";
import { ByteBudgetedMap } from "../../src/collections/byteBudgetedMap.ts";

describe("ByteBudgetedMap", () => {
  test("counts bytes through set, replace, delete and clear", () => {
    const map = new ByteBudgetedMap<{ bytes: number; tag: string }>(100);
    map.set("a", { bytes: 40, tag: "a1" });
    map.set("b", { bytes: 50, tag: "b" });
    expect(map.bytesUsed).toBe(90);
    expect(map.overflowBytes()).toBe(0);
    map.set("a", { bytes: 70, tag: "a2" });
    expect(map.bytesUsed).toBe(120);
    expect(map.overflowBytes()).toBe(20);
    expect(map.get("a")?.tag).toBe("a2");
    expect(map.keys()).toEqual(["b", "a"]);
    expect(map.delete("b")?.tag).toBe("b");
    expect(map.delete("b")).toBeUndefined();
    expect(map.bytesUsed).toBe(70);
    expect(map.size).toBe(1);
    expect(map.has("a")).toBe(true);
    map.clear();
    expect(map.bytesUsed).toBe(0);
    expect(map.size).toBe(0);
  });

  test("fits says whether one entry can be held at all", () => {
    const map = new ByteBudgetedMap<{ bytes: number }>(10);
    expect(map.fits(10)).toBe(true);
    expect(map.fits(11)).toBe(false);
  });

  test("a bad capacity is refused, naming the owner", () => {
    expect(() => new ByteBudgetedMap(-1, "host KV tier")).toThrow("host KV tier: bad capacity -1");
    expect(() => new ByteBudgetedMap(Number.NaN)).toThrow(RangeError);
  });
});
