/**
 * Binary max-heap of blocks ordered by (count desc, position sum asc, block asc).
 * Used with lazy deletion: callers compare the top's keys with the live values
 * and re-push stale entries, which is valid because keys only ever decrease.
 */
export class MaxHeap {
  private blocks = new Int32Array(64);
  private counts = new Int32Array(64);
  private positionSums = new Float64Array(64);
  size = 0;

  push(block: number, count: number, positionSum: number): void {
    if (this.size === this.blocks.length) this.grow();
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(block, count, positionSum, parent)) break;
      this.move(parent, i);
      i = parent;
    }
    this.blocks[i] = block;
    this.counts[i] = count;
    this.positionSums[i] = positionSum;
  }

  top(): number {
    return this.blocks[0]!;
  }

  topCount(): number {
    return this.counts[0]!;
  }

  topPositionSum(): number {
    return this.positionSums[0]!;
  }

  pop(): void {
    const last = --this.size;
    if (last === 0) return;
    const block = this.blocks[last]!;
    const count = this.counts[last]!;
    const positionSum = this.positionSums[last]!;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= last) break;
      const right = left + 1;
      const better = right < last && this.entryBefore(right, left) ? right : left;
      if (!this.before(this.blocks[better]!, this.counts[better]!, this.positionSums[better]!, i, block, count, positionSum)) break;
      this.move(better, i);
      i = better;
    }
    this.blocks[i] = block;
    this.counts[i] = count;
    this.positionSums[i] = positionSum;
  }

  /** Whether (block, count, positionSum) ranks before the entry at `at` (or before the given key). */
  private before(
    block: number,
    count: number,
    positionSum: number,
    at: number,
    otherBlock = this.blocks[at]!,
    otherCount = this.counts[at]!,
    otherPositionSum = this.positionSums[at]!,
  ): boolean {
    if (count !== otherCount) return count > otherCount;
    if (positionSum !== otherPositionSum) return positionSum < otherPositionSum;
    return block < otherBlock;
  }

  private entryBefore(a: number, b: number): boolean {
    return this.before(this.blocks[a]!, this.counts[a]!, this.positionSums[a]!, b);
  }

  private move(from: number, to: number): void {
    this.blocks[to] = this.blocks[from]!;
    this.counts[to] = this.counts[from]!;
    this.positionSums[to] = this.positionSums[from]!;
  }

  private grow(): void {
    const capacity = this.blocks.length * 2;
    const blocks = new Int32Array(capacity);
    blocks.set(this.blocks);
    const counts = new Int32Array(capacity);
    counts.set(this.counts);
    const positionSums = new Float64Array(capacity);
    positionSums.set(this.positionSums);
    this.blocks = blocks;
    this.counts = counts;
    this.positionSums = positionSums;
  }
}
