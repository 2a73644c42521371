/**
 * The order of an engine's KV event batches, pure (no sockets, no timers): which batch to apply
 * next, when to wait for a missing one, when to ask the replay socket, and when the engine's
 * cache can no longer be followed (a resync: the consumer drops its view of it).
 *
 * Batches carry sequence numbers 0, 1, 2, … per publisher. A batch ahead of the next expected
 * one is held; the gap first gets a short wait (`gapSeen`: the caller starts a timer and calls
 * `gapTimeout`), since a late batch may still come, then one replay request from the first
 * missing number. The replay answers every batch the engine still keeps from there on: a gap it
 * cannot fill (its first batch is past the missing ones, it failed, or it is over and a gap is
 * still open) resynchronises and goes on from the first batch held. One replay at a time, and
 * never two for the same gap: nothing loops.
 *
 * A batch behind the expected one is a copy of one already applied (a late duplicate, ignored)
 * when its payload equals that batch's; otherwise the sequence went backwards, which is an
 * engine that restarted behind the same connection: resync, and follow the new sequence.
 *
 * On every connection (the first and each reconnect, which resynchronises: batches published
 * while disconnected are unknown, and the engine may have restarted) the whole replay buffer is
 * asked for, so a subscriber that starts after the engine still learns what the engine stored
 * in its last batches (everything, when it has not published more than it keeps).
 *
 * Sequence numbers are unsigned 64-bit (bigint: engines may start anywhere up to 2^64−1). Nothing
 * here keeps a payload once applied: a late duplicate is told apart by a digest of the payload
 * (its length and a 64-bit hash), so memory does not grow with payload sizes. Batches held while
 * a gap is open are bounded by count and by bytes.
 */
import { wyhash } from "../runtime/hashing.ts";

export type KvEventResyncReason = "gap" | "reconnect" | "restart" | "replay-failed" | "malformed" | "overflow";

export interface SequencerActions {
  apply(seq: bigint, payload: Uint8Array, replayed: boolean): void;
  /** Drop the view: batches applied so far no longer describe the engine's cache. */
  resync(reason: KvEventResyncReason): void;
  /** Batches `from`… are missing and not here yet: wait a little (then call gapTimeout). */
  gapSeen(from: bigint): void;
  /** Ask the replay socket for every batch from `from` (then call replayed…, replayEnded or replayFailed). */
  requestReplay(from: bigint): void;
  /** Stop an outstanding replay (its answers must not arrive any more). */
  cancelReplay(): void;
  /** Missed batches from..to came back through replay. */
  gapRecovered(from: bigint, to: bigint): void;
  /** A late copy of an applied batch was ignored. */
  duplicate(seq: bigint): void;
}

export interface SequencerOptions {
  /** Whether a replay socket exists. */
  replay: boolean;
  /** Batches held while a gap is open; beyond, the gap is given up (default 10,000, a vLLM replay buffer). */
  maxPending?: number;
  /** Their payload bytes at most (default DEFAULT_MAX_PENDING_BYTES). */
  maxPendingBytes?: number;
  /** Digests of applied payloads kept to tell a late duplicate from a restart (default 256). */
  recentKept?: number;
}

type Phase = "live" | "waiting" | "replaying";

/** Payload bytes held while a gap is open, by default: a few seconds of a busy engine's events. */
export const DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024;

/** Identifies a payload without keeping it: its length and a 64-bit hash of it. */
function payloadDigest(payload: Uint8Array): string {
  return `${payload.length}:${wyhash(payload).toString(16)}`;
}

/** The smallest key of a non-empty map. */
function smallest(keys: Iterable<bigint>): bigint {
  let min: bigint | null = null;
  for (const key of keys) if (min === null || key < min) min = key;
  return min!;
}

export class KvEventSequencer {
  /** The next sequence number to apply; null: any (no replay to ask, nothing applied since the last (re)start). */
  private expected: bigint | null = null;
  private phase: Phase = "live";
  private readonly pending = new Map<bigint, Uint8Array>();
  private pendingBytes = 0;
  private readonly recent = new Map<bigint, string>();
  /** Something usable was applied since the last resync (a resync then has a view to drop). */
  private dirty = false;
  /** The batch being applied was declared unusable. */
  private applyingUnusable = false;
  private connections = 0;
  /** The replay in flight: the first batch it was asked for, whether a gap made it (not a connection), whether it filled that gap. */
  private replayFrom = 0n;
  private replayGapEnd = 0n;
  private replayForGap = false;
  private replayFilled = false;
  private readonly maxPending: number;
  private readonly maxPendingBytes: number;
  private readonly recentKept: number;

  constructor(
    private readonly actions: SequencerActions,
    private readonly options: SequencerOptions,
  ) {
    this.maxPending = options.maxPending ?? 10_000;
    this.maxPendingBytes = options.maxPendingBytes ?? DEFAULT_MAX_PENDING_BYTES;
    this.recentKept = options.recentKept ?? 256;
  }

  /** The next sequence number it will apply (null when any will do). */
  get next(): bigint | null {
    return this.expected;
  }

  get replaying(): boolean {
    return this.phase === "replaying";
  }

  /** The SUB socket completed a handshake. */
  connected(): void {
    if (this.connections++ > 0) this.resync("reconnect");
    this.reset();
    if (!this.options.replay) return;
    this.expected = 0n;
    this.startReplay(0n, false);
  }

  /** A batch from the SUB socket. */
  live(seq: bigint, payload: Uint8Array): void {
    if (this.expected === null) this.expected = seq;
    if (seq < this.expected) {
      if (this.isDuplicate(seq, payload)) this.actions.duplicate(seq);
      else this.restart(seq, payload);
      return;
    }
    if (this.phase === "replaying" || seq > this.expected) {
      if (!this.hold(seq, payload)) return;
      if (this.phase === "live") {
        this.phase = "waiting";
        this.actions.gapSeen(this.expected);
      }
      return;
    }
    this.apply(seq, payload, false);
    this.drain();
  }

  /** The wait for a missing batch is over. */
  gapTimeout(): void {
    if (this.phase !== "waiting") return;
    if (this.options.replay) this.startReplay(this.expected!, true);
    else this.skipToHeld("gap");
  }

  /** One batch of the replay's answer (they come in order). */
  replayed(seq: bigint, payload: Uint8Array): void {
    if (this.phase !== "replaying" || seq < this.expected!) return;
    if (seq > this.expected!) {
      // The engine no longer keeps the missing batches.
      this.resync("gap");
      this.expected = seq;
    } else if (seq === this.replayFrom) this.replayFilled = true;
    this.apply(seq, payload, true);
    this.release(seq);
  }

  /** The replay's end marker came. */
  replayEnded(): void {
    if (this.phase !== "replaying") return;
    this.phase = "live";
    if (this.replayForGap && this.replayFilled && this.expected! > this.replayGapEnd) this.actions.gapRecovered(this.replayFrom, this.replayGapEnd);
    for (const seq of this.pending.keys()) if (seq < this.expected!) this.release(seq);
    if (!this.pending.has(this.expected!) && this.pending.size > 0) return this.skipToHeld("gap");
    this.drain();
  }

  /** The replay got no answer in time (or its socket is unreachable). */
  replayFailed(): void {
    if (this.phase !== "replaying") return;
    this.phase = "live";
    this.skipToHeld("replay-failed");
  }

  /** The batch being applied (from within `apply`) cannot be used (malformed): the view misses it. */
  unusable(): void {
    this.applyingUnusable = true;
    this.resync("malformed");
  }

  private startReplay(from: bigint, forGap: boolean): void {
    this.phase = "replaying";
    this.replayFrom = from;
    this.replayGapEnd = this.pending.size === 0 ? from : smallest(this.pending.keys()) - 1n;
    this.replayForGap = forGap;
    this.replayFilled = false;
    this.actions.requestReplay(from);
  }

  private apply(seq: bigint, payload: Uint8Array, replayed: boolean): void {
    this.expected = seq + 1n;
    this.recent.delete(seq);
    this.recent.set(seq, payloadDigest(payload));
    if (this.recent.size > this.recentKept) this.recent.delete(this.recent.keys().next().value!);
    this.applyingUnusable = false;
    this.actions.apply(seq, payload, replayed);
    if (!this.applyingUnusable) this.dirty = true;
    this.applyingUnusable = false;
  }

  /** Applies held batches while they follow on; a gap still open waits again. */
  private drain(): void {
    for (let payload = this.pending.get(this.expected!); payload !== undefined; payload = this.pending.get(this.expected!)) {
      this.release(this.expected!);
      this.apply(this.expected!, payload, false);
    }
    if (this.pending.size === 0) this.phase = "live";
    else if (this.phase !== "waiting") {
      this.phase = "waiting";
      this.actions.gapSeen(this.expected!);
    }
  }

  /** Holds a batch; false when that was one too many and the gap was given up (everything held is applied). */
  private hold(seq: bigint, payload: Uint8Array): boolean {
    this.release(seq);
    this.pending.set(seq, payload);
    this.pendingBytes += payload.length;
    if (this.pending.size <= this.maxPending && this.pendingBytes <= this.maxPendingBytes) return true;
    if (this.phase === "replaying") this.actions.cancelReplay();
    this.phase = "live";
    this.skipToHeld("overflow");
    return false;
  }

  /** Gives the missing batches up: resync, then go on from the first batch held (if any). */
  private skipToHeld(reason: KvEventResyncReason): void {
    this.resync(reason);
    if (this.pending.size === 0) {
      this.phase = "live";
      this.expected = null;
      return;
    }
    this.expected = smallest(this.pending.keys());
    this.phase = "live";
    this.drain();
  }

  /** The sequence went backwards: a new one starts, followed from its beginning when the replay still has it. */
  private restart(seq: bigint, payload: Uint8Array): void {
    this.resync("restart");
    this.reset();
    if (this.options.replay) this.expected = 0n;
    this.live(seq, payload);
  }

  private reset(): void {
    if (this.phase === "replaying") this.actions.cancelReplay();
    this.pending.clear();
    this.pendingBytes = 0;
    this.recent.clear();
    this.phase = "live";
    this.expected = null;
  }

  private release(seq: bigint): void {
    const held = this.pending.get(seq);
    if (held === undefined) return;
    this.pending.delete(seq);
    this.pendingBytes -= held.length;
  }

  /** Tells the consumer to drop its view, when it has one. */
  private resync(reason: KvEventResyncReason): void {
    if (!this.dirty) return;
    this.dirty = false;
    this.actions.resync(reason);
  }

  private isDuplicate(seq: bigint, payload: Uint8Array): boolean {
    const applied = this.recent.get(seq);
    return applied !== undefined && applied === payloadDigest(payload);
  }
}
