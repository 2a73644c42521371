/**
 * A binary heap over an array: the item that ranks first under `before` is on top. Pushing and
 * popping are O(log n); `reset` builds a heap from a list in O(n).
 */
export class BinaryHeap<T> {
  private items: T[] = [];

  /** `before(a, b)`: whether a comes out before b (a strict order; ties come out in any order). */
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  /** The first item, left on the heap; undefined when empty. */
  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const items = this.items;
    let i = items.length;
    items.push(item);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(item, items[parent]!)) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = item;
  }

  /** Removes and returns the first item; undefined when empty. */
  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) this.siftDown(0, last!);
    return top;
  }

  clear(): void {
    this.items.length = 0;
  }

  /** Replaces the contents with `items` (the heap keeps the array). */
  reset(items: T[]): void {
    this.items = items;
    for (let i = (items.length >> 1) - 1; i >= 0; i--) this.siftDown(i, items[i]!);
  }

  /** Places `item` at `i` or below, moving the children that rank before it up. */
  private siftDown(i: number, item: T): void {
    const items = this.items;
    const size = items.length;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= size) break;
      const right = left + 1;
      const child = right < size && this.before(items[right]!, items[left]!) ? right : left;
      if (!this.before(items[child]!, item)) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = item;
  }
}
