/**
 * The engine-cache mirror (src/proxy/engineCacheMirror.ts) against a small reference engine: an
 * LRU cache of chained blocks with its own hashes, publishing BlockStored / BlockRemoved /
 * AllBlocksCleared. After every event the mirror's answer for every prompt equals the engine's
 * true cached prefix.
 */
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { EngineCacheMirror, mirrorBlockBytes, mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import { seededRandom } from "../helpers/randomContexts.ts";

const BLOCK = 4;

/** A reference engine: blocks named by its own hash (sha1 of parent hash and tokens), LRU eviction of leaves. */
class ReferenceEngine {
  readonly blocks = new Map<string, { parent: string | null; tokens: number[]; used: number }>();
  private clock = 0;
  constructor(
    private readonly capacity: number,
    private readonly publish: (event: { type: "stored"; hashes: string[]; parent: string | null; tokenIds: number[] } | { type: "removed"; hashes: string[] } | { type: "cleared" }) => void,
  ) {}

  private hashOf(parent: string | null, tokens: number[]): string {
    return createHash("sha1").update(String(parent)).update(tokens.join(",")).digest("hex");
  }

  /** Runs a prompt: its full blocks are looked up, the missing ones stored (as one chain). */
  run(tokens: number[]): number {
    let parent: string | null = null;
    let cached = 0;
    const stored: string[] = [];
    let storedParent: string | null = null;
    const storedTokens: number[] = [];
    for (let start = 0; start + BLOCK <= tokens.length; start += BLOCK) {
      const block = tokens.slice(start, start + BLOCK);
      const hash = this.hashOf(parent, block);
      const entry = this.blocks.get(hash);
      if (entry !== undefined && stored.length === 0) {
        entry.used = ++this.clock;
        cached++;
      } else {
        if (stored.length === 0) storedParent = parent;
        if (entry === undefined) this.blocks.set(hash, { parent, tokens: block, used: ++this.clock });
        stored.push(hash);
        storedTokens.push(...block);
      }
      parent = hash;
    }
    if (stored.length > 0) this.publish({ type: "stored", hashes: stored, parent: storedParent, tokenIds: storedTokens });
    this.evict();
    return cached;
  }

  /** The prompt's cached leading blocks, by the engine's own names. */
  cachedPrefix(tokens: number[]): number {
    let parent: string | null = null;
    let run = 0;
    for (let start = 0; start + BLOCK <= tokens.length; start += BLOCK) {
      const hash = this.hashOf(parent, tokens.slice(start, start + BLOCK));
      if (!this.blocks.has(hash)) break;
      run++;
      parent = hash;
    }
    return run;
  }

  clear(): void {
    this.blocks.clear();
    this.publish({ type: "cleared" });
  }

  private evict(): void {
    const removed: string[] = [];
    while (this.blocks.size > this.capacity) {
      const parents = new Set([...this.blocks.values()].map((b) => b.parent));
      let victim: string | null = null;
      for (const [hash, block] of this.blocks) if (!parents.has(hash) && (victim === null || block.used < this.blocks.get(victim)!.used)) victim = hash;
      this.blocks.delete(victim!);
      removed.push(victim!);
    }
    if (removed.length > 0) this.publish({ type: "removed", hashes: removed });
  }
}

describe("EngineCacheMirror", () => {
  test("after every event it agrees with the engine's true cache on every prompt (random prompts, LRU eviction, clears)", () => {
    const random = seededRandom(41);
    const mirror = new EngineCacheMirror();
    const engine = new ReferenceEngine(40, (event) => {
      if (event.type === "stored") mirror.stored({ hashes: event.hashes, parent: event.parent, tokenIds: event.tokenIds, blockSize: BLOCK });
      else if (event.type === "removed") mirror.removed(event.hashes);
      else mirror.cleared();
    });
    const stems = Array.from({ length: 6 }, () => Array.from({ length: 12 }, () => Math.floor(random() * 50)));
    const prompts: number[][] = [];
    for (let step = 0; step < 400; step++) {
      const stem = stems[Math.floor(random() * stems.length)]!;
      const prompt = [...stem.slice(0, 4 + Math.floor(random() * 8)), ...Array.from({ length: Math.floor(random() * 14) }, () => Math.floor(random() * 50))];
      prompts.push(prompt);
      if (step % 97 === 96) engine.clear();
      else engine.run(prompt);
      for (const probe of prompts.slice(-30)) expect(mirror.cachedBlocks(mirrorBlockKeys(probe, BLOCK))).toBe(engine.cachedPrefix(probe));
      expect(mirror.stats.blocks).toBe(engine.blocks.size);
    }
    expect(mirror.stats.orphans).toBe(0);
  });

  test("missed events: an orphan chain is left out and counted; malformed events are counted; a resync drops everything", () => {
    const mirror = new EngineCacheMirror();
    mirror.stored({ hashes: ["b2"], parent: "unknown", tokenIds: [1, 2, 3, 4], blockSize: 4 });
    expect(mirror.stats).toEqual({ blocks: 0, orphans: 1, malformed: 0, unknownRemovals: 0, bytes: 0, evictedForBytes: 0 });
    mirror.stored({ hashes: ["a", "b"], parent: null, tokenIds: [1, 2, 3], blockSize: 4 });
    expect(mirror.stats.malformed).toBe(1);
    mirror.stored({ hashes: ["a", "b"], parent: null, tokenIds: [1, 2, 3, 4, 5, 6, 7, 8], blockSize: 4 });
    expect(mirror.cachedBlocks(mirrorBlockKeys([1, 2, 3, 4, 5, 6, 7, 8, 9], 4))).toBe(2);
    mirror.removed(["zzz"]);
    expect(mirror.stats.unknownRemovals).toBe(1);
    // Blocks of a LoRA adapter are another namespace.
    mirror.stored({ hashes: ["l1"], parent: null, tokenIds: [9, 9, 9, 9], blockSize: 4, loraId: 3 });
    expect(mirror.cachedBlocks(mirrorBlockKeys([9, 9, 9, 9], 4))).toBe(0);
    expect(mirror.cachedBlocks(mirrorBlockKeys([9, 9, 9, 9], 4, 3))).toBe(1);
    mirror.cleared();
    expect(mirror.stats.blocks).toBe(0);
    expect(mirror.cachedBlocks(mirrorBlockKeys([1, 2, 3, 4], 4))).toBe(0);
  });

  test("a byte budget: past it, the blocks stored longest ago are forgotten (told as dropped), counted, and the bytes stay within it", () => {
    const dropped: bigint[] = [];
    const held: bigint[] = [];
    const hash = (i: number) => `${10_000_000_000_000 + i}`;
    const budget = 100 * mirrorBlockBytes(hash(0));
    const mirror = new EngineCacheMirror({ held: (key) => held.push(key), dropped: (key) => dropped.push(key) }, budget);
    for (let i = 0; i < 1000; i++) mirror.stored({ hashes: [hash(i)], parent: null, tokenIds: [i, i + 1, i + 2, i + 3], blockSize: 4 });
    const stats = mirror.stats;
    expect(stats.blocks).toBe(100);
    expect(stats.bytes).toBeLessThanOrEqual(budget);
    expect(stats.bytes).toBe(100 * mirrorBlockBytes(hash(0)));
    expect(stats.evictedForBytes).toBe(900);
    // The oldest went first: the last 100 prompts are held, the first are not.
    expect(dropped).toEqual(held.slice(0, 900));
    expect(mirror.cachedBlocks(mirrorBlockKeys([999, 1000, 1001, 1002], 4))).toBe(1);
    expect(mirror.cachedBlocks(mirrorBlockKeys([0, 1, 2, 3], 4))).toBe(0);
    // Removing and clearing give the bytes back.
    mirror.removed([hash(999)]);
    expect(mirror.stats.bytes).toBe(99 * mirrorBlockBytes(hash(0)));
    mirror.cleared();
    expect(mirror.stats.bytes).toBe(0);
    // After a clear, and with hashes stored again (they count as new), the oldest still go first.
    for (let i = 0; i < 150; i++) mirror.stored({ hashes: [hash(i % 120)], parent: null, tokenIds: [i, 0, 0, 0], blockSize: 4 });
    expect(mirror.stats.blocks).toBe(100);
    // 20 to make room for hashes 100..119, then 30 as hashes 0..29 come back (all forgotten by then).
    expect(mirror.stats.evictedForBytes).toBe(900 + 50);
    expect(mirror.cachedBlocks(mirrorBlockKeys([149, 0, 0, 0], 4))).toBe(1);
    expect(mirror.cachedBlocks(mirrorBlockKeys([29, 0, 0, 0], 4))).toBe(0);
    expect(mirror.cachedBlocks(mirrorBlockKeys([49, 0, 0, 0], 4))).toBe(0);
    expect(mirror.cachedBlocks(mirrorBlockKeys([50, 0, 0, 0], 4))).toBe(1);
  });
});
