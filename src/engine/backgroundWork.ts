/**
 * The engine's lowest-priority work: jobs the scheduler runs on the runner only when no live
 * sequence needs it (nothing waiting, nothing prefilling or decoding), one bounded piece at a
 * time, so a live request that arrives waits at most one piece; and only within a budget, the
 * share of wall time they may keep the runner busy (runnerTimeBudget.ts; --reuse-scoring-budget).
 *
 * A job has a kind (measuring a stored variant's shift, the quality audit, ...) and each kind
 * has its own accounting: queued, run, deferred (had to wait for live work or the budget at
 * least once), dropped (its object was gone, or the queue full), failed, and the runner seconds
 * its pieces took. The queue is first in, first out.
 */
import { RunnerTimeBudget } from "./runnerTimeBudget.ts";

/** A piece of background work: "done", or "dropped" when there was nothing left to do it on. */
export interface BackgroundJob {
  readonly kind: string;
  run(): Promise<"done" | "dropped">;
}

export interface BackgroundKindStats {
  /** Waiting to run now. */
  pending: number;
  /** Run to the end. */
  run: number;
  /** Jobs that had to wait at least once for live work or the budget. */
  deferred: number;
  /** Jobs that found nothing to work on (gone, not resident, no room) or met a full queue. */
  dropped: number;
  /** Jobs that threw (logged). */
  failed: number;
  /** Wall seconds the runner spent on this kind's pieces. */
  runnerSeconds: number;
}

export interface BackgroundWorkStats {
  /** The budget: share of wall time (0: off). */
  budget: number;
  kinds: Record<string, BackgroundKindStats>;
}

/** The share of wall time background work may take by default (--reuse-scoring-budget). */
export const DEFAULT_BACKGROUND_BUDGET = 0.2;

/** Jobs that may wait at once; beyond, new ones are dropped. */
export const DEFAULT_MAX_PENDING_JOBS = 4096;

interface QueuedJob {
  job: BackgroundJob;
}

export class BackgroundWork {
  private readonly queue: QueuedJob[] = [];
  private readonly budget: RunnerTimeBudget;
  private readonly kinds = new Map<string, BackgroundKindStats>();
  /** Leading queue entries already counted as deferred (they are marked in order). */
  private markedDeferred = 0;
  /** Whether a piece is running now. */
  private running = false;
  /** Callers of idle(), resolved once nothing waits or runs. */
  private idleWaiters: (() => void)[] = [];

  constructor(
    share: number,
    private readonly options: { log?: (line: string) => void; maxPending?: number; now?: () => number; windowMs?: number } = {},
  ) {
    this.budget = new RunnerTimeBudget(share, options.windowMs);
  }

  /** Whether any job may ever run (a budget above 0). */
  get enabled(): boolean {
    return this.budget.share > 0;
  }

  get pending(): number {
    return this.queue.length;
  }

  private now(): number {
    return this.options.now?.() ?? performance.now();
  }

  private statsOf(kind: string): BackgroundKindStats {
    let stats = this.kinds.get(kind);
    if (stats === undefined) {
      stats = { pending: 0, run: 0, deferred: 0, dropped: 0, failed: 0, runnerSeconds: 0 };
      this.kinds.set(kind, stats);
    }
    return stats;
  }

  /**
   * Queues a job at the end, or at the front when `first` (a live request is waiting on its
   * result); false (counted as dropped) when the budget is 0 or the queue is full.
   */
  enqueue(job: BackgroundJob, first = false): boolean {
    const stats = this.statsOf(job.kind);
    if (!this.enabled || this.queue.length >= (this.options.maxPending ?? DEFAULT_MAX_PENDING_JOBS)) {
      stats.dropped++;
      return false;
    }
    if (first) {
      this.queue.unshift({ job });
      // The marked entries lead the queue: a job put before them is marked with them.
      if (this.markedDeferred > 0) {
        this.markedDeferred++;
        stats.deferred++;
      }
    } else {
      this.queue.push({ job });
    }
    stats.pending++;
    return true;
  }

  /** The runner is busy with live work (or the budget is spent) while jobs wait: each waiting job counts as deferred once. */
  defer(): void {
    for (let i = this.markedDeferred; i < this.queue.length; i++) {
      this.statsOf(this.queue[i]!.job.kind).deferred++;
    }
    this.markedDeferred = this.queue.length;
  }

  /** Ms until the budget lets the next piece start (0: now; Infinity: never). */
  waitMs(): number {
    return this.budget.waitMs(this.now());
  }

  /** Runs the oldest job (the caller has checked that no live work waits and waitMs() is 0); never throws. */
  async runNext(): Promise<void> {
    const entry = this.queue.shift();
    if (entry === undefined) return;
    if (this.markedDeferred > 0) this.markedDeferred--;
    const stats = this.statsOf(entry.job.kind);
    stats.pending--;
    const start = this.now();
    this.running = true;
    try {
      const outcome = await entry.job.run();
      if (outcome === "done") stats.run++;
      else stats.dropped++;
    } catch (error) {
      stats.failed++;
      this.options.log?.(`ctxr: background ${entry.job.kind} job failed: ${(error as Error).message}`);
    } finally {
      const end = this.now();
      this.budget.record(start, end);
      stats.runnerSeconds += (end - start) / 1000;
      this.running = false;
      this.wakeIdle();
    }
  }

  /** Resolves once no job waits or runs (tests, benchmarks: "every stored variant is scored now"). */
  idle(): Promise<void> {
    if (this.queue.length === 0 && !this.running) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private wakeIdle(): void {
    if (this.queue.length > 0 || this.running) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }

  /** Drops every waiting job (counted as dropped): the runner restarted, or the engine closes. */
  clear(): void {
    for (const entry of this.queue) {
      const stats = this.statsOf(entry.job.kind);
      stats.pending--;
      stats.dropped++;
    }
    this.queue.length = 0;
    this.markedDeferred = 0;
    this.wakeIdle();
  }

  get stats(): BackgroundWorkStats {
    const kinds: Record<string, BackgroundKindStats> = {};
    for (const [kind, stats] of this.kinds) kinds[kind] = { ...stats };
    return { budget: this.budget.share, kinds };
  }
}
