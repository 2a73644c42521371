/**
 * The prefix cache's bookkeeping (src/kv/prefixBlockCache.ts): chained block hashes, longest
 * cached prefix, reference counts, and eviction (least recently used, leaves before parents),
 * by hand and against a small reference model under random admissions, releases and evictions.
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { PrefixBlockCache, blockHash, chainRoot, promptBlockHashes } from "../../src/kv/prefixBlockCache.ts";
import { integer } from "../helpers/fuzzRandom.ts";
import { seededRandom } from "../helpers/randomContexts.ts";

describe("block hashes", () => {
  test("a block's hash stands for its whole prefix and the seed; partial blocks have none", () => {
    const a = promptBlockHashes("m1", [1, 2, 3, 4, 5, 6, 7], 2);
    expect(a.length).toBe(3);
    expect(promptBlockHashes("m1", [1, 2, 3, 4], 2)).toEqual(a.slice(0, 2));
    // Same second block after another first block: another hash.
    expect(promptBlockHashes("m1", [9, 9, 3, 4], 2)[1]).not.toBe(a[1]);
    // Another model or KV setting: nothing shared.
    expect(promptBlockHashes("m2", [1, 2], 2)[0]).not.toBe(a[0]);
    expect(a[0]).toBe(blockHash(chainRoot("m1"), [1, 2]));
    expect(a[1]).toBe(blockHash(a[0]!, [3, 4]));
    expect(() => promptBlockHashes("m1", [1], 0)).toThrow(RangeError);
    expect(() => blockHash("x", [-1])).toThrow(RangeError);
  });

  test("a block's hash is the first 128 bits of sha256(parent as UTF-8 ‖ token ids as u32 LE), over a range of the tokens", () => {
    const tokens = [0, 1, 255, 256, 65_535, 4_294_967_295, 7, 8];
    for (const parent of ["seed:é-model|kv=f32", "0123456789abcdef0123456789abcdef", "x".repeat(300)]) {
      const bytes = Buffer.alloc(16);
      tokens.slice(2, 6).forEach((token, i) => bytes.writeUInt32LE(token, i * 4));
      const expected = createHash("sha256").update(Buffer.from(parent, "utf8")).update(bytes).digest("hex").slice(0, 32);
      expect(blockHash(parent, tokens, 2, 6)).toBe(expected);
      expect(blockHash(parent, tokens.slice(2, 6))).toBe(expected);
    }
  });
});

describe("PrefixBlockCache by hand", () => {
  test("lookup stops at the first missing block; referenced blocks are never evicted", () => {
    const cache = new PrefixBlockCache();
    const [h0, h1, h2] = promptBlockHashes("m", [1, 1, 2, 2, 3, 3], 2);
    expect(cache.insert(h0!, null, 10)).toBe(10);
    expect(cache.insert(h1!, h0!, 11)).toBe(11);
    expect(cache.lookup([h0!, h1!, h2!])).toEqual([10, 11]);
    expect(cache.lookup([h1!])).toEqual([11]);
    expect(cache.evict(5)).toEqual([]);
    cache.release([h0!, h1!]);
    // Leaves first: 11 before its parent 10.
    expect(cache.evict(1)).toEqual([11]);
    expect(cache.evict(5)).toEqual([10]);
    expect(cache.size).toBe(0);
    expect(cache.stats).toMatchObject({ blocks: 0, evictions: 2, queried: 4, hits: 3 });
  });

  test("an equal block inserted twice is cached once: the second caller gets the first block, referenced", () => {
    const cache = new PrefixBlockCache();
    const [h0] = promptBlockHashes("m", [5, 6], 2);
    expect(cache.insert(h0!, null, 3)).toBe(3);
    expect(cache.insert(h0!, null, 4)).toBe(3);
    cache.release([h0!]);
    expect(cache.evict(1)).toEqual([]);
    cache.release([h0!]);
    expect(cache.evict(1)).toEqual([3]);
  });

  test("least recently used first among leaves; a parent is kept while a child is cached", () => {
    const cache = new PrefixBlockCache();
    const a = promptBlockHashes("m", [1, 1, 2, 2], 2);
    const b = promptBlockHashes("m", [1, 1, 7, 7], 2);
    cache.insert(a[0]!, null, 1);
    cache.insert(a[1]!, a[0]!, 2);
    cache.acquire([a[0]!]);
    cache.insert(b[1]!, b[0]!, 3);
    cache.release([a[0]!, a[1]!]);
    cache.release([a[0]!, b[1]!]);
    // a[1] was released before b[1]: it goes first; the shared parent only after both children.
    expect(cache.evict(1)).toEqual([2]);
    expect(cache.evict(1)).toEqual([3]);
    expect(cache.evict(1)).toEqual([1]);
  });

  test("misuse is an error, not silent corruption", () => {
    const cache = new PrefixBlockCache();
    const [h0, h1] = promptBlockHashes("m", [1, 1, 2, 2], 2);
    expect(() => cache.acquire([h0!])).toThrow(/not cached/);
    expect(() => cache.insert(h1!, h0!, 2)).toThrow(/not cached/);
    cache.insert(h0!, null, 1);
    expect(() => cache.insert(h1!, h0!, 1)).toThrow(/already holds/);
    cache.release([h0!]);
    expect(() => cache.release([h0!])).toThrow(/not referenced/);
  });
});

/** The reference: the same rules written the slow, obvious way. */
class ReferenceCache {
  readonly blocks = new Map<string, { parent: string | null; block: number; refs: number; lastUsed: number }>();
  private tick = 0;

  lookup(hashes: readonly string[]): number[] {
    const out: number[] = [];
    for (const h of hashes) {
      const e = this.blocks.get(h);
      if (e === undefined) break;
      out.push(e.block);
    }
    return out;
  }
  acquire(hashes: readonly string[]): void {
    for (const h of hashes) {
      const e = this.blocks.get(h)!;
      e.refs++;
      e.lastUsed = ++this.tick;
    }
  }
  release(hashes: readonly string[]): void {
    for (const h of hashes) {
      const e = this.blocks.get(h)!;
      e.refs--;
      e.lastUsed = ++this.tick;
    }
  }
  insert(hash: string, parent: string | null, block: number): number {
    const e = this.blocks.get(hash);
    if (e !== undefined) {
      e.refs++;
      e.lastUsed = ++this.tick;
      return e.block;
    }
    this.blocks.set(hash, { parent, block, refs: 1, lastUsed: ++this.tick });
    return block;
  }
  evict(count: number): number[] {
    const freed: number[] = [];
    while (freed.length < count) {
      const parents = new Set([...this.blocks.values()].map((e) => e.parent));
      const leaves = [...this.blocks.entries()].filter(([h, e]) => e.refs === 0 && !parents.has(h));
      if (leaves.length === 0) break;
      leaves.sort((x, y) => x[1].lastUsed - y[1].lastUsed);
      const [h, e] = leaves[0]!;
      this.blocks.delete(h);
      freed.push(e.block);
    }
    return freed;
  }
}

describe("PrefixBlockCache against the reference model", () => {
  test("random admissions, releases and evictions: the same lookups, blocks and evictions; no block in use is ever freed", () => {
    let evicted = 0;
    for (let seed = 1; seed <= 20; seed++) {
      const rng = seededRandom(seed);
      const random = { int: (max: number) => integer(rng, max) };
      const cache = new PrefixBlockCache();
      const reference = new ReferenceCache();
      let nextBlock = 0;
      const running: string[][] = [];
      for (let step = 0; step < 400; step++) {
        const op = random.int(10);
        if (op < 5) {
          // Admit a prompt from a small alphabet (prefixes are shared often): cached blocks are
          // referenced, the rest are "computed" into new blocks and inserted.
          const length = 2 * (1 + random.int(6));
          const tokens = Array.from({ length }, () => random.int(3));
          const hashes = promptBlockHashes("m", tokens, 2);
          const hit = cache.lookup(hashes);
          expect(hit).toEqual(reference.lookup(hashes));
          const cached = hashes.slice(0, hit.length);
          cache.acquire(cached);
          reference.acquire(cached);
          for (let i = hit.length; i < hashes.length; i++) {
            const block = nextBlock++;
            const parent = i === 0 ? null : hashes[i - 1]!;
            expect(cache.insert(hashes[i]!, parent, block)).toBe(reference.insert(hashes[i]!, parent, block));
          }
          running.push(hashes);
        } else if (op < 8 && running.length > 0) {
          const [hashes] = running.splice(random.int(running.length), 1);
          cache.release(hashes!);
          reference.release(hashes!);
        } else {
          const count = random.int(4);
          const inUse = new Set(running.flatMap((hashes) => hashes.map((h) => cache.blockOf(h)!)));
          const freed = cache.evict(count);
          expect(freed).toEqual(reference.evict(count));
          for (const block of freed) expect(inUse.has(block)).toBe(false);
          evicted += freed.length;
        }
        expect(cache.size).toBe(reference.blocks.size);
      }
    }
    // The runs did evict (the comparison is not vacuous).
    expect(evicted).toBeGreaterThan(100);
  });
});
