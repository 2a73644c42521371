/**
 * One step of the greedy prefix trie: partition a group of contexts by the
 * blocks they still hold (blocks not yet placed in their prefix).
 *
 * Greedy set cover: the block held by the most contexts takes all of them;
 * the rest compete for the next block, and so on, until no block is held by
 * two remaining contexts. With lookahead L > 0, the L best candidates at each
 * pick are compared by the hits their group would gain one level further down
 * (a plain greedy partition of that group), which avoids picking a popular block
 * whose contexts then share nothing more.
 *
 * Ties: more contexts first, then the smaller position sum (blocks the retriever
 * ranked earlier), then the lower block number — so results are deterministic.
 */
import { BinaryHeap } from "../collections/binaryHeap.ts";

export interface BlockGroup {
  readonly block: number;
  readonly members: Int32Array;
}

export interface Partition {
  readonly groups: BlockGroup[];
  /** Contexts that share no remaining block with another context of the group. */
  readonly leftovers: Int32Array;
}

export class GreedyPartitioner {
  private readonly count: Int32Array;
  private readonly positionSum: Float64Array;
  private readonly postingStart: Int32Array;
  private readonly postingFill: Int32Array;
  private readonly touched: Int32Array;
  private readonly assigned: Int32Array;
  private stamp = 0;
  /**
   * Blocks by (count desc, position sum asc, block asc) as they were when pushed (see popFresh).
   * A block is on the heap at most once, so its keys at push time are kept per block.
   */
  private readonly heap = new BinaryHeap<number>((a, b) => this.ranksBefore(a, b));
  private readonly pushedCount: Int32Array;
  private readonly pushedPositionSum: Float64Array;
  private evaluator: GreedyPartitioner | undefined;

  constructor(
    private readonly flat: Int32Array,
    private readonly offsets: Int32Array,
    /** Flat positions already placed in their context's prefix. */
    private readonly taken: Uint8Array,
    blockCount: number,
    private readonly lookahead = 0,
  ) {
    this.count = new Int32Array(blockCount);
    this.positionSum = new Float64Array(blockCount);
    this.postingStart = new Int32Array(blockCount);
    this.postingFill = new Int32Array(blockCount);
    this.touched = new Int32Array(blockCount);
    this.assigned = new Int32Array(offsets.length - 1);
    this.pushedCount = new Int32Array(blockCount);
    this.pushedPositionSum = new Float64Array(blockCount);
  }

  /**
   * Partitions `contexts`, ignoring taken positions and `excluded` (a block about
   * to be placed). Groups come out in pick order.
   */
  partition(contexts: Int32Array, excluded = -1): Partition {
    const { flat, offsets, taken, count, positionSum, postingStart, postingFill, touched, assigned, heap } = this;
    const stamp = ++this.stamp;

    let touchedCount = 0;
    for (let i = 0; i < contexts.length; i++) {
      const c = contexts[i]!;
      const start = offsets[c]!;
      const end = offsets[c + 1]!;
      for (let f = start; f < end; f++) {
        const b = flat[f]!;
        if (taken[f] || b === excluded) continue;
        if (count[b] === 0) touched[touchedCount++] = b;
        count[b]!++;
        positionSum[b]! += f - start;
      }
    }

    heap.clear();
    let postingTotal = 0;
    for (let t = 0; t < touchedCount; t++) {
      const b = touched[t]!;
      postingStart[b] = postingTotal;
      postingFill[b] = postingTotal;
      if (count[b]! >= 2) {
        postingTotal += count[b]!;
        this.pushBlock(b);
      }
    }
    const postings = new Int32Array(postingTotal);
    for (let i = 0; i < contexts.length; i++) {
      const c = contexts[i]!;
      const start = offsets[c]!;
      const end = offsets[c + 1]!;
      for (let f = start; f < end; f++) {
        const b = flat[f]!;
        if (taken[f] || b === excluded) continue;
        if (count[b]! >= 2) postings[postingFill[b]!++] = c;
      }
    }

    const groups: BlockGroup[] = [];
    const candidates: number[] = [];
    let remaining = contexts.length;
    while (remaining > 0) {
      candidates.length = 0;
      // A block every remaining context holds goes first: nothing can beat sharing it.
      const want = this.lookahead > 0 && !this.heldByAll(remaining) ? this.lookahead : 1;
      while (candidates.length < want && this.popFresh()) {
        candidates.push(heap.pop()!);
      }
      if (candidates.length === 0) break;
      const block = candidates.length === 1 ? candidates[0]! : this.bestByLookahead(candidates, postings, stamp);
      for (const other of candidates) if (other !== block) this.pushBlock(other);

      const members = new Int32Array(count[block]!);
      let m = 0;
      for (let p = postingStart[block]!; p < postingFill[block]!; p++) {
        const c = postings[p]!;
        if (assigned[c] === stamp) continue;
        assigned[c] = stamp;
        members[m++] = c;
        const start = offsets[c]!;
        const end = offsets[c + 1]!;
        for (let f = start; f < end; f++) {
          const b = flat[f]!;
          if (taken[f] || b === excluded) continue;
          count[b]!--;
          positionSum[b]! -= f - start;
        }
      }
      remaining -= m;
      groups.push({ block, members });
    }

    const leftovers = new Int32Array(remaining);
    let l = 0;
    for (let i = 0; i < contexts.length; i++) if (assigned[contexts[i]!] !== stamp) leftovers[l++] = contexts[i]!;

    for (let t = 0; t < touchedCount; t++) {
      const b = touched[t]!;
      count[b] = 0;
      positionSum[b] = 0;
    }
    return { groups, leftovers };
  }

  private heldByAll(remaining: number): boolean {
    return this.popFresh() && this.pushedCount[this.heap.peek()!] === remaining;
  }

  /** Drops stale heap entries (re-pushing them with live keys); false when no block is shared any more. */
  private popFresh(): boolean {
    const { heap, count, positionSum } = this;
    for (let b = heap.peek(); b !== undefined; b = heap.peek()) {
      if (count[b] === this.pushedCount[b] && positionSum[b] === this.pushedPositionSum[b]) return true;
      heap.pop();
      if (count[b]! >= 2) this.pushBlock(b);
    }
    return false;
  }

  private pushBlock(block: number): void {
    this.pushedCount[block] = this.count[block]!;
    this.pushedPositionSum[block] = this.positionSum[block]!;
    this.heap.push(block);
  }

  private ranksBefore(a: number, b: number): boolean {
    const countA = this.pushedCount[a]!;
    const countB = this.pushedCount[b]!;
    if (countA !== countB) return countA > countB;
    const sumA = this.pushedPositionSum[a]!;
    const sumB = this.pushedPositionSum[b]!;
    if (sumA !== sumB) return sumA < sumB;
    return a < b;
  }

  private bestByLookahead(candidates: number[], postings: Int32Array, stamp: number): number {
    this.evaluator ??= new GreedyPartitioner(this.flat, this.offsets, this.taken, this.count.length, 0);
    let best = candidates[0]!;
    let bestValue = -1;
    for (const candidate of candidates) {
      const members = new Int32Array(this.count[candidate]!);
      let m = 0;
      for (let p = this.postingStart[candidate]!; p < this.postingFill[candidate]!; p++) {
        const c = postings[p]!;
        if (this.assigned[c] !== stamp) members[m++] = c;
      }
      const { groups } = this.evaluator.partition(members, candidate);
      let value = members.length - 1;
      for (const group of groups) value += group.members.length - 1;
      if (value > bestValue) {
        bestValue = value;
        best = candidate;
      }
    }
    return best;
  }
}

