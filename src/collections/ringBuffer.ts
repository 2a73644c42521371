/** The last `capacity` items pushed, oldest first; a push beyond capacity drops the oldest. */
export class RingBuffer<T> {
  private readonly items: (T | undefined)[];
  private next = 0;
  private size = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`ring buffer capacity must be a positive integer, got ${capacity}`);
    this.items = new Array<T | undefined>(capacity);
  }

  get length(): number {
    return this.size;
  }

  push(item: T): void {
    this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
    if (this.size < this.capacity) this.size++;
  }

  /** The items, oldest first. */
  toArray(): T[] {
    const start = (this.next - this.size + this.capacity) % this.capacity;
    const out: T[] = [];
    for (let i = 0; i < this.size; i++) out.push(this.items[(start + i) % this.capacity] as T);
    return out;
  }

  clear(): void {
    this.items.fill(undefined);
    this.next = 0;
    this.size = 0;
  }
}
