import { describe, expect, test } from "bun:test";
import { HostKvTier, kvDataBytes } from "../../src/kv/hostKvTier.ts";
import { expectSameKv, randomKv } from "./kvFixtures.ts";

describe("HostKvTier", () => {
  test("kvDataBytes counts positions and every layer's K and V", () => {
    expect(kvDataBytes(randomKv(3, 8, 17))).toBe(17 * 4 + 3 * 2 * 17 * 8 * 4);
    expect(kvDataBytes(randomKv(1, 4, 1))).toBe(4 + 2 * 4 * 4);
  });

  test("put, has, get, delete: entries come back as stored, with their meta", () => {
    const tier = new HostKvTier<{ hash: string }>(1 << 20);
    const a = randomKv(3, 8, 17, 1);
    const b = randomKv(2, 4, 1, 2);
    expect(tier.put("a", a, { hash: "ha" })).toBe(true);
    expect(tier.put("b", b, { hash: "hb" })).toBe(true);
    expect(tier.has("a")).toBe(true);
    expect(tier.has("c")).toBe(false);
    expect(tier.get("c")).toBeUndefined();
    const got = tier.get("a")!;
    expectSameKv(got.data, randomKv(3, 8, 17, 1));
    expect(got.meta).toEqual({ hash: "ha" });
    expect(got.bytes).toBe(kvDataBytes(a));
    expect(tier.keys()).toEqual(["a", "b"]);
    expect(tier.size).toBe(2);
    expect(tier.delete("a")).toBe(true);
    expect(tier.delete("a")).toBe(false);
    expect(tier.has("a")).toBe(false);
    expect(tier.keys()).toEqual(["b"]);
  });

  test("bytesUsed follows puts, replacements and deletes", () => {
    const tier = new HostKvTier(1 << 20);
    const small = randomKv(2, 4, 3);
    const large = randomKv(2, 4, 30);
    expect(tier.bytesUsed).toBe(0);
    tier.put("x", small, {});
    expect(tier.bytesUsed).toBe(kvDataBytes(small));
    tier.put("y", large, {});
    expect(tier.bytesUsed).toBe(kvDataBytes(small) + kvDataBytes(large));
    tier.put("x", large, {});
    expect(tier.bytesUsed).toBe(2 * kvDataBytes(large));
    expect(tier.keys()).toEqual(["y", "x"]);
    tier.delete("y");
    tier.delete("x");
    expect(tier.bytesUsed).toBe(0);
    expect(tier.size).toBe(0);
  });

  test("an entry larger than the capacity is refused and changes nothing", () => {
    const data = randomKv(2, 4, 10);
    const bytes = kvDataBytes(data);
    const tier = new HostKvTier(bytes - 1);
    expect(tier.put("big", data, {})).toBe(false);
    expect(tier.has("big")).toBe(false);
    expect(tier.bytesUsed).toBe(0);
    const small = randomKv(1, 4, 1);
    tier.put("big", small, {});
    expect(tier.put("big", data, {})).toBe(false);
    expect(tier.get("big")!.data).toBe(small);
    expect(tier.bytesUsed).toBe(kvDataBytes(small));
    expect(new HostKvTier(bytes).put("exact", data, {})).toBe(true);
  });

  test("going over capacity is allowed; overflowBytes says how much must leave, the caller chooses", () => {
    const one = randomKv(1, 4, 4);
    const size = kvDataBytes(one);
    const tier = new HostKvTier(2 * size + 10);
    tier.put("a", one, {});
    tier.put("b", randomKv(1, 4, 4, 2), {});
    expect(tier.overflowBytes()).toBe(0);
    expect(tier.put("c", randomKv(1, 4, 4, 3), {})).toBe(true);
    expect(tier.overflowBytes()).toBe(size - 10);
    expect(tier.keys()).toEqual(["a", "b", "c"]);
    tier.delete("b");
    expect(tier.overflowBytes()).toBe(0);
    expect(tier.keys()).toEqual(["a", "c"]);
    expect(tier.capacityBytes).toBe(2 * size + 10);
  });

  test("a zero capacity accepts nothing; a bad capacity is an error", () => {
    const tier = new HostKvTier(0);
    expect(tier.put("a", randomKv(1, 1, 1), {})).toBe(false);
    expect(tier.put("empty", { positions: new Int32Array(0), layers: [] }, {})).toBe(true);
    expect(() => new HostKvTier(-1)).toThrow(RangeError);
    expect(() => new HostKvTier(Number.NaN)).toThrow(RangeError);
  });
});
