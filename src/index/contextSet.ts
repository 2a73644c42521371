/**
 * A batch of contexts with block ids interned to dense integers 0..blockCount-1.
 *
 * Every algorithm in src/index works on this form: one flat Int32Array of block
 * numbers plus offsets, so that kernels (TS or WASM) can take whole batches.
 */
export type BlockId = number | string;

export interface ContextSet {
  /** Number of contexts. */
  readonly size: number;
  /** Concatenated dense block numbers of all contexts, each in its original order. */
  readonly flat: Int32Array;
  /** Context i occupies flat[offsets[i] .. offsets[i+1]). Length size+1. */
  readonly offsets: Int32Array;
  /** Dense block number -> the block id as the user wrote it. */
  readonly blockIds: BlockId[];
}

/** Interns user block ids; 1 and "1" are different blocks. */
export class BlockInterner {
  private readonly numbers = new Map<number, number>();
  private readonly strings = new Map<string, number>();
  readonly blockIds: BlockId[] = [];

  intern(id: BlockId): number {
    const table = typeof id === "number" ? this.numbers : this.strings;
    let dense = (table as Map<BlockId, number>).get(id);
    if (dense === undefined) {
      dense = this.blockIds.length;
      (table as Map<BlockId, number>).set(id, dense);
      this.blockIds.push(id);
    }
    return dense;
  }
}

/** Builds a ContextSet incrementally; used by parsers so ids are interned once. */
export class ContextSetBuilder {
  private readonly interner = new BlockInterner();
  private flat = new Int32Array(1024);
  private length = 0;
  private readonly offsets: number[] = [0];

  /** Appends one context; returns its dense block numbers' start offset. */
  add(blocks: readonly BlockId[]): void {
    this.reserve(blocks.length);
    for (const id of blocks) this.flat[this.length++] = this.interner.intern(id);
    this.offsets.push(this.length);
  }

  get size(): number {
    return this.offsets.length - 1;
  }

  /** Distinct blocks so far. */
  get blockCount(): number {
    return this.interner.blockIds.length;
  }

  /** Dense numbers of the context being validated: the last one added. */
  lastContext(): Int32Array {
    const start = this.offsets[this.offsets.length - 2]!;
    return this.flat.subarray(start, this.length);
  }

  build(): ContextSet {
    return {
      size: this.size,
      flat: this.flat.slice(0, this.length),
      offsets: Int32Array.from(this.offsets),
      blockIds: this.interner.blockIds,
    };
  }

  private reserve(extra: number): void {
    if (this.length + extra <= this.flat.length) return;
    let capacity = this.flat.length * 2;
    while (capacity < this.length + extra) capacity *= 2;
    const grown = new Int32Array(capacity);
    grown.set(this.flat.subarray(0, this.length));
    this.flat = grown;
  }
}

export function contextSetFromArrays(contexts: readonly (readonly BlockId[])[]): ContextSet {
  const builder = new ContextSetBuilder();
  for (const blocks of contexts) builder.add(blocks);
  return builder.build();
}

export function contextBlocks(set: ContextSet, index: number): Int32Array {
  return set.flat.subarray(set.offsets[index]!, set.offsets[index + 1]!);
}

export function contextLength(set: ContextSet, index: number): number {
  return set.offsets[index + 1]! - set.offsets[index]!;
}

export function blockCount(set: ContextSet): number {
  return set.blockIds.length;
}
