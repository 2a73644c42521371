/**
 * Entries (conversations) kept in least-recently-used order under a count
 * limit and an estimated byte budget. Owners account their entries' bytes as
 * they grow; `enforce` forgets the least recently used entries whole while a
 * limit is passed (the entry just used too, when it alone is over the budget).
 */
export interface BudgetedLruOptions {
  maxEntries: number;
  /** Estimated heap bytes of all entries together (null: unlimited). */
  maxBytes: number | null;
}

interface Slot<V> {
  readonly value: V;
  bytes: number;
}

export class BudgetedLru<V> {
  // Map iteration order is the LRU order: a used entry is re-inserted at the end.
  private readonly slots = new Map<string, Slot<V>>();
  private byteTotal = 0;
  private forgottenForBytes = 0;

  constructor(private readonly options: BudgetedLruOptions) {}

  get size(): number {
    return this.slots.size;
  }

  get bytes(): number {
    return this.byteTotal;
  }

  get byteLimit(): number | null {
    return this.options.maxBytes;
  }

  /** Entries forgotten because the byte budget was passed. */
  get evictedForByteBudget(): number {
    return this.forgottenForBytes;
  }

  /** The entry's value without changing its recency. */
  peek(id: string): V | undefined {
    return this.slots.get(id)?.value;
  }

  /** The entry (made with `create` and `bytes` when new), now the most recently used. */
  use(id: string, create: () => V, bytes: number): V {
    let slot = this.slots.get(id);
    if (slot === undefined) {
      slot = { value: create(), bytes };
      this.byteTotal += bytes;
    } else this.slots.delete(id);
    this.slots.set(id, slot);
    return slot.value;
  }

  /** Adds (or with a negative figure removes) bytes an entry holds. */
  grow(id: string, bytes: number): void {
    const slot = this.slots.get(id);
    if (slot === undefined) return;
    slot.bytes += bytes;
    this.byteTotal += bytes;
  }

  /** Forgets least recently used entries while over a limit; returns their ids. */
  enforce(): string[] {
    const forgotten: string[] = [];
    while (this.slots.size > this.options.maxEntries) forgotten.push(this.forgetOldest());
    while (this.options.maxBytes !== null && this.byteTotal > this.options.maxBytes && this.slots.size > 0) {
      forgotten.push(this.forgetOldest());
      this.forgottenForBytes++;
    }
    return forgotten;
  }

  forget(id: string): void {
    const slot = this.slots.get(id);
    if (slot === undefined) return;
    this.slots.delete(id);
    this.byteTotal -= slot.bytes;
  }

  clear(): void {
    this.slots.clear();
    this.byteTotal = 0;
  }

  /** Oldest first. */
  *entries(): Generator<[string, V]> {
    for (const [id, slot] of this.slots) yield [id, slot.value];
  }

  private forgetOldest(): string {
    const oldest = this.slots.keys().next().value as string;
    this.forget(oldest);
    return oldest;
  }
}
