import { describe, expect, test } from "bun:test";
import { GeneratedTokenMemory } from "../../src/engine/generatedTokenMemory.ts";

const everywhere = () => true;
const ids = (prefix: { ids: Int32Array } | null) => (prefix === null ? null : [...prefix.ids]);

describe("GeneratedTokenMemory", () => {
  test("finds the longest remembered text the prompt starts with, at a cut the caller allows", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([1, 2], "<a>hi");
    memory.remember([1, 2, 3, 4], "<a>hi there");
    memory.remember([9], "<b>");
    const prompt = "<a>hi there<e>next";
    expect(memory.longestPrefix(prompt, everywhere)).toEqual({ ids: Int32Array.from([1, 2, 3, 4]), length: 11 });
    // Only where the cut is allowed: at "<e>", not after "<a>hi".
    const allowed = (at: number) => prompt.startsWith("<e>", at);
    expect(ids(memory.longestPrefix(prompt, allowed))).toEqual([1, 2, 3, 4]);
    expect(memory.longestPrefix("<a>hi th", allowed)).toBeNull();
    expect(ids(memory.longestPrefix("<a>hi<e>", (at) => at === 5))).toEqual([1, 2]);
  });

  test("a prompt equal to a remembered text needs no cut; a different text of the same length is no match", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([5, 6], "abc");
    expect(ids(memory.longestPrefix("abc", () => false))).toEqual([5, 6]);
    expect(memory.longestPrefix("abd", everywhere)).toBeNull();
    expect(memory.longestPrefix("ab", everywhere)).toBeNull();
    expect(memory.longestPrefix("xabc", everywhere)).toBeNull();
  });

  test("texts with characters outside the BMP hash alike whatever the cuts in between", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([1], "🎉");
    memory.remember([1, 2], "🎉 日本");
    expect(ids(memory.longestPrefix("🎉 日本<e>", everywhere))).toEqual([1, 2]);
  });

  test("least recently used entries go first past maxEntries or maxTokens; a hit counts as a use", () => {
    const memory = new GeneratedTokenMemory({ maxEntries: 2, maxTokens: 5 });
    memory.remember([1], "a");
    memory.remember([2], "b");
    expect(ids(memory.longestPrefix("a", everywhere))).toEqual([1]);
    memory.remember([3], "c");
    expect(memory.size).toBe(2);
    expect(memory.longestPrefix("b", everywhere)).toBeNull();
    expect(ids(memory.longestPrefix("a", everywhere))).toEqual([1]);
    memory.remember([4, 4, 4, 4], "dddd");
    expect(memory.tokens).toBe(5);
    expect(memory.longestPrefix("c", everywhere)).toBeNull();
    memory.remember([1, 2, 3, 4, 5, 6], "too long");
    expect(memory.longestPrefix("too long", everywhere)).toBeNull();
    expect(memory.tokens).toBe(5);
  });

  test("remembering a text again replaces its ids", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([1, 2], "ab");
    memory.remember([3], "ab");
    expect(memory.size).toBe(1);
    expect(memory.tokens).toBe(1);
    expect(ids(memory.longestPrefix("ab", everywhere))).toEqual([3]);
  });

  test("entries are kept apart by cache salt", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([1, 2], "<a>hi", "tenant-a");
    memory.remember([3], "<a>hi");
    expect(ids(memory.longestPrefix("<a>hi<e>", everywhere, "tenant-a"))).toEqual([1, 2]);
    expect(ids(memory.longestPrefix("<a>hi<e>", everywhere))).toEqual([3]);
    expect(memory.longestPrefix("<a>hi<e>", everywhere, "tenant-b")).toBeNull();
    // A salt is not a prefix of the text: "a" + "|..." never meets "" + "a|...".
    memory.remember([4], "x", "a");
    expect(memory.longestPrefix("x", everywhere, "")).toBeNull();
  });

  test("a conversation keeps its last two turns: remembering one drops the entries it extends but the longest", () => {
    const memory = new GeneratedTokenMemory();
    memory.remember([1], "<a>");
    memory.remember([1, 2], "<a>b");
    memory.remember([7], "<x>");
    memory.remember([1, 2, 3], "<a>b<c>");
    expect(memory.size).toBe(3);
    expect(memory.tokens).toBe(6);
    expect(memory.longestPrefix("<a><z>", everywhere)).toBeNull();
    // A regenerated turn resends the turn before's text: still found.
    expect(ids(memory.longestPrefix("<a>b<z>", everywhere))).toEqual([1, 2]);
    // Another answer to that turn: its predecessor stays, the first answer stays (least recently used goes first).
    memory.remember([1, 2, 4], "<a>b<d>");
    expect(ids(memory.longestPrefix("<a>b<c>", everywhere))).toEqual([1, 2, 3]);
    expect(ids(memory.longestPrefix("<a>b<d>", everywhere))).toEqual([1, 2, 4]);
    expect(ids(memory.longestPrefix("<x>", everywhere))).toEqual([7]);
    // Under another salt nothing is dropped.
    memory.remember([9, 9, 9, 9], "<a>b<c>e", "other");
    expect(ids(memory.longestPrefix("<a>b<z>", everywhere))).toEqual([1, 2]);
  });

  test("bad limits are refused", () => {
    expect(() => new GeneratedTokenMemory({ maxTokens: 0 })).toThrow(/maxTokens/);
    expect(() => new GeneratedTokenMemory({ maxEntries: 1.5 })).toThrow(/maxEntries/);
  });
});
