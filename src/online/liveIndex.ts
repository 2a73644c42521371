/**
 * The live context index (ContextPilot §4.2, Algorithms 1–3): a radix tree of
 * the block sequences the inference engine has (probably) cached.
 *
 * - Each node extends its parent's blocks by a non-empty edge, so a node's
 *   blocks always begin with its parent's. Siblings start with different
 *   blocks, so children are found by their first block in O(1) — a node with
 *   thousands of children costs nothing extra.
 * - `search` takes a context as a set and descends from the root to the child
 *   offering the longest reusable prefix (ties: the smaller eq. 1 distance,
 *   then the older child); it only descends into children whose whole edge the
 *   context holds, so a context is never placed under a prefix it lacks.
 * - `insert` adds a context as an exact sequence, splitting an edge where the
 *   context leaves it; `remove` drops a request id and prunes emptied nodes,
 *   merging a node left with one child into it.
 * - Search paths are child slots from the root, computed from parent links on
 *   demand, so they are never stale after splits, merges or removals.
 * - Optional capacity model: least-recently-used leaves are evicted beyond a
 *   token budget or an estimated byte budget, and contexts unused for a TTL
 *   expire.
 * - Blocks are reference-counted by the edges holding them: `onBlockFreed`
 *   hears when the last one goes, so a key table can give the number away.
 */
import { LruLeafHeap } from "../collections/lruLeafHeap.ts";
import { BLOCK_SLOT_BYTES, EDGE_BLOCK_BYTES, estimatedStringBytes, NODE_BYTES, REQUEST_ID_BYTES } from "./memoryEstimates.ts";

export interface LiveIndexOptions {
  /** Evict least-recently-used leaves while cached tokens exceed this (null: unlimited). */
  capacityTokens?: number | null;
  /** Contexts not used for this long are evicted by `expire` (null: never). */
  ttlMs?: number | null;
  /** Evict least-recently-used leaves while the estimated heap bytes exceed this (null: unlimited). */
  maxBytes?: number | null;
  /** Position weight of the distance used to break ties (paper eq. 1). */
  alpha?: number;
  /** Called when no edge holds a block any more. */
  onBlockFreed?: ((block: number) => void) | null;
  /** Bytes the owner keeps for the index (its key table), counted against maxBytes. */
  externalBytes?: (() => number) | null;
}

export interface LiveNode {
  readonly id: number;
  parent: LiveNode | null;
  /** Stable position among the parent's children: an element of search paths. */
  slot: number;
  /** Blocks on the edge from the parent (empty only at the root). */
  edge: Int32Array;
  /** Length of the node's block sequence from the root. */
  depth: number;
  /** Tokens of the edge's blocks. */
  edgeTokens: number;
  readonly children: Map<number, LiveNode>;
  nextSlot: number;
  /** Request ids of the contexts that end exactly here. */
  readonly requestIds: Set<string>;
  lastAccess: number;
  alive: boolean;
}

export interface LiveMatch {
  /** Deepest node whose whole sequence the context holds. */
  readonly node: LiveNode;
  /** A child of `node` whose edge the context holds only the first `partialLength` blocks of. */
  readonly partialChild: LiveNode | null;
  readonly partialLength: number;
  /** The reusable prefix, in index order (node's sequence + the partial edge part). */
  readonly prefix: Int32Array;
}

export interface InsertResult {
  /** Node where the context ends. */
  readonly node: LiveNode;
  /** Leading blocks that were already in the index. */
  readonly reusedBlocks: number;
  readonly reusedTokens: number;
}

export class LiveContextIndex {
  readonly root: LiveNode;
  private readonly byRequest = new Map<string, LiveNode>();
  private tokensOfBlock = new Int32Array(1024);
  /** Edges holding each block. */
  private references = new Int32Array(1024);
  private byteTotal = 0;
  private evictedForBytes = 0;
  private nextId = 1;
  private nodeTotal = 1;
  private tokenTotal = 0;
  private contextTotal = 0;
  private readonly lru = new LruLeafHeap<LiveNode>(
    (node, lastAccess) => node.alive && node.children.size === 0 && node.parent !== null && node.lastAccess === lastAccess,
  );
  /** Whether leaves are tracked for eviction (only with a capacity or a TTL). */
  private tracksLeaves: boolean;
  /** Only a byte budget: leaves are tracked once bytes pass half of it (the heap costs a push per insert). */
  private readonly tracksLazily: boolean;
  private memberStamp = new Int32Array(1024);
  private memberPosition = new Int32Array(1024);
  private stamp = 0;
  readonly options: Required<LiveIndexOptions>;

  constructor(options: LiveIndexOptions = {}) {
    this.options = {
      capacityTokens: options.capacityTokens ?? null,
      ttlMs: options.ttlMs ?? null,
      maxBytes: options.maxBytes ?? null,
      alpha: options.alpha ?? 0.001,
      onBlockFreed: options.onBlockFreed ?? null,
      externalBytes: options.externalBytes ?? null,
    } as Required<LiveIndexOptions>;
    this.tracksLazily = this.options.capacityTokens === null && this.options.ttlMs === null && this.options.maxBytes !== null;
    this.tracksLeaves = this.options.capacityTokens !== null || this.options.ttlMs !== null;
    this.root = this.newNode(null, new Int32Array(0), 0);
  }

  get nodeCount(): number {
    return this.nodeTotal;
  }
  get contextCount(): number {
    return this.contextTotal;
  }
  /** Tokens held by the tree: every node's edge counted once. */
  get tokens(): number {
    return this.tokenTotal;
  }

  /** Estimated heap bytes: nodes, edges, request ids, per-block arrays. */
  get bytes(): number {
    return this.byteTotal + Math.max(this.tokensOfBlock.length, this.memberStamp.length) * BLOCK_SLOT_BYTES;
  }

  /** Contexts evicted because the index was over its byte budget, since it was made. */
  get evictedForByteBudget(): number {
    return this.evictedForBytes;
  }

  hasRequest(requestId: string): boolean {
    return this.byRequest.has(requestId);
  }

  nodeOfRequest(requestId: string): LiveNode | undefined {
    return this.byRequest.get(requestId);
  }

  /** Longest reusable prefix for a context given as distinct dense blocks (any order). */
  search(blocks: ArrayLike<number>): LiveMatch {
    const stamp = this.markMembers(blocks);
    const member = this.memberStamp;
    const position = this.memberPosition;
    const size = blocks.length;
    const alpha = this.options.alpha;
    let node = this.root;
    let shared = 0;
    let positionGap = 0;
    const prefix: number[] = [];

    for (;;) {
      let best: LiveNode | null = null;
      let bestLead = 0;
      let bestDistance = Infinity;
      for (let i = 0; i < size; i++) {
        const child = node.children.get(blocks[i]!);
        if (child === undefined) continue;
        const edge = child.edge;
        let lead = 0;
        while (lead < edge.length && member[edge[lead]!] === stamp) lead++;
        let overlap = shared;
        let gap = positionGap;
        for (let e = 0; e < edge.length; e++) {
          const b = edge[e]!;
          if (member[b] !== stamp) continue;
          overlap++;
          gap += Math.abs(position[b]! - (node.depth + e));
        }
        const distance = 1 - overlap / Math.max(size, child.depth) + (alpha * gap) / overlap;
        if (lead > bestLead || (lead === bestLead && (distance < bestDistance || (distance === bestDistance && child.slot < best!.slot)))) {
          best = child;
          bestLead = lead;
          bestDistance = distance;
        }
      }
      if (best === null) return { node, partialChild: null, partialLength: 0, prefix: Int32Array.from(prefix) };
      for (let e = 0; e < bestLead; e++) {
        const b = best.edge[e]!;
        prefix.push(b);
        positionGap += Math.abs(position[b]! - (node.depth + e));
      }
      shared += bestLead;
      if (bestLead < best.edge.length) {
        return { node, partialChild: best, partialLength: bestLead, prefix: Int32Array.from(prefix) };
      }
      node = best;
    }
  }

  /**
   * Tokens of the leading blocks of `blocks`, taken in exactly this order, that the index already
   * holds as a path from the root (`tokens[i]`: blocks[i]'s tokens): the prefix cache hit that
   * order would get. Nothing changes.
   */
  prefixTokensInOrder(blocks: ArrayLike<number>, tokens: ArrayLike<number>): number {
    let node = this.root;
    let i = 0;
    let reused = 0;
    while (i < blocks.length) {
      const child = node.children.get(blocks[i]!);
      if (child === undefined) break;
      const edge = child.edge;
      let j = 0;
      while (j < edge.length && i < blocks.length && edge[j] === blocks[i]) reused += tokens[i++]!, j++;
      if (j < edge.length) break;
      node = child;
    }
    return reused;
  }

  /**
   * Inserts a context as the exact sequence `blocks` (distinct dense blocks),
   * with `tokens[i]` tokens for blocks[i] (the first figure seen for a block is
   * kept). A request id already present is moved to the new context.
   */
  insert(blocks: ArrayLike<number>, tokens: ArrayLike<number>, requestId: string, now: number): InsertResult {
    if (this.byRequest.has(requestId)) this.remove(requestId);
    for (let i = 0; i < blocks.length; i++) this.learnTokens(blocks[i]!, tokens[i]!);
    let node = this.root;
    let i = 0;
    let reusedTokens = 0;
    while (i < blocks.length) {
      const child = node.children.get(blocks[i]!);
      if (child === undefined) break;
      const edge = child.edge;
      let j = 1;
      while (j < edge.length && i + j < blocks.length && edge[j] === blocks[i + j]) j++;
      if (j < edge.length) {
        node = this.split(child, j);
      } else {
        node = child;
      }
      reusedTokens += node.edgeTokens;
      i += j;
    }
    const reusedBlocks = i;
    if (i < blocks.length) {
      const edge = Int32Array.from({ length: blocks.length - i }, (_, k) => blocks[i + k]!);
      node = this.attach(node, edge);
    }
    node.requestIds.add(requestId);
    this.byRequest.set(requestId, node);
    this.contextTotal++;
    this.byteTotal += requestIdBytes(requestId);
    this.touch(node, now);
    return { node, reusedBlocks, reusedTokens };
  }

  /** Removes a context by request id; false when unknown. */
  remove(requestId: string): boolean {
    const node = this.byRequest.get(requestId);
    if (node === undefined) return false;
    this.byRequest.delete(requestId);
    node.requestIds.delete(requestId);
    this.contextTotal--;
    this.byteTotal -= requestIdBytes(requestId);
    this.prune(node);
    return true;
  }

  /** Marks the path to `node` as used now (LRU). */
  touch(node: LiveNode, now: number): void {
    for (let n: LiveNode | null = node; n !== null; n = n.parent) n.lastAccess = now;
    this.trackLeaf(node);
  }

  /** Evicts least-recently-used leaves while over the token capacity or the byte budget; returns the evicted request ids. */
  evictOverCapacity(): string[] {
    const capacity = this.options.capacityTokens;
    const evicted: string[] = [];
    if (capacity !== null) {
      while (this.tokenTotal > capacity) {
        const leaf = this.lru.pop();
        if (leaf === null) break;
        this.evictLeaf(leaf, evicted);
      }
    }
    const maxBytes = this.options.maxBytes;
    if (maxBytes !== null) {
      const before = evicted.length;
      const external = this.options.externalBytes;
      const used = () => this.bytes + (external === null ? 0 : external());
      if (this.tracksLazily && !this.tracksLeaves && used() > maxBytes / 2) {
        this.tracksLeaves = true;
        this.rebuildLru();
      }
      while (used() > maxBytes) {
        const leaf = this.lru.pop();
        if (leaf === null) break;
        this.evictLeaf(leaf, evicted);
      }
      this.evictedForBytes += evicted.length - before;
    }
    return evicted;
  }

  /** Evicts contexts whose leaves were last used before now - ttl; returns the evicted request ids. */
  expire(now: number): string[] {
    const ttl = this.options.ttlMs;
    const evicted: string[] = [];
    if (ttl === null) return evicted;
    for (;;) {
      const leaf = this.lru.peek();
      if (leaf === null || leaf.lastAccess > now - ttl) break;
      this.lru.pop();
      this.evictLeaf(leaf, evicted);
    }
    return evicted;
  }

  /** Child slots from the root down to `node`. */
  searchPath(node: LiveNode): number[] {
    const path: number[] = [];
    for (let n = node; n.parent !== null; n = n.parent) path.push(n.slot);
    return path.reverse();
  }

  /** The node a search path leads to, or undefined (ContextPilot's context traversal). */
  nodeAtPath(path: readonly number[]): LiveNode | undefined {
    let node: LiveNode | undefined = this.root;
    for (const slot of path) {
      let next: LiveNode | undefined;
      for (const child of node.children.values()) if (child.slot === slot) next = child;
      if (next === undefined) return undefined;
      node = next;
    }
    return node;
  }

  /** The node's whole block sequence from the root. */
  sequence(node: LiveNode): Int32Array {
    const out = new Int32Array(node.depth);
    for (let n: LiveNode | null = node; n !== null && n.parent !== null; n = n.parent) out.set(n.edge, n.parent.depth);
    return out;
  }

  tokensOf(block: number): number {
    return block < this.tokensOfBlock.length ? this.tokensOfBlock[block]! : 0;
  }

  /** Every context as (request id, node), depth-first, children in slot order. */
  *contexts(): Generator<[string, LiveNode]> {
    const stack: LiveNode[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      for (const id of node.requestIds) yield [id, node];
      const kids = [...node.children.values()].sort((a, b) => b.slot - a.slot);
      stack.push(...kids);
    }
  }

  /** Forgets every context; per-block arrays shrink back (onBlockFreed is not called: the owner clears its keys). */
  clear(): void {
    this.root.children.clear();
    this.root.requestIds.clear();
    this.root.nextSlot = 0;
    this.byRequest.clear();
    this.lru.clear();
    this.nodeTotal = 1;
    this.tokenTotal = 0;
    this.contextTotal = 0;
    this.byteTotal = NODE_BYTES;
    if (this.tracksLazily) this.tracksLeaves = false;
    this.tokensOfBlock = new Int32Array(1024);
    this.references = new Int32Array(1024);
    this.memberStamp = new Int32Array(1024);
    this.memberPosition = new Int32Array(1024);
  }

  private newNode(parent: LiveNode | null, edge: Int32Array, slot: number): LiveNode {
    let edgeTokens = 0;
    for (let i = 0; i < edge.length; i++) edgeTokens += this.tokensOf(edge[i]!);
    this.byteTotal += NODE_BYTES + EDGE_BLOCK_BYTES * edge.length;
    return {
      id: this.nextId++,
      parent,
      slot,
      edge,
      depth: (parent?.depth ?? 0) + edge.length,
      edgeTokens,
      children: new Map(),
      nextSlot: 0,
      requestIds: new Set(),
      lastAccess: 0,
      alive: true,
    };
  }

  private attach(parent: LiveNode, edge: Int32Array): LiveNode {
    const node = this.newNode(parent, edge, parent.nextSlot++);
    for (let i = 0; i < edge.length; i++) this.references[edge[i]!]!++;
    parent.children.set(edge[0]!, node);
    this.nodeTotal++;
    this.tokenTotal += node.edgeTokens;
    return node;
  }

  /** Splits `child`'s edge after `length` blocks; the new middle node takes its slot. */
  private split(child: LiveNode, length: number): LiveNode {
    const parent = child.parent!;
    const middle = this.newNode(parent, child.edge.slice(0, length), child.slot);
    parent.children.set(middle.edge[0]!, middle);
    child.edge = child.edge.slice(length);
    this.byteTotal -= EDGE_BLOCK_BYTES * length;
    child.edgeTokens -= middle.edgeTokens;
    child.parent = middle;
    child.slot = middle.nextSlot++;
    middle.children.set(child.edge[0]!, child);
    middle.lastAccess = child.lastAccess;
    this.nodeTotal++;
    return middle;
  }

  /** Removes emptied nodes upwards; merges a context-less node left with one child into it. */
  private prune(start: LiveNode): void {
    let node = start;
    while (node !== this.root && node.requestIds.size === 0 && node.children.size === 0) {
      const parent = node.parent!;
      parent.children.delete(node.edge[0]!);
      node.alive = false;
      this.nodeTotal--;
      this.tokenTotal -= node.edgeTokens;
      this.byteTotal -= NODE_BYTES + EDGE_BLOCK_BYTES * node.edge.length;
      this.dereference(node.edge);
      node = parent;
      this.trackLeaf(node);
    }
    if (node !== this.root && node.requestIds.size === 0 && node.children.size === 1) this.mergeOnlyChild(node);
  }

  private mergeOnlyChild(node: LiveNode): void {
    const child = node.children.values().next().value as LiveNode;
    const edge = new Int32Array(node.edge.length + child.edge.length);
    edge.set(node.edge);
    edge.set(child.edge, node.edge.length);
    node.edge = edge;
    node.edgeTokens += child.edgeTokens;
    node.depth = child.depth;
    node.children.clear();
    for (const [first, grandchild] of child.children) {
      grandchild.parent = node;
      node.children.set(first, grandchild);
    }
    node.nextSlot = child.nextSlot;
    for (const id of child.requestIds) {
      node.requestIds.add(id);
      this.byRequest.set(id, node);
    }
    node.lastAccess = Math.max(node.lastAccess, child.lastAccess);
    child.alive = false;
    this.nodeTotal--;
    this.byteTotal -= NODE_BYTES;
    this.trackLeaf(node);
  }

  private evictLeaf(leaf: LiveNode, evicted: string[]): void {
    for (const id of [...leaf.requestIds]) {
      evicted.push(id);
      this.byRequest.delete(id);
      leaf.requestIds.delete(id);
      this.contextTotal--;
      this.byteTotal -= requestIdBytes(id);
    }
    this.prune(leaf);
  }

  private trackLeaf(node: LiveNode): void {
    if (!this.tracksLeaves || node === this.root || node.children.size > 0) return;
    this.lru.push(node, node.lastAccess);
    if (this.lru.size > 4 * this.nodeTotal + 1024) this.rebuildLru();
  }

  /** Drops the heap's stale entries: one entry per live leaf. */
  private rebuildLru(): void {
    this.lru.rebuild(this.liveLeaves().map((leaf) => [leaf, leaf.lastAccess] as const));
  }

  private liveLeaves(): LiveNode[] {
    const leaves: LiveNode[] = [];
    const stack = [this.root];
    while (stack.length > 0) {
      const node = stack.pop()!;
      if (node.children.size === 0 && node !== this.root) leaves.push(node);
      for (const child of node.children.values()) stack.push(child);
    }
    return leaves;
  }

  private learnTokens(block: number, tokens: number): void {
    if (block >= this.tokensOfBlock.length) {
      let size = this.tokensOfBlock.length * 2;
      while (size <= block) size *= 2;
      this.tokensOfBlock = grown(this.tokensOfBlock, size);
      this.references = grown(this.references, size);
    }
    if (this.tokensOfBlock[block] === 0) this.tokensOfBlock[block] = tokens;
  }

  /** An edge left the tree: its blocks lose a reference; a block no edge holds is forgotten. */
  private dereference(edge: Int32Array): void {
    for (let i = 0; i < edge.length; i++) {
      const block = edge[i]!;
      if (--this.references[block]! > 0) continue;
      this.tokensOfBlock[block] = 0;
      this.options.onBlockFreed?.(block);
    }
  }

  private markMembers(blocks: ArrayLike<number>): number {
    let max = 0;
    for (let i = 0; i < blocks.length; i++) if (blocks[i]! > max) max = blocks[i]!;
    if (max >= this.memberStamp.length) {
      let size = this.memberStamp.length * 2;
      while (size <= max) size *= 2;
      const stamps = new Int32Array(size);
      stamps.set(this.memberStamp);
      this.memberStamp = stamps;
      this.memberPosition = new Int32Array(size);
    }
    const stamp = ++this.stamp;
    for (let i = 0; i < blocks.length; i++) {
      this.memberStamp[blocks[i]!] = stamp;
      this.memberPosition[blocks[i]!] = i;
    }
    return stamp;
  }
}

function grown(array: Int32Array, size: number): Int32Array<ArrayBuffer> {
  const out = new Int32Array(size);
  out.set(array);
  return out;
}

function requestIdBytes(id: string): number {
  return REQUEST_ID_BYTES + estimatedStringBytes(id);
}
