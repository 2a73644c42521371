/**
 * What a CacheKeySink is told, carried between threads (kvEventsThread.ts): the KV-events thread
 * gathers each batch's keys into one message — the keys dropped during it and the keys held after
 * it that were not before, as two BigUint64Arrays moved rather than copied — and the request thread
 * replays the messages, in order, into its UpstreamCacheSync. Pure: no threads here.
 */
import type { ContentKey } from "./contentKey.ts";
import type { AppliedBatch, CacheKeySink } from "./engineCacheFeed.ts";

export type CacheKeyMessage =
  | { kind: "batch"; held: BigUint64Array; dropped: BigUint64Array; batch: AppliedBatch }
  | { kind: "cleared" | "connected" | "disconnected" | "caughtUp" };

/**
 * Keys gathered while a message is in flight beyond which the next goes anyway: the gathered map
 * stays bounded (about 30 MB) even if the request thread stops acknowledging for a while.
 */
const MAX_GATHERED_KEYS = 262_144;

/** A key's state in the batch: held before it (bit 0), held now (bit 1), dropped at some point (bit 2). */
const HELD_BEFORE = 1;
const HELD_NOW = 2;
const DROPPED = 4;

/**
 * The KV-events thread's sink: posts one message per batch and per signal. A batch's message names
 * every key dropped during it (its contexts leave, as they would event by event), then the keys
 * to hold after it that the receiver lacks.
 *
 * With `coalesceMs`, the batches of that long go as one message (the last batch's figures, the net
 * change of keys over all of them): however fast a publisher sends, the request thread gets at most
 * one message per `coalesceMs`, and keys stored and dropped within it cost it nothing. A signal
 * first sends the batches gathered so far, so the order is kept.
 *
 * With `awaitApplied`, one batch message is in flight at a time: the next goes once the receiver
 * says it applied the last (`applied`), and batches meanwhile are gathered into it. The queue
 * between the threads is then bounded however slow the request thread is, and a backlog turns
 * into one larger message rather than many that the request thread would run back to back.
 */
export class CacheKeyDeltaSink implements CacheKeySink {
  private readonly touched = new Map<ContentKey, number>();
  private gathered: AppliedBatch | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private inFlight = false;

  constructor(
    private readonly post: (message: CacheKeyMessage) => void,
    private readonly coalesceMs = 0,
    private readonly awaitApplied = false,
  ) {}

  keyHeld(key: ContentKey): void {
    this.touched.set(key, (this.touched.get(key) ?? 0) | HELD_NOW);
  }

  keyDropped(key: ContentKey): void {
    this.touched.set(key, ((this.touched.get(key) ?? HELD_BEFORE) & ~HELD_NOW) | DROPPED);
  }

  /** Everything told before is void: the receiver clears, and what follows starts from nothing held. */
  cleared(): void {
    this.flush();
    this.touched.clear();
    this.post({ kind: "cleared" });
  }

  batchApplied(batch: AppliedBatch): void {
    if (this.coalesceMs <= 0) return this.postBatch(batch);
    // The lag is measured on live batches: a replayed one after a live one keeps the live one's clock.
    const live = batch.replayed && this.gathered !== null && !this.gathered.replayed ? this.gathered : batch;
    this.gathered = { ...batch, ts: live.ts, replayed: live.replayed };
    if (this.touched.size > MAX_GATHERED_KEYS) return this.flush();
    this.timer ??= setTimeout(() => {
      this.timer = null;
      if (!this.inFlight) this.flush();
    }, this.coalesceMs);
  }

  /** The receiver applied the batch message in flight (`awaitApplied`): what was gathered meanwhile goes now. */
  applied(): void {
    this.inFlight = false;
    if (this.timer === null) this.flush();
  }

  /** Sends the batches gathered so far, if any. */
  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.gathered;
    this.gathered = null;
    if (batch !== null) this.postBatch(batch);
  }

  private postBatch(batch: AppliedBatch): void {
    if (this.awaitApplied) this.inFlight = true;
    const toHold = (state: number) => (state & HELD_NOW) !== 0 && (state & (HELD_BEFORE | DROPPED)) !== HELD_BEFORE;
    let heldCount = 0;
    let droppedCount = 0;
    for (const state of this.touched.values()) {
      if (toHold(state)) heldCount++;
      if ((state & DROPPED) !== 0) droppedCount++;
    }
    const held = new BigUint64Array(heldCount);
    const dropped = new BigUint64Array(droppedCount);
    heldCount = droppedCount = 0;
    for (const [key, state] of this.touched) {
      if (toHold(state)) held[heldCount++] = key;
      if ((state & DROPPED) !== 0) dropped[droppedCount++] = key;
    }
    this.touched.clear();
    this.post({ kind: "batch", held, dropped, batch });
  }

  connected(): void {
    this.flush();
    this.post({ kind: "connected" });
  }

  disconnected(): void {
    this.flush();
    this.post({ kind: "disconnected" });
  }

  caughtUp(): void {
    this.flush();
    this.post({ kind: "caughtUp" });
  }
}

/** Tells `sink` what a message carries. */
export function applyCacheKeyMessage(sink: CacheKeySink, message: CacheKeyMessage): void {
  switch (message.kind) {
    case "batch":
      for (const key of message.dropped) sink.keyDropped(key);
      for (const key of message.held) sink.keyHeld(key);
      sink.batchApplied(message.batch);
      return;
    case "cleared":
      return sink.cleared();
    case "connected":
      return sink.connected();
    case "disconnected":
      return sink.disconnected();
    case "caughtUp":
      return sink.caughtUp();
  }
}

/**
 * Applies messages to `sink` in order, a slice of at most `sliceKeys` keys at a time: a large
 * batch message (a publisher flooding BlockStored: hundreds of thousands of keys) yields to other
 * work on the request thread between slices instead of holding it for as long as it takes.
 * `applied` is told when a batch message is through (the sender may send the next).
 */
export class SlicedCacheKeyApplier {
  private readonly queue: CacheKeyMessage[] = [];
  /** Keys of the head batch message applied so far. */
  private at = 0;
  private scheduled = false;

  constructor(
    private readonly sink: CacheKeySink,
    private readonly applied: () => void,
    private readonly sliceKeys = 4096,
    private readonly schedule: (run: () => void) => void = (run) => void setImmediate(run),
  ) {}

  push(message: CacheKeyMessage): void {
    this.queue.push(message);
    if (!this.scheduled && this.queue.length === 1) this.run();
  }

  /** Drops what is queued (the sender is gone). */
  reset(): void {
    this.queue.length = 0;
    this.at = 0;
  }

  private run(): void {
    this.scheduled = false;
    let budget = this.sliceKeys;
    while (this.queue.length > 0) {
      const message = this.queue[0]!;
      if (message.kind !== "batch") {
        applyCacheKeyMessage(this.sink, message);
        this.queue.shift();
        continue;
      }
      const { dropped, held } = message;
      const total = dropped.length + held.length;
      while (this.at < total) {
        if (budget-- <= 0) {
          this.scheduled = true;
          this.schedule(() => this.run());
          return;
        }
        const i = this.at++;
        if (i < dropped.length) this.sink.keyDropped(dropped[i]!);
        else this.sink.keyHeld(held[i - dropped.length]!);
      }
      this.at = 0;
      this.queue.shift();
      this.sink.batchApplied(message.batch);
      this.applied();
    }
  }
}
