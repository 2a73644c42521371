/**
 * A string-keyed memo bounded by bytes, in two generations (an approximate LRU without per-hit
 * bookkeeping): entries go into the current generation; when it holds half the budget it becomes
 * the previous one (the one before is dropped) and a fresh one starts. A hit in the previous
 * generation moves the entry into the current one, so whatever keeps being used survives.
 * At most `maxBytes` (by the callers' own estimate of each entry's size) are held.
 */
export class GenerationalMemo<V> {
  private current = new Map<string, V>();
  private previous = new Map<string, V>();
  private currentBytes = 0;
  private previousBytes = 0;

  constructor(
    private readonly maxBytes: number,
    /** An entry's size in bytes, key included. */
    private readonly sizeOf: (key: string, value: V) => number,
  ) {}

  get(key: string): V | undefined {
    const value = this.current.get(key);
    if (value !== undefined) return value;
    const old = this.previous.get(key);
    if (old !== undefined) {
      this.previous.delete(key);
      this.previousBytes -= this.sizeOf(key, old);
      this.set(key, old);
    }
    return old;
  }

  set(key: string, value: V): void {
    const bytes = this.sizeOf(key, value);
    // An entry larger than a generation is not kept (it would evict everything else).
    if (bytes > this.maxBytes / 2 || this.current.has(key)) return;
    if (this.currentBytes + bytes > this.maxBytes / 2) {
      this.previous = this.current;
      this.previousBytes = this.currentBytes;
      this.current = new Map();
      this.currentBytes = 0;
    }
    this.current.set(key, value);
    this.currentBytes += bytes;
  }

  /** The bytes held (both generations). */
  get bytes(): number {
    return this.currentBytes + this.previousBytes;
  }

  get size(): number {
    return this.current.size + this.previous.size;
  }
}
