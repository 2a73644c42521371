import { describe, expect, test } from "bun:test";
import { type ChunkVariant, ChunkVariantIndex, MIN_RECORDED_CFO } from "../../src/kv/chunkVariantIndex.ts";

let clock = 0;

function variant(id: string, chunkHash: string, prefix: string[] = [], options: Partial<ChunkVariant> = {}): ChunkVariant {
  const tokenCount = options.tokenCount ?? 4;
  const time = ++clock;
  return {
    id,
    chunkHash,
    tokenCount,
    prefix,
    exact: false,
    meta: { prefix, interByPrefix: {}, cci: 0.5, tokenInter: new Float32Array(tokenCount) },
    frequencyReuse: 0,
    bytes: 10,
    createdAt: time,
    lastUsedAt: time,
    ...options,
  };
}

const ids = (vs: readonly ChunkVariant[]) => vs.map((v) => v.id);

describe("ChunkVariantIndex basics", () => {
  test("add, get, variantsOf, size, bytes, remove", () => {
    const index = new ChunkVariantIndex();
    expect(index.add(variant("a1", "A"))).toEqual([]);
    expect(index.add(variant("a2", "A", ["X"], { bytes: 25 }))).toEqual([]);
    expect(index.add(variant("b1", "B"))).toEqual([]);
    expect(index.size).toBe(3);
    expect(index.bytes).toBe(45);
    expect(index.chunkCount).toBe(2);
    expect(ids(index.variantsOf("A"))).toEqual(["a1", "a2"]);
    expect(index.variantsOf("Z")).toEqual([]);
    expect(index.get("a2")!.prefix).toEqual(["X"]);
    expect(index.has("b1")).toBe(true);
    expect(index.remove("a2")!.id).toBe("a2");
    expect(index.remove("a2")).toBeUndefined();
    expect(index.get("a2")).toBeUndefined();
    expect(index.size).toBe(2);
    expect(index.bytes).toBe(20);
    expect(ids(index.variantsOf("A"))).toEqual(["a1"]);
    index.remove("a1");
    expect(index.chunkCount).toBe(1);
    expect(ids(index.all())).toEqual(["b1"]);
  });

  test("stores a copy: later changes to the caller's object do not leak in", () => {
    const index = new ChunkVariantIndex();
    const v = variant("a", "A", ["P"]);
    index.add(v);
    v.frequencyReuse = 99;
    v.prefix.push("Q");
    expect(index.get("a")!.frequencyReuse).toBe(0);
    expect(index.get("a")!.prefix).toEqual(["P"]);
  });

  test("rejects duplicate ids, bad numbers, inconsistent metadata and bad options", () => {
    const index = new ChunkVariantIndex();
    index.add(variant("a", "A"));
    expect(() => index.add(variant("a", "B"))).toThrow(RangeError);
    expect(() => index.add(variant("b", "B", [], { bytes: -1 }))).toThrow(RangeError);
    expect(() => index.add(variant("b", "B", [], { frequencyReuse: Number.NaN }))).toThrow(RangeError);
    expect(() => index.add(variant("b", "B", [], { tokenCount: 1.5 }))).toThrow(RangeError);
    const mismatch = variant("b", "B", ["P"]);
    mismatch.meta = { ...mismatch.meta, prefix: ["Q"] };
    expect(() => index.add(mismatch)).toThrow(RangeError);
    const short = variant("b", "B");
    short.meta = { ...short.meta, tokenInter: new Float32Array(2) };
    expect(() => index.add(short)).toThrow(RangeError);
    expect(index.size).toBe(1);
    expect(() => new ChunkVariantIndex({ maxVariantsPerChunk: 0 })).toThrow(RangeError);
    expect(() => new ChunkVariantIndex({ maxVariants: 1.5 })).toThrow(RangeError);
    expect(() => new ChunkVariantIndex({ maxBytes: -1 })).toThrow(RangeError);
  });
});

describe("recordUse (f_r += 1/max(CFO, 0.01))", () => {
  test("adds 1/CFO, floors CFO at 0.01, updates lastUsedAt", () => {
    const index = new ChunkVariantIndex();
    index.add(variant("a", "A"));
    expect(index.recordUse("a", 0.5, 1000)!.frequencyReuse).toBe(2);
    expect(index.get("a")!.lastUsedAt).toBe(1000);
    expect(index.recordUse("a", 0.25, 2000)!.frequencyReuse).toBe(6);
    expect(index.recordUse("a", 0, 3000)!.frequencyReuse).toBeCloseTo(6 + 1 / MIN_RECORDED_CFO, 9);
    expect(index.recordUse("a", 0.001, 3000)!.frequencyReuse).toBeCloseTo(6 + 2 / MIN_RECORDED_CFO, 9);
    expect(MIN_RECORDED_CFO).toBe(0.01);
  });

  test("unknown id → undefined; bad CFO throws", () => {
    const index = new ChunkVariantIndex();
    expect(index.recordUse("nope", 0.5)).toBeUndefined();
    index.add(variant("a", "A"));
    expect(() => index.recordUse("a", -0.1)).toThrow(RangeError);
    expect(() => index.recordUse("a", Number.NaN)).toThrow(RangeError);
    expect(() => index.recordUse("a", Infinity)).toThrow(RangeError);
  });
});

describe("eviction", () => {
  test("N×M limit: the lowest f_r among the others goes first", () => {
    const index = new ChunkVariantIndex({ maxVariants: 3 });
    index.add(variant("a", "A"));
    index.add(variant("b", "B"));
    index.add(variant("c", "C"));
    index.recordUse("a", 0.5); // f_r 2
    index.recordUse("b", 1); // f_r 1
    index.recordUse("c", 0.25); // f_r 4
    expect(ids(index.add(variant("d", "D")))).toEqual(["b"]);
    // The new variant (f_r 0) is not a candidate for its own admission; next time it is the lowest.
    expect(ids(index.add(variant("e", "E")))).toEqual(["d"]);
    expect(ids(index.all()).sort()).toEqual(["a", "c", "e"]);
    expect(index.size).toBe(3);
  });

  test("f_r ties: least recently used, then oldest, then first added", () => {
    const index = new ChunkVariantIndex({ maxVariants: 3 });
    index.add(variant("a", "A", [], { createdAt: 1, lastUsedAt: 50 }));
    index.add(variant("b", "B", [], { createdAt: 2, lastUsedAt: 10 }));
    index.add(variant("c", "C", [], { createdAt: 0, lastUsedAt: 10 }));
    expect(ids(index.add(variant("d", "D", [], { createdAt: 3, lastUsedAt: 60 })))).toEqual(["c"]); // LRU tie → oldest
    expect(ids(index.add(variant("e", "E", [], { createdAt: 4, lastUsedAt: 60 })))).toEqual(["b"]);
    const same = new ChunkVariantIndex({ maxVariants: 2 });
    same.add(variant("x", "X", [], { createdAt: 5, lastUsedAt: 5 }));
    same.add(variant("y", "Y", [], { createdAt: 5, lastUsedAt: 5 }));
    expect(ids(same.add(variant("z", "Z", [], { createdAt: 5, lastUsedAt: 5 })))).toEqual(["x"]);
  });

  test("M per chunk: a chunk at M evicts its own lowest-f_r variant, even if others are lower", () => {
    const index = new ChunkVariantIndex({ maxVariantsPerChunk: 2, maxVariants: 10 });
    index.add(variant("a1", "A", ["P"]));
    index.add(variant("a2", "A", ["Q"]));
    index.add(variant("b1", "B")); // f_r 0, the global lowest
    index.recordUse("a1", 0.1); // 10
    index.recordUse("a2", 0.5); // 2
    expect(ids(index.add(variant("a3", "A", ["R"])))).toEqual(["a2"]);
    expect(ids(index.variantsOf("A"))).toEqual(["a1", "a3"]);
    expect(index.has("b1")).toBe(true);
    // M = 1: each chunk keeps only its newest variant.
    const one = new ChunkVariantIndex({ maxVariantsPerChunk: 1 });
    one.add(variant("x1", "X"));
    one.recordUse("x1", 0.01);
    expect(ids(one.add(variant("x2", "X", ["P"])))).toEqual(["x1"]);
  });

  test("M per chunk first, then N×M among the others", () => {
    const index = new ChunkVariantIndex({ maxVariantsPerChunk: 2, maxVariants: 3 });
    index.add(variant("a1", "A", ["P"]));
    index.add(variant("a2", "A", ["Q"]));
    index.add(variant("b1", "B"));
    index.recordUse("b1", 0.5); // 2
    index.recordUse("a1", 1); // 1
    index.recordUse("a2", 0.25); // 4
    // A chunk at M: a1 goes; then 2 + 1 <= 3 so nothing else.
    expect(ids(index.add(variant("a3", "A", ["R"])))).toEqual(["a1"]);
    // A new chunk at N×M: the global lowest (a3, f_r 0).
    expect(ids(index.add(variant("c1", "C")))).toEqual(["a3"]);
  });

  test("byte budget: evicts lowest f_r until the new variant fits", () => {
    const index = new ChunkVariantIndex({ maxBytes: 100 });
    index.add(variant("a", "A", [], { bytes: 40 }));
    index.add(variant("b", "B", [], { bytes: 40 }));
    index.recordUse("a", 0.5);
    index.recordUse("b", 0.25);
    expect(index.add(variant("c", "C", [], { bytes: 20 }))).toEqual([]); // exactly 100
    expect(index.bytes).toBe(100);
    index.recordUse("c", 0.1);
    // 50 more: a (f_r 2) goes → 60 + 50 = 110 still over → b (f_r 4) goes → 70.
    expect(ids(index.add(variant("d", "D", [], { bytes: 50 })))).toEqual(["a", "b"]);
    expect(index.bytes).toBe(70);
    expect(ids(index.all())).toEqual(["c", "d"]);
  });

  test("a variant larger than maxBytes on its own is not stored and comes back alone", () => {
    const index = new ChunkVariantIndex({ maxBytes: 100 });
    index.add(variant("a", "A", [], { bytes: 60 }));
    const evicted = index.add(variant("huge", "H", [], { bytes: 101 }));
    expect(ids(evicted)).toEqual(["huge"]);
    expect(index.has("huge")).toBe(false);
    expect(ids(index.all())).toEqual(["a"]);
    expect(index.bytes).toBe(60);
    // maxBytes 0 keeps only empty variants.
    const none = new ChunkVariantIndex({ maxBytes: 0 });
    expect(ids(none.add(variant("x", "X", [], { bytes: 1 })))).toEqual(["x"]);
    expect(none.add(variant("y", "Y", [], { bytes: 0 }))).toEqual([]);
  });
});

describe("longestExactPrefix (trie over chunk hashes)", () => {
  const exact = (id: string, hash: string, prefix: string[], extra: Partial<ChunkVariant> = {}) => variant(id, hash, prefix, { exact: true, ...extra });

  test("the longest run of exact variants from the start", () => {
    const index = new ChunkVariantIndex();
    index.add(exact("h0", "H0", []));
    index.add(exact("h1", "H1", ["H0"]));
    index.add(exact("h2x", "H2", ["H0", "X"])); // a different path
    index.add(variant("h2", "H2", ["H0", "H1"])); // right prefix but not exact
    index.add(exact("h3", "H3", ["H0", "H1", "H2"])); // beyond the gap at H2
    expect(ids(index.longestExactPrefix(["H0", "H1", "H2", "H3"]))).toEqual(["h0", "h1"]);
    expect(ids(index.longestExactPrefix(["H0", "X", "H2"]))).toEqual(["h0"]); // no exact X under H0
    expect(ids(index.longestExactPrefix(["H1"]))).toEqual([]); // H1's exact variant needs prefix [H0]
    expect(ids(index.longestExactPrefix([]))).toEqual([]);
    index.add(exact("h2e", "H2", ["H0", "H1"]));
    expect(ids(index.longestExactPrefix(["H0", "H1", "H2", "H3", "H4"]))).toEqual(["h0", "h1", "h2e", "h3"]);
    expect(ids(index.longestExactPrefix(["H0", "H1", "H2"]))).toEqual(["h0", "h1", "h2e"]);
  });

  test("a removed or evicted variant ends the run; the trie is pruned", () => {
    const index = new ChunkVariantIndex({ maxVariants: 3 });
    index.add(exact("h0", "H0", []));
    index.add(exact("h1", "H1", ["H0"]));
    index.add(exact("h2", "H2", ["H0", "H1"]));
    index.recordUse("h0", 0);
    index.recordUse("h2", 0);
    expect(ids(index.add(variant("o", "O")))).toEqual(["h1"]);
    expect(ids(index.longestExactPrefix(["H0", "H1", "H2"]))).toEqual(["h0"]);
    index.remove("h0");
    expect(index.longestExactPrefix(["H0", "H1", "H2"])).toEqual([]);
    index.remove("h2");
    // Re-adding after pruning works from scratch.
    index.add(exact("h0b", "H0", []));
    expect(ids(index.longestExactPrefix(["H0", "H1"]))).toEqual(["h0b"]);
  });

  test("several exact variants for the same prefix and chunk: the most recently used", () => {
    const index = new ChunkVariantIndex();
    index.add(exact("old", "H0", [], { createdAt: 1, lastUsedAt: 1 }));
    index.add(exact("new", "H0", [], { createdAt: 2, lastUsedAt: 2 }));
    expect(ids(index.longestExactPrefix(["H0"]))).toEqual(["new"]);
    index.recordUse("old", 0.5, 10);
    expect(ids(index.longestExactPrefix(["H0"]))).toEqual(["old"]);
    index.remove("old");
    expect(ids(index.longestExactPrefix(["H0"]))).toEqual(["new"]);
  });

  test("repeated hashes in a prompt follow the trie path", () => {
    const index = new ChunkVariantIndex();
    index.add(exact("a", "A", []));
    index.add(exact("aa", "A", ["A"]));
    expect(ids(index.longestExactPrefix(["A", "A", "A"]))).toEqual(["a", "aa"]);
  });
});
