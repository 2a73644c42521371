/** Window checkpoints: kept once per hash, referenced while read, evicted unreferenced, stranded prefixes first, then least recently used. */
import { describe, expect, test } from "bun:test";
import { SlidingCheckpointCache } from "../../src/kv/slidingCheckpointCache.ts";

describe("SlidingCheckpointCache", () => {
  test("insert keeps the first block of a hash; acquire/release count readers; referenced blocks are never evicted", () => {
    const cache = new SlidingCheckpointCache();
    expect(cache.insert("a", 10)).toBe(true);
    expect(cache.insert("a", 11)).toBe(false);
    expect(cache.blockOf("a")).toBe(10);
    expect(cache.insert("b", 12)).toBe(true);
    expect(cache.acquire("a")).toBe(10);
    expect(cache.stats).toEqual({ blocks: 2, referenced: 1, evictions: 0, superseded: 0 });
    expect(cache.evict(5)).toEqual({ blocks: [12], hashes: ["b"] });
    expect(cache.has("a")).toBe(true);
    cache.release("a");
    expect(() => cache.release("a")).toThrow(/not referenced/);
    expect(() => cache.acquire("zz")).toThrow(/not cached/);
    expect(cache.evict(5)).toEqual({ blocks: [10], hashes: ["a"] });
    expect(cache.stats).toEqual({ blocks: 0, referenced: 0, evictions: 2, superseded: 0 });
  });

  test("eviction order: checkpoints whose full-attention prefix is gone first, then least recently used", () => {
    const cache = new SlidingCheckpointCache();
    for (const [i, hash] of ["old", "mid", "new", "stranded"].entries()) cache.insert(hash, i);
    cache.acquire("old");
    cache.release("old"); // used most recently now
    expect(cache.evict(1, (hash) => hash === "stranded").hashes).toEqual(["stranded"]);
    expect(cache.evict(2).hashes).toEqual(["mid", "new"]);
    expect(cache.evict(0).hashes).toEqual([]);
  });

  test("superseded checkpoints: the unreferenced ones among the hashes given are dropped, referenced and unknown ones stay", () => {
    const cache = new SlidingCheckpointCache();
    for (const [i, hash] of ["h0", "h1", "h2", "other"].entries()) cache.insert(hash, i);
    cache.acquire("h1");
    expect(cache.dropSuperseded(["h0", "h1", "h2", "missing"])).toEqual({ blocks: [0, 2], hashes: ["h0", "h2"] });
    expect(cache.has("h1")).toBe(true);
    expect(cache.has("other")).toBe(true);
    expect(cache.stats).toEqual({ blocks: 2, referenced: 1, evictions: 0, superseded: 2 });
  });
});
