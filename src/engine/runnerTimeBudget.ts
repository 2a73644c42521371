/**
 * The share of wall time background work may keep the runner busy, over a sliding window: a
 * budget of 0.2 lets it run at most 2 s of every 10 s. Pure bookkeeping (the caller passes the
 * clock), so it is tested directly.
 */

/** The sliding window the share is measured over. */
export const DEFAULT_BUDGET_WINDOW_MS = 10_000;

export class RunnerTimeBudget {
  /** Busy intervals [start, end) in ms, oldest first, none entirely before the window. */
  private readonly busy: [number, number][] = [];

  constructor(
    /** Share of wall time, 0..1 (0: never runs; 1: no limit). */
    readonly share: number,
    readonly windowMs = DEFAULT_BUDGET_WINDOW_MS,
  ) {
    if (!(Number.isFinite(share) && share >= 0 && share <= 1)) throw new RangeError(`the background budget must be a share of time from 0 to 1, got ${share}`);
    if (!(Number.isFinite(windowMs) && windowMs > 0)) throw new RangeError(`the budget window must be a positive number of ms, got ${windowMs}`);
  }

  /** The runner was busy with background work from start to end (ms). */
  record(start: number, end: number): void {
    if (end > start) this.busy.push([start, end]);
  }

  /** Busy ms within the window ending at `now`. */
  used(now: number): number {
    const from = now - this.windowMs;
    while (this.busy.length > 0 && this.busy[0]![1] <= from) this.busy.shift();
    let used = 0;
    for (const [start, end] of this.busy) used += Math.max(0, Math.min(end, now) - Math.max(start, from));
    return used;
  }

  /**
   * How long to wait from `now` before the next piece may start: 0 while the window's busy time
   * is under the share; otherwise until enough of it has slid out (assuming nothing more runs);
   * Infinity with a share of 0.
   */
  waitMs(now: number): number {
    if (this.share === 0) return Infinity;
    if (this.share === 1) return 0;
    const limit = this.share * this.windowMs;
    let excess = this.used(now) - limit;
    if (excess < 0) return 0;
    const from = now - this.windowMs;
    for (const [start, end] of this.busy) {
      const clippedStart = Math.max(start, from);
      const length = Math.min(end, now) - clippedStart;
      if (length <= 0) continue;
      // The window's start crosses this interval: busy time drops by 1 ms per ms.
      if (length > excess) return clippedStart - from + excess + 1;
      excess -= length;
    }
    return this.windowMs;
  }
}
