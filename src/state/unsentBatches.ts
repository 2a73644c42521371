/**
 * This instance's change batches not yet in Redis, oldest first, with their size: the queue
 * that grows while Redis is unreachable. Each batch is serialized once, when queued, so its
 * bytes are known (the queue is bounded by them) and an append joins the texts of the batches it
 * carries instead of serializing them again. An append carries the oldest batches up to a byte
 * cap, so that after an outage the queue goes out in entries of a safe size, never as one
 * entry larger than Redis takes. Pure: no I/O.
 */
import type { PendingBatch } from "./pendingChanges.ts";

interface QueuedBatch {
  batch: PendingBatch;
  /** The batch's changes as JSON, without the enclosing brackets ("" for none). */
  json: string;
}

/** What one append carries: batches first..n, their changes as one JSON array. */
export interface AppendPlan {
  batches: PendingBatch[];
  first: number;
  n: number;
  /** The changes of every batch, in order, as one JSON array. */
  json: string;
}

export class UnsentBatches {
  private queue: QueuedBatch[] = [];
  private head = 0;
  private total = 0;

  /** Serialized bytes (UTF-16 code units, a close proxy) of the queued batches. */
  get bytes(): number {
    return this.total;
  }

  get length(): number {
    return this.queue.length - this.head;
  }

  push(batch: PendingBatch): void {
    const json = JSON.stringify(batch.changes).slice(1, -1);
    this.queue.push({ batch, json });
    this.total += json.length;
  }

  /** The oldest batches whose JSON fits in `maxBytes` together (always at least one), or null when empty. */
  plan(maxBytes: number): AppendPlan | null {
    if (this.length === 0) return null;
    const taken: QueuedBatch[] = [];
    let bytes = 0;
    for (let i = this.head; i < this.queue.length; i++) {
      const queued = this.queue[i]!;
      if (taken.length > 0 && bytes + queued.json.length + 1 > maxBytes) break;
      taken.push(queued);
      bytes += queued.json.length + 1;
    }
    const parts = taken.map((queued) => queued.json).filter((json) => json !== "");
    return { batches: taken.map((queued) => queued.batch), first: taken[0]!.batch.n, n: taken.at(-1)!.batch.n, json: `[${parts.join(",")}]` };
  }

  /** Removes the oldest `count` batches (an append of them was acknowledged). */
  shift(count: number): void {
    for (let i = 0; i < count && this.head < this.queue.length; i++) {
      this.total -= this.queue[this.head]!.json.length;
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }
}
