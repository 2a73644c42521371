/**
 * Group commit: many appends share one write and one fsync.
 *
 * append() encodes its frame synchronously into the open batch, so bytes reach the file in
 * call order. A single flush loop takes the open batch, hands its bytes to the sink (one
 * write + one fsync) and resolves the batch's promise — one promise shared by every append
 * in the batch. Appends arriving while a batch is being flushed open the next batch.
 *
 * Tasks (segment rotation, clear) are queued between batches and run by the same loop, in
 * order, so a task sees every earlier append durable and no later one written.
 *
 * Any failure (sink or task) poisons the queue: the failed batch or task and everything
 * queued after it are rejected, and so is every later append or task, because what is on
 * disk is no longer known.
 */
import { JournalError, messageOf } from "./errors.ts";
import { ByteBuffer, encodeFrame } from "./framing.ts";

/** Writes and syncs bytes[0, length). */
export type BatchSink = (bytes: Uint8Array, length: number) => Promise<void>;

interface Batch {
  kind: "batch";
  buffer: ByteBuffer;
  records: number;
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

interface Task {
  kind: "task";
  run: () => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

export interface GroupCommitStats {
  batches: number;
  records: number;
  bytes: number;
}

const POOLED_BUFFERS = 4;
/** Buffers that grew beyond this are dropped after use rather than pooled. */
const POOLED_BUFFER_LIMIT = 4 * 1024 * 1024;

export class GroupCommitQueue {
  readonly stats: GroupCommitStats = { batches: 0, records: 0, bytes: 0 };
  readonly #sink: BatchSink;
  readonly #queue: (Batch | Task)[] = [];
  readonly #pool: ByteBuffer[] = [];
  /** The batch still taking appends (the last queue entry), if any. */
  #open: Batch | null = null;
  #flushing = false;
  #failure: JournalError | null = null;
  #idle: (() => void)[] = [];

  constructor(sink: BatchSink) {
    this.#sink = sink;
  }

  /** The error that poisoned the queue, if any. */
  get failure(): JournalError | null {
    return this.#failure;
  }

  /** Encodes the frame (seq, json) now; resolves once it is written and synced. */
  append(seq: number, json: string): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    let batch = this.#open;
    if (!batch) {
      let resolve!: () => void;
      let reject!: (error: unknown) => void;
      const promise = new Promise<void>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      batch = { kind: "batch", buffer: this.#pool.pop() ?? new ByteBuffer(), records: 0, promise, resolve, reject };
      this.#open = batch;
      this.#queue.push(batch);
      this.#schedule();
    }
    encodeFrame(batch.buffer, seq, json);
    batch.records++;
    return batch.promise;
  }

  /** Runs `run` after everything queued so far is durable and before anything queued later. */
  enqueueTask<T>(run: () => Promise<T>): Promise<T> {
    if (this.#failure) return Promise.reject(this.#failure);
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ kind: "task", run, resolve: resolve as (value: unknown) => void, reject });
      this.#open = null;
      this.#schedule();
    });
  }

  /** Resolves once the queue is empty (whether its entries succeeded or failed). */
  drained(): Promise<void> {
    if (!this.#flushing && this.#queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #schedule(): void {
    if (this.#flushing) return;
    this.#flushing = true;
    // Start on a microtask so that appends made in the same tick join the first batch.
    queueMicrotask(() => void this.#flushLoop());
  }

  async #flushLoop(): Promise<void> {
    while (this.#queue.length > 0) {
      const entry = this.#queue.shift()!;
      if (entry === this.#open) this.#open = null;
      if (this.#failure) {
        entry.reject(this.#failure);
        continue;
      }
      if (entry.kind === "batch") {
        try {
          await this.#sink(entry.buffer.bytes, entry.buffer.length);
          this.stats.batches++;
          this.stats.records += entry.records;
          this.stats.bytes += entry.buffer.length;
          entry.resolve();
        } catch (error) {
          this.#fail(error, `writing ${entry.records} record(s)`);
          entry.reject(this.#failure);
        }
        this.#recycle(entry.buffer);
      } else {
        try {
          entry.resolve(await entry.run());
        } catch (error) {
          this.#fail(error, "rotating or clearing its files");
          entry.reject(this.#failure);
        }
      }
    }
    this.#flushing = false;
    const idle = this.#idle;
    this.#idle = [];
    for (const resolve of idle) resolve();
  }

  #fail(error: unknown, what: string): void {
    this.#failure = new JournalError(
      `journal failed while ${what} and refuses further appends (the state on disk is uncertain; reopen to recover): ${messageOf(error)}`,
      { cause: error },
    );
  }

  #recycle(buffer: ByteBuffer): void {
    buffer.length = 0;
    if (this.#pool.length < POOLED_BUFFERS && buffer.bytes.length <= POOLED_BUFFER_LIMIT) this.#pool.push(buffer);
  }
}
