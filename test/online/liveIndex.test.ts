import { describe, expect, test } from "bun:test";
import { LiveContextIndex, type LiveNode } from "../../src/online/liveIndex.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";

/** Checks every structural invariant of the index against a model of the live contexts. */
function checkInvariants(index: LiveContextIndex, model: Map<string, number[]>): void {
  let nodes = 0;
  let tokens = 0;
  let contexts = 0;
  const stack: LiveNode[] = [index.root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    nodes++;
    expect(node.alive).toBe(true);
    if (node !== index.root) {
      const parent = node.parent!;
      expect(node.edge.length).toBeGreaterThan(0);
      expect(parent.children.get(node.edge[0]!)).toBe(node);
      expect(node.depth).toBe(parent.depth + node.edge.length);
      // The node's blocks begin with its parent's blocks.
      expect(Array.from(index.sequence(node).subarray(0, parent.depth))).toEqual(Array.from(index.sequence(parent)));
      let edgeTokens = 0;
      for (const b of node.edge) edgeTokens += index.tokensOf(b);
      expect(node.edgeTokens).toBe(edgeTokens);
      tokens += edgeTokens;
      // Pruned and compact: no empty leaf, no pass-through node.
      expect(node.requestIds.size + node.children.size).toBeGreaterThan(0);
      if (node.requestIds.size === 0) expect(node.children.size).not.toBe(1);
    }
    // The search path leads back to the node.
    expect(index.nodeAtPath(index.searchPath(node))).toBe(node);
    const slots = new Set([...node.children.values()].map((c) => c.slot));
    expect(slots.size).toBe(node.children.size);
    for (const id of node.requestIds) {
      contexts++;
      expect(index.nodeOfRequest(id)).toBe(node);
      expect(Array.from(index.sequence(node))).toEqual(model.get(id)!);
    }
    stack.push(...node.children.values());
  }
  expect(index.nodeCount).toBe(nodes);
  expect(index.tokens).toBe(tokens);
  expect(index.contextCount).toBe(contexts);
  expect(contexts).toBe(model.size);
}

function randomContext(random: () => number, corpus: number, maxLength: number): number[] {
  const length = 1 + Math.floor(random() * maxLength);
  const seen = new Set<number>();
  while (seen.size < Math.min(length, corpus)) seen.add(Math.floor(Math.pow(random(), 2) * corpus));
  return [...seen];
}

/** Reorders like the service: the reusable prefix first, then the rest in the given order. */
function reorder(index: LiveContextIndex, blocks: number[]): number[] {
  const { prefix } = index.search(blocks);
  const inPrefix = new Set(prefix);
  for (const b of prefix) expect(blocks).toContain(b);
  return [...prefix, ...blocks.filter((b) => !inPrefix.has(b))];
}

describe("LiveContextIndex", () => {
  test("search, insert with split, search paths and removal with pruning", () => {
    const index = new LiveContextIndex();
    const tokens = [10, 10, 10, 10, 10, 10, 10, 10, 10, 10];
    index.insert([1, 2, 3], tokens, "a", 1);
    const match = index.search([3, 9, 1, 2]);
    expect(Array.from(match.prefix)).toEqual([1, 2, 3]);
    expect(index.search([2, 1, 7]).partialLength).toBe(2); // holds 1, 2 but not 3
    const b = index.insert([1, 2, 7], tokens, "b", 2);
    expect(b.reusedBlocks).toBe(2);
    expect(b.reusedTokens).toBe(20);
    expect(index.nodeCount).toBe(4); // root, [1,2], [3], [7]
    expect(index.tokens).toBe(40);
    expect(index.searchPath(index.nodeOfRequest("a")!)).toEqual([0, 0]);
    expect(index.searchPath(index.nodeOfRequest("b")!)).toEqual([0, 1]);
    expect(index.remove("a")).toBe(true);
    expect(index.remove("a")).toBe(false);
    // [1,2] with one child left merges back: root -> [1,2,7].
    expect(index.nodeCount).toBe(2);
    expect(index.searchPath(index.nodeOfRequest("b")!)).toEqual([0]);
    expect(index.tokens).toBe(30);
  });

  test("never descends into a child whose edge the context lacks", () => {
    const index = new LiveContextIndex();
    index.insert([5, 6, 7, 8], [1, 1, 1, 1], "x", 1);
    const match = index.search([5, 6, 8]);
    expect(Array.from(match.prefix)).toEqual([5, 6]);
    expect(match.node).toBe(index.root);
    const inserted = index.insert(reorder(index, [5, 6, 8]), [1, 1, 1], "y", 2);
    expect(Array.from(index.sequence(inserted.node))).toEqual([5, 6, 8]);
    expect(index.search([8, 5]).prefix.length).toBe(1);
  });

  test("a node with thousands of children: lookups stay correct", () => {
    const index = new LiveContextIndex();
    for (let i = 0; i < 3000; i++) index.insert([i, 100_000 + i], [1, 1], `r${i}`, i);
    expect(index.root.children.size).toBe(3000);
    expect(Array.from(index.search([2999, 100_000 + 2999, 7]).prefix)).toEqual([2999, 100_000 + 2999]);
  });

  test("capacity model: least recently used leaves go first", () => {
    const index = new LiveContextIndex({ capacityTokens: 30 });
    index.insert([1, 2], [10, 10], "old", 1);
    index.insert([3], [10], "mid", 2);
    index.touch(index.nodeOfRequest("old")!, 3);
    index.insert([4, 5], [10, 10], "new", 4);
    expect(index.evictOverCapacity()).toEqual(["mid", "old"]);
    expect(index.tokens).toBe(20);
    expect(index.hasRequest("new")).toBe(true);
  });

  test("TTL: contexts unused for the TTL expire", () => {
    const index = new LiveContextIndex({ ttlMs: 100 });
    index.insert([1, 2], [1, 1], "a", 0);
    index.insert([1, 3], [1, 1], "b", 50);
    expect(index.expire(120)).toEqual(["a"]);
    expect(index.expire(200)).toEqual(["b"]);
    expect(index.contextCount).toBe(0);
    expect(index.nodeCount).toBe(1);
  });

  for (const options of [{}, { capacityTokens: 400 }, { ttlMs: 30 }, { maxBytes: 22_000 }]) {
    test(`invariants hold after every operation on random streams ${JSON.stringify(options)}`, () => {
      for (let seed = 1; seed <= 6; seed++) {
        const random = seededRandom(seed);
        const freed = new Set<number>();
        const index = new LiveContextIndex({ ...options, onBlockFreed: (block) => freed.add(block) });
        const model = new Map<string, number[]>();
        const everInserted = new Set<number>();
        let now = 0;
        for (let step = 0; step < 400; step++) {
          now += 1;
          const roll = random();
          if (roll < 0.6 || model.size === 0) {
            const id = `r${step}`;
            const blocks = reorder(index, randomContext(random, 25, 6));
            index.insert(blocks, blocks.map((b) => 1 + (b % 7)), id, now);
            model.set(id, blocks);
            for (const b of blocks) {
              freed.delete(b);
              everInserted.add(b);
            }
          } else if (roll < 0.85) {
            const ids = [...model.keys()];
            const id = ids[Math.floor(random() * ids.length)]!;
            expect(index.remove(id)).toBe(true);
            model.delete(id);
          } else if (roll < 0.9) {
            const ids = [...model.keys()];
            const id = ids[Math.floor(random() * ids.length)]!;
            index.touch(index.nodeOfRequest(id)!, now);
          } else {
            expect(index.remove(`missing${step}`)).toBe(false);
          }
          for (const id of [...index.evictOverCapacity(), ...index.expire(now)]) {
            expect(model.has(id)).toBe(true);
            model.delete(id);
          }
          if (options.capacityTokens !== undefined) expect(index.tokens).toBeLessThanOrEqual(options.capacityTokens);
          if (options.maxBytes !== undefined) expect(index.bytes).toBeLessThanOrEqual(options.maxBytes);
          checkInvariants(index, model);
          // A block is freed exactly when no live context holds it: no leak, no block freed while in use.
          const live = new Set([...model.values()].flat());
          for (const b of everInserted) expect(freed.has(b)).toBe(!live.has(b));
        }
      }
    });
  }

  test("byte budget: least recently used contexts go; bytes return to the empty index's after removal", () => {
    const empty = new LiveContextIndex().bytes;
    const index = new LiveContextIndex({ maxBytes: empty + 20_000 });
    for (let i = 0; i < 200; i++) index.insert([3 * i, 3 * i + 1, 3 * i + 2], [1, 1, 1], `r${i}`, i);
    const evicted = index.evictOverCapacity();
    expect(evicted.length).toBeGreaterThan(0);
    // Oldest first.
    expect(evicted[0]).toBe("r0");
    expect(index.hasRequest("r199")).toBe(true);
    expect(index.bytes).toBeLessThanOrEqual(empty + 20_000);
    expect(index.evictedForByteBudget).toBe(evicted.length);
    for (const [id] of [...index.contexts()]) index.remove(id);
    // Per-block arrays keep their grown size; nodes and ids are gone.
    const unbudgeted = new LiveContextIndex();
    for (let i = 0; i < 200; i++) unbudgeted.insert([3 * i, 3 * i + 1, 3 * i + 2], [1, 1, 1], `r${i}`, i);
    for (let i = 0; i < 200; i++) unbudgeted.remove(`r${i}`);
    expect(unbudgeted.nodeCount).toBe(1);
    unbudgeted.clear();
    expect(unbudgeted.bytes).toBe(empty);
  });

  test("the owner's bytes count against the budget", () => {
    let external = 0;
    const index = new LiveContextIndex({ maxBytes: 1_000_000, externalBytes: () => external });
    for (let i = 0; i < 10; i++) index.insert([i], [1], `r${i}`, i);
    expect(index.evictOverCapacity()).toEqual([]);
    external = 1_000_000;
    expect(index.evictOverCapacity().length).toBe(10);
  });
});

describe("prefixTokensInOrder", () => {
  test("counts the leading blocks held in exactly the given order, across edges, and changes nothing", () => {
    const index = new LiveContextIndex();
    index.insert([1, 2, 3], [10, 20, 30], "a", 0);
    index.insert([1, 2, 4], [10, 20, 40], "b", 0);
    const nodes = index.nodeCount;
    expect(index.prefixTokensInOrder([1, 2, 3, 9], [10, 20, 30, 5])).toBe(60);
    expect(index.prefixTokensInOrder([1, 2, 4], [10, 20, 40])).toBe(70);
    expect(index.prefixTokensInOrder([2, 1, 3], [20, 10, 30])).toBe(0);
    expect(index.prefixTokensInOrder([1, 3, 2], [10, 30, 20])).toBe(10);
    expect(index.prefixTokensInOrder([], [])).toBe(0);
    expect(index.nodeCount).toBe(nodes);
  });
});
