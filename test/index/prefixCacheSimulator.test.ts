import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";
import { parseContextsJsonl } from "../../src/index/contextsJsonl.ts";
import {
  PrefixCacheSimulator,
  simulateContextSet,
  simulatePrefixCache,
} from "../../src/index/prefixCacheSimulator.ts";
import type { PrefixCacheResult } from "../../src/index/prefixCacheSimulator.ts";
import { REPO_ROOT, referenceSimulator, runProgram, tempFolder } from "../helpers/cli.ts";

// These tests spawn processes; give them room on a busy machine.
setDefaultTimeout(120_000);

/** sim.py's result dict, as printed by `sim.py --json`. */
interface SimPyResult {
  requests: number;
  total_tokens: number;
  hit_tokens: number;
  hit_ratio: number;
  capacity_tokens: number | null;
  evicted_blocks: number;
}

function asSimPy(result: PrefixCacheResult): SimPyResult {
  return {
    requests: result.requests,
    total_tokens: result.totalTokens,
    hit_tokens: result.hitTokens,
    hit_ratio: result.hitRatio,
    capacity_tokens: result.capacityTokens,
    evicted_blocks: result.evictedBlocks,
  };
}

/**
 * A line-by-line TypeScript port of shared/workloads/sim.py's simulate() (object
 * nodes, a plain binary heap of [last, tiebreak, node]): an in-process oracle.
 */
function referenceSimulate(seqs: readonly (readonly number[])[], capacityTokens: number | null, blockTokens: number) {
  interface Node {
    children: Map<number, Node>;
    parent: Node | null;
    key: number;
    last: number;
    alive: boolean;
  }
  const newNode = (parent: Node | null, key: number): Node => ({ children: new Map(), parent, key, last: 0, alive: true });
  type Entry = [number, number, Node];
  const heap: Entry[] = [];
  const less = (a: Entry, b: Entry) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
  const push = (e: Entry) => {
    heap.push(e);
    let i = heap.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (!less(heap[i]!, heap[up]!)) break;
      [heap[i], heap[up]] = [heap[up]!, heap[i]!];
      i = up;
    }
  };
  const pop = (): Entry => {
    const top = heap[0]!;
    const end = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = end;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && less(heap[l]!, heap[m]!)) m = l;
        if (r < heap.length && less(heap[r]!, heap[m]!)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m]!, heap[i]!];
        i = m;
      }
    }
    return top;
  };
  const root = newNode(null, -1);
  let cached = 0;
  let clock = 0;
  let tiebreak = 0;
  let hit = 0;
  let total = 0;
  let evicted = 0;
  const capBlocks = capacityTokens === null ? null : Math.floor(capacityTokens / blockTokens);
  for (const seq of seqs) {
    clock++;
    total += seq.length * blockTokens;
    let node = root;
    let i = 0;
    while (i < seq.length) {
      const child = node.children.get(seq[i]!);
      if (!child) break;
      child.last = clock;
      node = child;
      i++;
    }
    hit += i * blockTokens;
    while (i < seq.length) {
      const child = newNode(node, seq[i]!);
      child.last = clock;
      node.children.set(seq[i]!, child);
      node = child;
      cached++;
      i++;
    }
    if (node !== root && node.children.size === 0) push([node.last, ++tiebreak, node]);
    if (capBlocks !== null) {
      while (cached > capBlocks && heap.length > 0) {
        const [last, , victim] = pop();
        if (!victim.alive || victim.children.size > 0) continue;
        if (victim.last !== last) {
          push([victim.last, ++tiebreak, victim]);
          continue;
        }
        const parent = victim.parent!;
        parent.children.delete(victim.key);
        victim.alive = false;
        cached--;
        evicted++;
        if (parent !== root && parent.children.size === 0) push([parent.last, ++tiebreak, parent]);
      }
    }
  }
  return {
    requests: seqs.length,
    total_tokens: total,
    hit_tokens: hit,
    hit_ratio: total ? hit / total : 0,
    capacity_tokens: capacityTokens,
    evicted_blocks: evicted,
  };
}

/** Deterministic pseudo-random numbers (mulberry32). */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Requests with much prefix sharing: prefixes of earlier requests plus random tails. */
function sharingWorkload(rand: () => number, count: number, alphabet: number, maxLength: number): number[][] {
  const requests: number[][] = [];
  for (let r = 0; r < count; r++) {
    let seq: number[] = [];
    if (requests.length > 0 && rand() < 0.7) {
      const base = requests[Math.max(0, requests.length - 1 - Math.floor(rand() * 30))]!;
      seq = base.slice(0, Math.floor(rand() * (base.length + 1)));
    }
    const length = Math.floor(rand() * (maxLength + 1));
    while (seq.length < length) seq.push(Math.floor(rand() * alphabet));
    requests.push(seq);
  }
  return requests;
}

describe("prefix-cache simulator", () => {
  test("hand-checked: unlimited cache hits the longest shared prefix", () => {
    const result = simulatePrefixCache([[1, 2, 3], [1, 2, 4], [1, 2, 3, 5], [2, 1]].map((s) => Int32Array.from(s)), {
      blockTokens: 10,
    });
    // hits: 0, 2, 3, 0 blocks of 3 + 3 + 4 + 2 = 12
    expect(result).toEqual({
      requests: 4,
      totalTokens: 120,
      hitTokens: 50,
      hitRatio: 50 / 120,
      capacityTokens: null,
      evictedBlocks: 0,
    });
  });

  test("hand-checked: LRU leaves go first, a prefix only after its extensions", () => {
    // capacity 4 blocks. [1,2] then [3,4]: 4 cached. [1,5] inserts 5 -> 5 cached:
    // LRU leaf is 2 (last=1) -> evicted; cache {1,5,3,4}. [1,2]: hit 1 block, insert 2
    // -> 5 cached; leaves 5 (last 3), 4 (last 2), 2 (last 4): evict 4. [3]: hit 1.
    const sim = new PrefixCacheSimulator({ blockTokens: 1, capacityTokens: 4 });
    expect([[1, 2], [3, 4], [1, 5], [1, 2], [3]].map((s) => sim.request(s))).toEqual([0, 0, 1, 1, 1]);
    expect(sim.result().evictedBlocks).toBe(2);
    expect(sim.cached).toBe(4);
  });

  test("capacity 0 caches nothing; empty requests count as requests", () => {
    const requests = [[1, 2], [], [1, 2], [1]].map((s) => Int32Array.from(s));
    const result = simulatePrefixCache(requests, { capacityTokens: 0 });
    expect(result.hitTokens).toBe(0);
    expect(result.requests).toBe(4);
    expect(result.evictedBlocks).toBe(5);
    expect(simulatePrefixCache([], {}).hitRatio).toBe(0);
  });

  test("capacity below one block rounds down (capacity_tokens // block_tokens)", () => {
    const requests = [[1], [1]].map((s) => Int32Array.from(s));
    expect(simulatePrefixCache(requests, { capacityTokens: 255 }).hitTokens).toBe(0);
    expect(simulatePrefixCache(requests, { capacityTokens: 256 }).hitTokens).toBe(256);
  });

  test("rejects bad options", () => {
    expect(() => new PrefixCacheSimulator({ blockTokens: 0 })).toThrow(RangeError);
    expect(() => new PrefixCacheSimulator({ capacityTokens: -1 })).toThrow(RangeError);
    expect(() => new PrefixCacheSimulator({ capacityTokens: 1.5 })).toThrow(RangeError);
  });

  test("simulateContextSet equals simulatePrefixCache on the same order", () => {
    const seqs = sharingWorkload(random(3), 200, 12, 6);
    const set = contextSetFromArrays(seqs);
    const asArrays = seqs.map((_, i) => set.flat.subarray(set.offsets[i]!, set.offsets[i + 1]!));
    for (const capacityTokens of [null, 0, 256 * 10, 256 * 50]) {
      expect(simulateContextSet(set, { capacityTokens })).toEqual(simulatePrefixCache(asArrays, { capacityTokens }));
    }
  });

  test("agrees with a line-by-line port of sim.py on 300 random workloads (eviction order included)", () => {
    const rand = random(42);
    for (let round = 0; round < 300; round++) {
      const alphabet = 1 + Math.floor(rand() * 12);
      const seqs = sharingWorkload(rand, 1 + Math.floor(rand() * 150), alphabet, 1 + Math.floor(rand() * 8));
      const blockTokens = [1, 7, 256][Math.floor(rand() * 3)]!;
      const totalBlocks = seqs.reduce((sum, s) => sum + s.length, 0);
      const capacityTokens = rand() < 0.15 ? null : Math.floor(rand() * (totalBlocks + 1) * blockTokens * 0.7);
      const ours = simulatePrefixCache(seqs.map((s) => Int32Array.from(s)), { blockTokens, capacityTokens });
      expect(asSimPy(ours)).toEqual(referenceSimulate(seqs, capacityTokens, blockTokens));
    }
  });

  test("grows past its size hints (long requests, many nodes)", () => {
    const sim = new PrefixCacheSimulator({ capacityTokens: 3000 * 256 }, 1);
    const long = Int32Array.from({ length: 5000 }, (_, i) => i);
    expect(sim.request(long)).toBe(0);
    expect(sim.cached).toBe(3000);
    const seqs = sharingWorkload(random(9), 3000, 50, 12);
    const expected = referenceSimulate(seqs, 4000, 1);
    expect(asSimPy(simulatePrefixCache(seqs.map((s) => Int32Array.from(s)), { capacityTokens: 4000, blockTokens: 1 }))).toEqual(expected);
  });
});

describe("prefix-cache simulator vs. sim.py", () => {
  // Expected figures committed in test/fixtures/sim/expected.json, made by
  // `python3 test/fixtures/sim/make-expected.py`, which runs (for each entry)
  // e.g. `python3 ../shared/workloads/sim.py samples/zipf_N2000_k15.jsonl --json`.
  const fixture = JSON.parse(readFileSync(join(REPO_ROOT, "test/fixtures/sim/expected.json"), "utf8")) as {
    runs: { command: string; args: string[]; result: { block_tokens: number; unlimited: SimPyResult; limited: SimPyResult } }[];
  };

  for (const run of fixture.runs) {
    test(`fixture: ${run.command}`, () => {
      const file = run.args[0]!;
      const { set } = parseContextsJsonl(readFileSync(join(REPO_ROOT, file), "utf8"), {
        source: file,
        allowEmpty: true,
        allowRepeats: true,
      });
      const blockTokens = run.result.block_tokens;
      expect(asSimPy(simulateContextSet(set, { blockTokens }))).toEqual(run.result.unlimited);
      const capacityTokens = run.result.limited.capacity_tokens;
      expect(asSimPy(simulateContextSet(set, { blockTokens, capacityTokens }))).toEqual(run.result.limited);
    });
  }

  const sim = referenceSimulator();
  if (!sim) {
    console.warn("SKIPPED: live cross-check against sim.py (python3 or ../shared/workloads/sim.py not found)");
  }
  test.skipIf(!sim)("live cross-check: random workloads and capacities through python3 sim.py", () => {
    const folder = tempFolder("ctxr-sim-");
    try {
      const rand = random(7);
      for (let round = 0; round < 12; round++) {
        const seqs = sharingWorkload(rand, 50 + Math.floor(rand() * 250), 2 + Math.floor(rand() * 20), 10);
        const blockTokens = [1, 16, 256][round % 3]!;
        const totalBlocks = seqs.reduce((sum, s) => sum + s.length, 0);
        const capacityTokens = Math.floor(rand() * totalBlocks * blockTokens * 0.5);
        // Mix the two line forms and string ids (1 and "1" are different blocks).
        const lines = seqs.map((s, i) => {
          const blocks = s.map((b) => (b % 5 === 0 ? `b${b}` : b));
          return i % 2 ? JSON.stringify(blocks) : JSON.stringify({ id: i, blocks });
        });
        const file = join(folder.path, `workload${round}.jsonl`);
        writeFileSync(file, lines.join("\n") + "\n");
        const run = runProgram([
          "python3",
          sim!,
          file,
          "--json",
          "--block-tokens",
          String(blockTokens),
          "--capacity-tokens",
          String(capacityTokens),
        ]);
        expect(run.code).toBe(0);
        const expected = JSON.parse(run.stdout) as { unlimited: SimPyResult; limited: SimPyResult };
        const { set } = parseContextsJsonl(lines.join("\n"), { allowEmpty: true, allowRepeats: true });
        expect(asSimPy(simulateContextSet(set, { blockTokens }))).toEqual(expected.unlimited);
        expect(asSimPy(simulateContextSet(set, { blockTokens, capacityTokens }))).toEqual(expected.limited);
      }
    } finally {
      folder.cleanup();
    }
  });
});
