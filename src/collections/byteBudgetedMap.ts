/**
 * Entries by key, each counting its `bytes` against a capacity, kept in the order they were set
 * (a replaced entry moves to the end). It only keeps count: going over capacity is allowed, and
 * overflowBytes() says how much must leave; the owner chooses what (by its own priority).
 */
export class ByteBudgetedMap<E extends { readonly bytes: number }> {
  private readonly entries = new Map<string, E>();
  private used = 0;

  /** `what` names the owner in the error for a bad capacity. */
  constructor(readonly capacityBytes: number, what = "byte budget") {
    if (!(capacityBytes >= 0)) throw new RangeError(`${what}: bad capacity ${capacityBytes}`);
  }

  /** Whether an entry of `bytes` can be held at all (it alone is within the capacity). */
  fits(bytes: number): boolean {
    return bytes <= this.capacityBytes;
  }

  /** Sets (or replaces) the entry of `key`; it becomes the most recently set. */
  set(key: string, entry: E): void {
    this.delete(key);
    this.entries.set(key, entry);
    this.used += entry.bytes;
  }

  get(key: string): E | undefined {
    return this.entries.get(key);
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Removes the entry of `key`; returns it, or undefined when there was none. */
  delete(key: string): E | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    this.used -= entry.bytes;
    return entry;
  }

  clear(): void {
    this.entries.clear();
    this.used = 0;
  }

  /** The keys, least recently set first. */
  keys(): string[] {
    return [...this.entries.keys()];
  }

  get size(): number {
    return this.entries.size;
  }

  /** The sum of the entries' bytes. */
  get bytesUsed(): number {
    return this.used;
  }

  /** How many bytes must leave to be within capacity (0 when within). */
  overflowBytes(): number {
    return Math.max(0, this.used - this.capacityBytes);
  }
}
