import { describe, expect, test } from "bun:test";
import { contentBytes, HistoryStore } from "../../src/online/historyStore.ts";

describe("HistoryStore", () => {
  test("remembers what messages were forwarded as; a lookup changes nothing", () => {
    const store = new HistoryStore();
    expect(store.forwardedAs("c", "m0")).toBeUndefined();
    expect(store.size).toBe(0);
    store.remember("c", [["m0", "hello"], ["m1", [{ type: "text", text: "hi" }]]]);
    expect(store.forwardedAs("c", "m0")).toBe("hello");
    expect(store.forwardedAs("c", "m1")).toEqual([{ type: "text", text: "hi" }]);
    expect(store.size).toBe(1);
  });

  test("bytes follow replacements and forgetting; clear returns to zero", () => {
    const store = new HistoryStore();
    store.remember("c", [["m0", "x".repeat(1000)]]);
    const one = store.bytes;
    store.remember("c", [["m0", "x".repeat(10)]]);
    expect(store.bytes).toBe(one - 2 * 990);
    store.remember("d", [["m0", "y"]]);
    expect(store.bytes).toBeGreaterThan(one - 2 * 990);
    store.clear();
    expect(store.bytes).toBe(0);
    expect(store.size).toBe(0);
  });

  test("over the byte budget the least recently used conversations are forgotten whole", () => {
    const store = new HistoryStore({ maxBytes: 100_000 });
    for (let c = 0; c < 20; c++) store.remember(`c${c}`, [["m0", "x".repeat(10_000)]]);
    expect(store.bytes).toBeLessThanOrEqual(100_000);
    expect(store.evictedForByteBudget).toBeGreaterThan(0);
    expect(store.forwardedAs("c19", "m0")).toBeDefined();
    expect(store.forwardedAs("c0", "m0")).toBeUndefined();
    // Using a conversation makes it the most recently used.
    const oldest = [...Array(20).keys()].map((c) => `c${c}`).find((id) => store.forwardedAs(id, "m0") !== undefined)!;
    store.remember(oldest, []);
    store.remember("new", [["m0", "x".repeat(10_000)]]);
    expect(store.forwardedAs(oldest, "m0")).toBeDefined();
  });

  test("a conversation larger than the whole budget is not kept", () => {
    const store = new HistoryStore({ maxBytes: 10_000 });
    store.remember("small", [["m0", "ok"]]);
    store.remember("huge", [["m0", "x".repeat(100_000)]]);
    expect(store.forwardedAs("huge", "m0")).toBeUndefined();
    expect(store.bytes).toBeLessThanOrEqual(10_000);
  });

  test("the count limit still applies", () => {
    const store = new HistoryStore({ maxConversations: 3, maxBytes: null });
    for (let c = 0; c < 5; c++) store.remember(`c${c}`, [["m", "v"]]);
    expect(store.size).toBe(3);
    expect(store.forwardedAs("c1", "m")).toBeUndefined();
    expect(store.forwardedAs("c4", "m")).toBe("v");
  });

  test("contentBytes: strings by length, parts by their JSON", () => {
    expect(contentBytes("abcd")).toBe(24 + 8);
    expect(contentBytes([{ type: "text", text: "ab" }])).toBe(24 + 2 * JSON.stringify([{ type: "text", text: "ab" }]).length);
  });
});
