/**
 * Big request bodies leave big garbage (the bytes, their text, the parsed
 * value, the rewritten copy), and the runtime's collector lets the heap grow
 * well past what is live before it runs. After every `everyBytes` of big
 * request bodies (`minBytes` or more each) handled, a full collection runs, so a
 * stream of multi-megabyte requests keeps the process near its live size
 * instead of several times it. Small requests never trigger it: a full
 * collection pauses the server for tens of milliseconds with a large live heap.
 */
import { collectGarbage } from "../runtime/garbageCollector.ts";

export class CollectAfterBytes {
  private sinceLast = 0;

  constructor(
    private readonly everyBytes: number,
    private readonly minBytes: number,
    // Synchronous: an asynchronous hint was measured to change nothing (scripts/bench-hostile.ts).
    private readonly collect: () => void = collectGarbage,
  ) {}

  /** Counts a handled body's bytes; collects when enough have gone by. */
  handled(bytes: number): void {
    if (bytes < this.minBytes) return;
    this.sinceLast += bytes;
    if (this.sinceLast < this.everyBytes) return;
    this.sinceLast = 0;
    this.collect();
  }
}
