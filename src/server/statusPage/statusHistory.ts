/**
 * The recent samples of the status page's figures that GET /v1/stats/history returns: one every
 * `everyMs` on a timer (started by `track`, stopped by `stop`), the last `capacity` kept. Without
 * `everyMs` it samples only when asked (`current`), which tests and embedders without a timer use.
 */
import { RingBuffer } from "../../collections/ringBuffer.ts";
import type { StatusFigures } from "./statusFigures.ts";

export interface StatusSample {
  /** Milliseconds since the epoch. */
  time_ms: number;
  figures: StatusFigures;
}

/** Five minutes of samples, every 2 s. */
export const DEFAULT_STATUS_SAMPLE_EVERY_MS = 2000;
export const DEFAULT_STATUS_SAMPLES = 150;

export interface StatusHistoryOptions {
  capacity?: number;
  /** Sample on a timer this often (null: only when asked). */
  everyMs?: number | null;
  now?: () => number;
  /** Told when reading the figures fails (the sample is skipped); once, until a read works again. */
  onError?: (error: unknown) => void;
}

export class StatusHistory {
  private readonly ring: RingBuffer<StatusSample>;
  private readonly now: () => number;
  readonly everyMs: number | null;
  private read: (() => StatusFigures) | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private readonly onError: (error: unknown) => void;
  private failing = false;

  constructor(options: StatusHistoryOptions = {}) {
    this.ring = new RingBuffer(options.capacity ?? DEFAULT_STATUS_SAMPLES);
    this.now = options.now ?? Date.now;
    this.everyMs = options.everyMs ?? null;
    this.onError = options.onError ?? (() => {});
    if (this.everyMs !== null && !(this.everyMs > 0)) throw new Error(`status history: sample interval must be positive, got ${this.everyMs} ms`);
  }

  get capacity(): number {
    return this.ring.capacity;
  }

  /** Where samples come from; takes the first one now and, with everyMs, starts the timer. */
  track(read: () => StatusFigures): void {
    this.read = read;
    this.record();
    if (this.everyMs !== null && this.timer === null) {
      this.timer = setInterval(() => this.record(), this.everyMs);
      // The history never keeps a process alive: serve.ts stops it with the server.
      (this.timer as { unref?: () => void }).unref?.();
    }
  }

  /** Takes one sample now (nothing before track). A failed read is skipped, never thrown: it may run on the timer. */
  record(): void {
    if (this.read === null) return;
    let figures: StatusFigures;
    try {
      figures = this.read();
    } catch (error) {
      if (!this.failing) this.onError(error);
      this.failing = true;
      return;
    }
    this.failing = false;
    this.ring.push({ time_ms: this.now(), figures });
  }

  /** The samples, oldest first; without everyMs, one is taken first. */
  current(): StatusSample[] {
    if (this.everyMs === null) this.record();
    return this.ring.toArray();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}

/** The log line of a failed sample (the status page's history skips it). */
export function statusSampleFailed(log: (text: string) => void): (error: unknown) => void {
  return (error) => log(`ctxr serve: reading the status page's figures failed (samples skipped until it works): ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
}
