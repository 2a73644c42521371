/**
 * This instance's own changes that the shared log has not shown back yet. The log's order is
 * the one every replica converges to, and an instance applies its own changes before it knows
 * their place in it, so until a batch comes back through the log:
 *   - a cell it wrote yields to another instance's write of the same cell that arrives first
 *     (that write is earlier in the log);
 *   - after its own reset, other instances' changes that arrive first are dropped (the reset
 *     follows them in the log and would have wiped them);
 *   - another instance's reset that arrives first wipes the replica, and these changes are
 *     applied again on top (they follow the reset in the log).
 * Pure bookkeeping: no I/O.
 */
import { cellsOf, type SharedChange } from "./sharedChange.ts";

export interface PendingBatch {
  /** This instance's batch number, consecutive from 1. */
  n: number;
  changes: SharedChange[];
}

export class PendingChanges {
  private readonly batches: PendingBatch[] = [];
  private readonly cells = new Map<string, number>();
  private resets = 0;

  get size(): number {
    return this.batches.length;
  }

  add(batch: PendingBatch): void {
    const last = this.batches.at(-1);
    if (last !== undefined && batch.n <= last.n) throw new RangeError(`pending batch ${batch.n} after batch ${last.n}`);
    this.batches.push(batch);
    for (const change of batch.changes) {
      for (const cell of cellsOf(change)) this.cells.set(cell, (this.cells.get(cell) ?? 0) + 1);
      if (isReset(change)) this.resets++;
    }
  }

  /** Batch `n` came back through the log: it and every earlier batch now have their place. */
  confirm(n: number): void {
    while (this.batches.length > 0 && this.batches[0]!.n <= n) {
      const batch = this.batches.shift()!;
      for (const change of batch.changes) {
        for (const cell of cellsOf(change)) {
          const count = this.cells.get(cell)! - 1;
          if (count === 0) this.cells.delete(cell);
          else this.cells.set(cell, count);
        }
        if (isReset(change)) this.resets--;
      }
    }
  }

  /** Whether an unconfirmed own change wrote `cell`. */
  has(cell: string): boolean {
    return this.cells.has(cell);
  }

  get resetPending(): boolean {
    return this.resets > 0;
  }

  /** The unconfirmed batches, oldest first. */
  pending(): readonly PendingBatch[] {
    return this.batches;
  }
}

function isReset(change: SharedChange): boolean {
  return change.c === "service" && change.r.op === "reset";
}
