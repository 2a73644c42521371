/** An async queue of events with an end (or an error). */
export class EventQueue<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | null = null;
  private ended = false;
  private error: unknown = null;

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.wake();
  }

  end(error: unknown = null): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.wake();
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  async *drain(): AsyncGenerator<T> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.ended) {
        if (this.error !== null) throw this.error;
        return;
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}
