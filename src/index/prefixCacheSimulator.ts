/**
 * Prefix-cache simulator: a radix tree (trie) of block sequences with LRU
 * eviction of leaves, the model of a prefix KV cache (vLLM / SGLang style).
 *
 * It reproduces shared/workloads/sim.py exactly, eviction order included:
 *
 *   for each request, in order:
 *     clock += 1
 *     hit = the longest prefix of the request already in the trie (every node on
 *           it gets last = clock); the rest of the request is inserted (last = clock)
 *     if the request's last node is a leaf, push (last, tiebreak++, node) on a heap
 *     while cached blocks > capacity_tokens // block_tokens and the heap is not empty:
 *       pop the smallest (last, tiebreak); skip it when the node is gone or has
 *       children; push it again with a new tiebreak when its `last` changed since;
 *       else evict it, and push its parent when that became a leaf (not the root).
 *
 * hit ratio = hit tokens / total tokens, hit tokens = hit blocks * block_tokens.
 *
 * Nodes and the child table live in typed arrays: nodes are numbers (0 is the root); an evicted
 * node's number is reused, and its generation counter is bumped, so a heap entry
 * made for an evicted node is recognised as stale (sim.py's `alive` flag) by its
 * generation. Children are found through one open-addressing hash table keyed by
 * (parent, block). Memory stays proportional to the cached blocks, not to all
 * blocks ever inserted.
 */
import { BinaryHeap } from "../collections/binaryHeap.ts";
import type { ContextSet } from "./contextSet.ts";

export interface PrefixCacheOptions {
  /** Tokens per block (default 256). */
  blockTokens?: number;
  /** Cache capacity in tokens; undefined or null means unlimited. */
  capacityTokens?: number | null;
}

export interface PrefixCacheResult {
  requests: number;
  totalTokens: number;
  hitTokens: number;
  /** hitTokens / totalTokens (0 when there are no tokens). */
  hitRatio: number;
  capacityTokens: number | null;
  evictedBlocks: number;
}

const ROOT = 0;
const EMPTY = -1;
const NODE_STRIDE = 8;
const PARENT = 0;
const BLOCK = 1;
const LAST = 2;
const CHILDREN = 3;
const GENERATION = 4;

/** A heap entry: stale when the node's generation moved on (it was evicted) or it got children. */
interface LeafEntry {
  last: number;
  tiebreak: number;
  node: number;
  generation: number;
}

export class PrefixCacheSimulator {
  readonly blockTokens: number;
  readonly capacityTokens: number | null;
  private readonly capacityBlocks: number;

  /**
   * Node records, NODE_STRIDE ints each (one cache line holds two): parent, block,
   * last access (the request clock), child count, generation (bumped when the node
   * is evicted, so that older heap entries for its number are stale). 0 is the root.
   */
  private nodes: Int32Array;
  private nodeCount = 1;
  private freeNodes: Int32Array;
  private freeCount = 0;

  // Child table: slot -> node, keyed by the node's (parent, block); linear probing.
  private table: Int32Array;
  private tableMask: number;
  private tableUsed = 0;

  /** Leaves by (last, tiebreak): sim.py's heap of (last, tiebreak, node). */
  private readonly leaves = new BinaryHeap<LeafEntry>(
    (a, b) => a.last < b.last || (a.last === b.last && a.tiebreak < b.tiebreak),
  );
  private tiebreak = 0;

  private clock = 0;
  private cachedBlocks = 0;
  private requestCount = 0;
  private totalTokens = 0;
  private hitTokens = 0;
  private evictedBlocks = 0;

  /** expectedBlocks: a sizing hint (total blocks of all requests); arrays grow as needed. */
  constructor(options: PrefixCacheOptions = {}, expectedBlocks = 1024) {
    const blockTokens = options.blockTokens ?? 256;
    if (!Number.isInteger(blockTokens) || blockTokens <= 0) {
      throw new RangeError(`blockTokens must be a positive integer, got ${blockTokens}`);
    }
    const capacity = options.capacityTokens ?? null;
    if (capacity !== null && (!Number.isInteger(capacity) || capacity < 0)) {
      throw new RangeError(`capacityTokens must be a non-negative integer, got ${capacity}`);
    }
    this.blockTokens = blockTokens;
    this.capacityTokens = capacity;
    this.capacityBlocks = capacity === null ? Infinity : Math.floor(capacity / blockTokens);

    // Live nodes: at most all blocks, and with a limit at most the capacity plus one
    // request's worth (arrays grow when a request is longer than 1024 blocks).
    let live = Math.max(16, expectedBlocks);
    if (capacity !== null) live = Math.min(live, this.capacityBlocks + 1024);
    const nodes = live + 1;
    this.nodes = new Int32Array(nodes * NODE_STRIDE);
    this.freeNodes = new Int32Array(capacity === null ? 16 : nodes);

    const slots = nextPowerOfTwo(Math.max(64, live * 2));
    this.table = new Int32Array(slots).fill(EMPTY);
    this.tableMask = slots - 1;

  }

  /** Serves one request (dense block numbers, int32); returns its hit blocks. */
  request(blocks: ArrayLike<number>): number {
    return this.requestRange(blocks, 0, blocks.length);
  }

  /** Serves the request blocks[start .. end) (e.g. one context of a flat array). */
  requestRange(blocks: ArrayLike<number>, start: number, end: number): number {
    const clock = ++this.clock;
    this.requestCount++;
    this.totalTokens += (end - start) * this.blockTokens;

    let node = ROOT;
    let i = start;
    while (i < end) {
      const child = this.findChild(node, blocks[i]!);
      if (child === EMPTY) break;
      this.nodes[child * NODE_STRIDE + LAST] = clock;
      node = child;
      i++;
    }
    const hitBlocks = i - start;
    this.hitTokens += hitBlocks * this.blockTokens;

    while (i < end) {
      node = this.addChild(node, blocks[i]!, clock);
      this.cachedBlocks++;
      i++;
    }
    const at = node * NODE_STRIDE;
    if (node !== ROOT && this.nodes[at + CHILDREN] === 0) this.pushLeaf(node);

    if (this.cachedBlocks > this.capacityBlocks) this.evict();
    return hitBlocks;
  }

  result(): PrefixCacheResult {
    return {
      requests: this.requestCount,
      totalTokens: this.totalTokens,
      hitTokens: this.hitTokens,
      hitRatio: this.totalTokens ? this.hitTokens / this.totalTokens : 0,
      capacityTokens: this.capacityTokens,
      evictedBlocks: this.evictedBlocks,
    };
  }

  /** Blocks currently cached (trie nodes other than the root). */
  get cached(): number {
    return this.cachedBlocks;
  }

  private evict(): void {
    const nodes = this.nodes; // evict() adds no nodes, so the array is not replaced
    while (this.cachedBlocks > this.capacityBlocks && this.leaves.size > 0) {
      const { last, node: victim, generation } = this.leaves.pop()!;
      const at = victim * NODE_STRIDE;
      // Stale: evicted since (sim.py: not alive), or not a leaf any more.
      if (nodes[at + GENERATION] !== generation || nodes[at + CHILDREN] !== 0) continue;
      if (nodes[at + LAST] !== last) {
        this.pushLeaf(victim);
        continue;
      }
      const parent = nodes[at + PARENT]!;
      this.removeSlot(parent, nodes[at + BLOCK]!, victim);
      nodes[at + GENERATION]!++;
      this.freeNode(victim);
      this.cachedBlocks--;
      this.evictedBlocks++;
      const parentAt = parent * NODE_STRIDE;
      if (--nodes[parentAt + CHILDREN]! === 0 && parent !== ROOT) this.pushLeaf(parent);
    }
  }

  /** Puts a leaf on the heap with its last access and generation as they are now. */
  private pushLeaf(node: number): void {
    const at = node * NODE_STRIDE;
    this.leaves.push({ last: this.nodes[at + LAST]!, tiebreak: ++this.tiebreak, node, generation: this.nodes[at + GENERATION]! });
  }

  // ---- nodes ----

  private addChild(parent: number, block: number, clock: number): number {
    let node: number;
    if (this.freeCount > 0) {
      node = this.freeNodes[--this.freeCount]!;
    } else {
      if ((this.nodeCount + 1) * NODE_STRIDE > this.nodes.length) {
        this.nodes = grow(this.nodes, new Int32Array(this.nodes.length * 2));
      }
      node = this.nodeCount++;
    }
    const nodes = this.nodes;
    const at = node * NODE_STRIDE;
    nodes[at + PARENT] = parent;
    nodes[at + BLOCK] = block;
    nodes[at + LAST] = clock;
    nodes[at + CHILDREN] = 0;
    nodes[parent * NODE_STRIDE + CHILDREN]!++;
    if ((this.tableUsed + 1) * 2 > this.table.length) this.growTable();
    this.insertSlot(parent, block, node);
    this.tableUsed++;
    return node;
  }

  private freeNode(node: number): void {
    if (this.freeCount === this.freeNodes.length) {
      this.freeNodes = grow(this.freeNodes, new Int32Array(this.freeNodes.length * 2));
    }
    this.freeNodes[this.freeCount++] = node;
  }

  // ---- child table ----

  private slotOf(parent: number, block: number): number {
    let h = Math.imul(parent, 0x9e3779b1) ^ Math.imul(block ^ (block >>> 16), 0x85ebca6b);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 13;
    return h & this.tableMask;
  }

  private findChild(parent: number, block: number): number {
    const table = this.table;
    const nodes = this.nodes;
    const mask = this.tableMask;
    let slot = this.slotOf(parent, block);
    for (;;) {
      const node = table[slot]!;
      if (node === EMPTY) return EMPTY;
      const at = node * NODE_STRIDE;
      if (nodes[at + BLOCK] === block && nodes[at + PARENT] === parent) return node;
      slot = (slot + 1) & mask;
    }
  }

  private insertSlot(parent: number, block: number, node: number): void {
    const table = this.table;
    const mask = this.tableMask;
    let slot = this.slotOf(parent, block);
    while (table[slot] !== EMPTY) slot = (slot + 1) & mask;
    table[slot] = node;
  }

  /** Deletes a node's slot with backward-shift deletion (no tombstones). */
  private removeSlot(parent: number, block: number, node: number): void {
    const table = this.table;
    const nodes = this.nodes;
    const mask = this.tableMask;
    let hole = this.slotOf(parent, block);
    while (table[hole] !== node) hole = (hole + 1) & mask;
    let next = (hole + 1) & mask;
    for (;;) {
      const moved = table[next]!;
      if (moved === EMPTY) break;
      const at = moved * NODE_STRIDE;
      const home = this.slotOf(nodes[at + PARENT]!, nodes[at + BLOCK]!);
      // Move the entry into the hole unless its home lies cyclically in (hole, next].
      if (((next - home) & mask) >= ((next - hole) & mask)) {
        table[hole] = moved;
        hole = next;
      }
      next = (next + 1) & mask;
    }
    table[hole] = EMPTY;
    this.tableUsed--;
  }

  private growTable(): void {
    const old = this.table;
    const nodes = this.nodes;
    const slots = old.length * 2;
    this.table = new Int32Array(slots).fill(EMPTY);
    this.tableMask = slots - 1;
    for (let s = 0; s < old.length; s++) {
      const node = old[s]!;
      if (node !== EMPTY) this.insertSlot(nodes[node * NODE_STRIDE + PARENT]!, nodes[node * NODE_STRIDE + BLOCK]!, node);
    }
  }
}

/** Simulates requests given as sequences of dense block numbers, in the given order. */
export function simulatePrefixCache(
  requests: readonly ArrayLike<number>[],
  options: PrefixCacheOptions = {},
): PrefixCacheResult {
  let total = 0;
  for (const r of requests) total += r.length;
  const simulator = new PrefixCacheSimulator(options, total);
  for (const r of requests) simulator.request(r);
  return simulator.result();
}

/** Simulates the contexts of a ContextSet as requests, in their order in the set. */
export function simulateContextSet(set: ContextSet, options: PrefixCacheOptions = {}): PrefixCacheResult {
  const simulator = new PrefixCacheSimulator(options, set.flat.length);
  const { flat, offsets } = set;
  for (let i = 0; i < set.size; i++) simulator.requestRange(flat, offsets[i]!, offsets[i + 1]!);
  return simulator.result();
}

function nextPowerOfTwo(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

function grow<T extends Int32Array | Float64Array | Uint8Array>(old: T, fresh: T): T {
  fresh.set(old as never);
  return fresh;
}
