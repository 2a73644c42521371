import { describe, expect, test } from "bun:test";
import { ConversationStore } from "../../src/online/conversationStore.ts";

describe("ConversationStore", () => {
  test("keeps the first label of a block; conversations are isolated", () => {
    const store = new ConversationStore();
    store.record("a", [["s:1", "[Doc 1]"]]);
    store.record("a", [["s:1", "[Doc 9]"], ["s:2", "[Doc 2]"]]);
    expect(store.labelOf("a", "s:1")).toBe("[Doc 1]");
    expect(store.labelOf("a", "s:2")).toBe("[Doc 2]");
    expect(store.labelOf("b", "s:1")).toBeUndefined();
  });

  test("bytes grow with new entries only, and the budget forgets least recently used conversations", () => {
    const store = new ConversationStore({ maxBytes: 50_000 });
    store.record("a", [["s:1", "[Doc 1]"]]);
    const once = store.bytes;
    store.record("a", [["s:1", "[Doc 1]"]]);
    expect(store.bytes).toBe(once);
    const forgotten: string[] = [];
    for (let c = 0; c < 50; c++) forgotten.push(...store.record(`c${c}`, Array.from({ length: 10 }, (_, i): [string, string] => [`s:${c}-${i}-${"x".repeat(50)}`, `[Doc ${i + 1}]`])));
    expect(store.bytes).toBeLessThanOrEqual(50_000);
    expect(forgotten[0]).toBe("a");
    expect(store.evictedForByteBudget).toBe(forgotten.length);
    expect(store.size).toBe(51 - forgotten.length);
    // Exported state replays to the same bytes.
    const replayed = new ConversationStore({ maxBytes: 50_000 });
    for (const [id, entries] of store.export()) replayed.record(id, entries);
    expect(replayed.bytes).toBe(store.bytes);
    store.clear();
    expect([store.bytes, store.size]).toEqual([0, 0]);
  });
});
