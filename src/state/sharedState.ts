/**
 * State shared by several `ctxr serve` instances through Redis (--state redis://...): the
 * context service's changes (live index, conversations, request ids) and the proxy's
 * remembered histories. Each instance keeps a local replica for reads and applies its own
 * changes at once; every change also goes to one ordered log in Redis (redisStateLog.ts), and
 * each instance applies the others' changes from it in the log's order, so all replicas
 * converge on the log's order (the rules for changes crossing in flight: pendingChanges.ts).
 *
 * Acknowledged means in Redis: `flush()` resolves once every change made so far is appended
 * (under the durability Redis is configured with: AOF `appendfsync always` for every write).
 * While Redis is unreachable the instance is degraded: requests are served from the local
 * replica, changes queue in memory (lost if the instance dies before Redis returns), flush()
 * does not wait, and when Redis answers again the queue is appended and the replica catches
 * up with what the others wrote meanwhile.
 *
 * The queue is bounded in bytes (`queueBytes`): past it, writes are refused (the server answers
 * 503 with Retry-After) until Redis takes the queue, which goes out in entries of at most
 * `maxEntryBytes` (far below Redis's proto-max-bulk-len).
 *
 * A new instance starts from the snapshot in Redis plus the log after it. Every
 * `snapshotEvery` log entries one instance (a lock decides) writes a snapshot and trims the log
 * behind the previous one.
 *
 * Anyone who can write to Redis can put anything in the log: an entry that does not decode as a
 * change batch is skipped whole by every reader (counted, logged with its id: a dead letter), a
 * garbage snapshot is ignored (the replica loads from the log alone), and an entry deleted from
 * the log (XDEL) is told apart from the log being trimmed past a reader (logGap.ts).
 */
import { hostname } from "node:os";
import type { ContextService } from "../online/contextService.ts";
import type { ChangeRecord, ChangeSink, ServiceSnapshot } from "../online/serviceChanges.ts";
import { HistoryStore, type HistoryStoreOptions } from "../online/historyStore.ts";
import { judgeGap } from "./logGap.ts";
import { PendingChanges } from "./pendingChanges.ts";
import type { RedisTlsSettings } from "./redisDiagnosis.ts";
import { decodeStoredEntry, RedisStateLog, type StoredEntry } from "./redisStateLog.ts";
import type { RedisUrl } from "./redisUrl.ts";
import { historyCell, labelCell, type SharedChange } from "./sharedChange.ts";
import type { DeadLetter, DecodedEntry, LogEntry, SharedSnapshotState, StoredSnapshot } from "./sharedLogSchema.ts";
import { compareStreamIds } from "./streamIds.ts";
import { UnsentBatches, type AppendPlan } from "./unsentBatches.ts";
import { sleep } from "../runtime/sleep.ts";

export type { SharedSnapshotState } from "./sharedLogSchema.ts";

export interface SharedStateOptions {
  url: RedisUrl;
  /** Key prefix in Redis (default "ctxr:state"): deployments sharing one database need their own. */
  prefix?: string;
  /** Log entries between snapshots (default 10,000). */
  snapshotEvery?: number;
  /** "log" (default): requests first apply what the log already holds (catchUp); "local": the replica as it is. */
  reads?: SharedReads;
  /** Budgets of the remembered histories (the proxy's --max-history-bytes). */
  histories?: Omit<HistoryStoreOptions, "onRemember">;
  /** TLS settings for rediss:// (--redis-ca). */
  tls?: RedisTlsSettings;
  /** Bytes of unsent changes past which writes are refused (default DEFAULT_STATE_QUEUE_BYTES). */
  queueBytes?: number;
  /** The largest entry an append makes, in bytes (default DEFAULT_MAX_ENTRY_BYTES; lowered under Redis's proto-max-bulk-len). */
  maxEntryBytes?: number;
  log: (line: string) => void;
}

/** --state-queue-bytes by default: what may wait in memory while Redis is unreachable. */
export const DEFAULT_STATE_QUEUE_BYTES = 64 * 2 ** 20;
/**
 * An append carries at most this many bytes of changes (more batches wait for the next append).
 * Every other instance decodes and applies an entry in one synchronous step, so this also bounds
 * how long an entry holds a reader's request thread (about 10 ms for 1 MiB of index inserts).
 */
export const DEFAULT_MAX_ENTRY_BYTES = 2 ** 20;
/** What a refused write tells the client to wait, in seconds. */
export const QUEUE_FULL_RETRY_AFTER_S = 5;

/** Why writes are refused now, and when to try again. */
export interface WriteRefusal {
  message: string;
  retryAfterSeconds: number;
}

export const SHARED_READS = ["log", "local"] as const;
export type SharedReads = (typeof SHARED_READS)[number];

const EMPTY_SERVICE: ServiceSnapshot = { version: 1, contexts: [], conversations: [] };
/** After a failed command, the next try waits this long. */
const RETRY_MS = 250;
/** How long the tail's XREAD blocks; how often, at most, a stalled reader notices trimming. */
const TAIL_BLOCK_MS = 1_000;
const GAP_CHECK_MS = 5_000;
/** How long a replica loaded without a usable snapshot leaves snapshot writing to the others. */
const SNAPSHOT_REPAIR_GRACE_MS = 6 * GAP_CHECK_MS;
const PAGE = 2_000;
/** How long shutdown waits for queued changes to reach Redis. */
const CLOSE_WAIT_MS = 5_000;
/** Dead letters logged one by one; after that, one line per DEAD_LETTER_LOG_EVERY. */
const DEAD_LETTERS_LOGGED = 20;
const DEAD_LETTER_LOG_EVERY = 1_000;
/** The latest dead letters /v1/stats shows. */
const RECENT_DEAD_LETTERS = 10;

export class SharedState implements ChangeSink {
  readonly shared = true;
  readonly histories: HistoryStore;
  readonly instance = `${hostname()}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  private readonly redis: RedisStateLog;
  private readonly snapshotEvery: number;
  private readonly reads: SharedReads;
  private readonly log: (line: string) => void;
  private service: ContextService | null = null;
  private readonly pending = new PendingChanges();
  /** Batches not yet in Redis, oldest first (a suffix of the pending batches). */
  private readonly unsent = new UnsentBatches();
  private readonly queueBytes: number;
  private readonly maxEntryBytes: number;
  /** The entry cap under this Redis's proto-max-bulk-len (read once connected), and the largest entry it takes at all. */
  private entryCap: { entry: number; hard: number } | null = null;
  private gathering: SharedChange[] = [];
  private nextBatch = 1;
  /** Highest own batch Redis has acknowledged. */
  private appendedThrough = 0;
  private waiters: { n: number; resolve: () => void }[] = [];
  private sending = false;
  /**
   * The batches of the append in flight, kept until Redis acknowledges it: a failed append is
   * retried as exactly the same entry, so that an append that did land (its answer lost) is a
   * duplicate readers recognise by its batch numbers.
   */
  private inflight: AppendPlan | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  /** The last log entry applied. */
  private lastId = "0-0";
  /** Per other instance, its last batch applied (a retried append can land twice). */
  private readonly appliedThrough = new Map<string, number>();
  private loaded = false;
  private closed = false;
  private tailLoop: Promise<void> | null = null;
  private writeError: string | null = null;
  private readError: string | null = null;
  private sinceSnapshot = 0;
  private lastGapCheck = 0;
  /** The highest removed log entry already judged (logGap.ts): a deletion is judged once. */
  private removalsHandledThrough = "0-0";
  private snapshotProblem: string | null = null;
  /** With a snapshot problem: the snapshot id recorded when this replica loaded (a newer one means a repaired snapshot to reload from). */
  private snapshotIdAtLoad: string | null = null;
  private snapshotProblemSince = 0;
  private readonly recentDeadLetters: DeadLetter[] = [];
  private readonly counters = {
    appended_entries: 0,
    appended_changes: 0,
    applied_entries: 0,
    applied_changes: 0,
    dropped_changes: 0,
    write_errors: 0,
    read_errors: 0,
    resyncs: 0,
    snapshots_written: 0,
    acknowledged_degraded: 0,
    skipped_entries: 0,
    deleted_gaps: 0,
    garbage_snapshots: 0,
    refused_writes: 0,
    rejected_batches: 0,
  };

  constructor(options: SharedStateOptions) {
    this.redis = new RedisStateLog(options.url, options.prefix ?? "ctxr:state", options.tls);
    this.queueBytes = options.queueBytes ?? DEFAULT_STATE_QUEUE_BYTES;
    this.maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES;
    this.snapshotEvery = options.snapshotEvery ?? 10_000;
    this.reads = options.reads ?? "log";
    this.log = options.log;
    this.histories = new HistoryStore({ ...options.histories, onRemember: (conversation, messages) => this.add({ c: "history", conversation, messages: [...messages] }) });
  }

  /**
   * Loads the shared state into `service` (which must be empty and use this as its sink) and
   * follows the log from then on. Resolves once loaded, or once Redis proved unreachable (the
   * instance then starts degraded and loads when Redis answers).
   */
  async start(service: ContextService): Promise<void> {
    this.service = service;
    try {
      await this.resync();
    } catch (error) {
      this.readError = messageOf(error);
      this.counters.read_errors++;
      this.log(`ctxr serve: --state ${this.redis.url.display}: ${this.readError}; serving from this instance's own state until Redis answers\n`);
    }
    this.tailLoop = this.follow();
  }

  // ChangeSink: the service's changes.
  append(record: ChangeRecord): void {
    this.add({ c: "service", r: record });
  }

  async flush(): Promise<void> {
    this.seal();
    const n = this.nextBatch - 1;
    if (n <= this.appendedThrough) return;
    if (this.writeError !== null) {
      this.counters.acknowledged_degraded++;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push({ n, resolve }));
  }

  /**
   * Applies every change already in the log (one Redis round trip), so a request sees every
   * change another instance acknowledged before it arrived: a turn sent the moment the previous
   * one was answered elsewhere finds its records. Skipped with `reads: "local"` and while
   * degraded.
   */
  async catchUp(): Promise<void> {
    if (this.reads === "local" || !this.loaded || this.degradedReason !== null) return;
    try {
      await this.applyEntries(await this.redis.readAfter(this.lastId, PAGE));
    } catch {
      // The tail notices and reports an unreachable Redis; this request goes on from the replica.
    }
  }

  /** Degraded is not failing: requests go on from the local replica. */
  get failureMessage(): string | null {
    return null;
  }

  /** Null while Redis answers; else why this instance is not sharing its state right now. */
  get degradedReason(): string | null {
    const reason = this.writeError ?? this.readError ?? (this.loaded ? null : "the shared state is not loaded yet");
    return reason === null ? null : `shared state (${this.redis.url.display}) unavailable: ${reason}`;
  }

  /**
   * Non-null while the queue of unsent changes is at its byte bound: a request that would change
   * the state is refused (before it changes anything), so memory stays bounded while Redis is away.
   */
  get writeRefusal(): WriteRefusal | null {
    if (this.unsent.bytes < this.queueBytes) return null;
    this.counters.refused_writes++;
    return {
      message: `the shared state's queue for Redis is full (${this.unsent.bytes} bytes of changes waiting, --state-queue-bytes ${this.queueBytes}): ${this.degradedReason ?? "Redis is slow to take them"}`,
      retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_S,
    };
  }

  async close(): Promise<void> {
    this.seal();
    // flush() settles once everything is appended (or an append failed); not worth waiting for while Redis is away.
    if (this.writeError === null) await Promise.race([this.flush(), sleep(CLOSE_WAIT_MS)]);
    if (this.unsent.length > 0) this.log(`ctxr serve: ${this.unsent.length} change batches were not written to the shared state before shutdown\n`);
    this.closed = true;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.redis.close();
    await this.tailLoop;
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
  }

  stats() {
    return {
      url: this.redis.url.display,
      instance: this.instance,
      healthy: this.degradedReason === null,
      degraded_reason: this.degradedReason,
      last_entry: this.lastId,
      unsent_batches: this.unsent.length,
      unsent_bytes: this.unsent.bytes,
      queue_bytes_limit: this.queueBytes,
      unconfirmed_batches: this.pending.size,
      snapshot_problem: this.snapshotProblem,
      recent_dead_letters: [...this.recentDeadLetters],
      ...this.counters,
    };
  }

  private add(change: SharedChange): void {
    this.gathering.push(change);
    if (this.gathering.length === 1) queueMicrotask(() => this.seal());
  }

  /** Closes the batch being gathered and queues it for Redis. */
  private seal(): void {
    if (this.gathering.length === 0) return;
    const batch = { n: this.nextBatch++, changes: this.gathering };
    this.gathering = [];
    this.pending.add(batch);
    this.unsent.push(batch);
    void this.send();
  }

  /**
   * One append at a time, each carrying the batches queued meanwhile (group commit) up to the
   * entry cap: after an outage the queue goes out in several entries of a safe size.
   */
  private async send(): Promise<void> {
    if (this.sending || this.closed) return;
    this.sending = true;
    try {
      while (this.unsent.length > 0 && !this.closed) {
        let plan: AppendPlan;
        try {
          const cap = (this.entryCap ??= await this.readEntryCap());
          plan = this.inflight ??= this.unsent.plan(cap.entry)!;
          if (plan.json.length > cap.hard) {
            this.rejectOversized(plan, cap.hard);
            continue;
          }
          await this.redis.append(this.instance, plan.first, plan.n, plan.json);
        } catch (error) {
          this.writeFailed(error);
          return;
        }
        if (this.writeError !== null) this.log(`ctxr serve: shared state: writing to Redis works again\n`);
        this.writeError = null;
        this.inflight = null;
        this.unsent.shift(plan.batches.length);
        this.appendedThrough = plan.n;
        this.counters.appended_entries++;
        this.counters.appended_changes += plan.batches.reduce((total, batch) => total + batch.changes.length, 0);
        this.settleWaiters();
      }
    } finally {
      this.sending = false;
    }
  }

  /** The entry cap: the configured one, and never more than a quarter of what this Redis takes in one bulk string. */
  private async readEntryCap(): Promise<{ entry: number; hard: number }> {
    const bulk = await this.redis.maxBulkBytes();
    // The entry's other fields and the UTF-8 expansion of the JSON (up to 3 bytes a code unit) stay within the margin.
    const hard = Math.floor(bulk / 4);
    return { entry: Math.min(this.maxEntryBytes, hard), hard };
  }

  /** A single batch larger than Redis takes can never be appended: it is dropped (logged, counted) so later ones are not held behind it. */
  private rejectOversized(plan: AppendPlan, hard: number): void {
    this.counters.rejected_batches += plan.batches.length;
    this.log(`ctxr serve: shared state: change batch ${plan.first} (${plan.json.length} bytes) is larger than Redis takes in one entry (${hard} bytes); other instances will not see it\n`);
    this.inflight = null;
    this.unsent.shift(plan.batches.length);
    // It never comes back through the log: count it as placed.
    this.pending.confirm(plan.n);
    this.appendedThrough = plan.n;
    this.settleWaiters();
  }

  private writeFailed(error: unknown): void {
    this.counters.write_errors++;
    if (this.writeError === null) this.log(`ctxr serve: shared state degraded: writing to Redis failed (${messageOf(error)}); queueing changes (up to --state-queue-bytes ${this.queueBytes})\n`);
    this.writeError = messageOf(error);
    // Another Redis may answer after the outage: its limit is read again.
    this.entryCap = null;
    for (const waiter of this.waiters.splice(0)) {
      this.counters.acknowledged_degraded++;
      waiter.resolve();
    }
    this.retryTimer ??= setTimeout(() => {
      this.retryTimer = null;
      void this.send();
    }, RETRY_MS);
  }

  private settleWaiters(): void {
    const done = this.waiters.filter((waiter) => waiter.n <= this.appendedThrough);
    this.waiters = this.waiters.filter((waiter) => waiter.n > this.appendedThrough);
    for (const waiter of done) waiter.resolve();
  }

  /** Follows the log until closed: applies new entries, reloads after a gap or before the first load. */
  private async follow(): Promise<void> {
    while (!this.closed) {
      try {
        if (!this.loaded || (await this.missedEntries())) await this.resync();
        const entries = await this.redis.waitAfter(this.lastId, TAIL_BLOCK_MS, PAGE);
        if (this.readError !== null) this.log(`ctxr serve: shared state: reading from Redis works again\n`);
        this.readError = null;
        await this.applyEntries(entries);
      } catch (error) {
        if (this.closed) return;
        this.counters.read_errors++;
        if (this.readError === null) this.log(`ctxr serve: shared state degraded: reading from Redis failed (${messageOf(error)})\n`);
        this.readError = messageOf(error);
        this.lastGapCheck = 0;
        await sleep(RETRY_MS);
      }
    }
  }

  /** Whether the log was trimmed past what this replica has applied (it fell behind two snapshots); a deleted entry is not. */
  private async missedEntries(): Promise<boolean> {
    if (Date.now() - this.lastGapCheck < GAP_CHECK_MS) return false;
    this.lastGapCheck = Date.now();
    const shape = await this.redis.streamShape();
    // This replica loaded without the (garbage) snapshot: once another instance has written a good one, reload from it.
    if (this.snapshotProblem !== null && shape.snapshotId !== null && shape.snapshotId !== this.snapshotIdAtLoad) return true;
    if (this.snapshotProblem === null && shape.snapshotId !== null && this.loaded && !(await this.redis.snapshotLooksWhole(shape.snapshotId))) this.repairSnapshot();
    const verdict = judgeGap(shape, this.lastId, this.removalsHandledThrough);
    if (verdict === "deleted") {
      this.counters.deleted_gaps++;
      this.removalsHandledThrough = shape.maxDeletedId;
    }
    return verdict === "trimmed";
  }

  /**
   * Rebuilds the replica from the snapshot and the log, then applies this instance's unconfirmed
   * changes on top. A garbage snapshot is left aside (the log alone is loaded, from its start).
   */
  private async resync(): Promise<void> {
    let snapshot: StoredSnapshot<SharedSnapshotState> | null = null;
    let entries: DecodedEntry[] = [];
    let removedThrough = "0-0";
    for (let attempt = 0; ; attempt++) {
      const read = await this.redis.readSnapshot();
      snapshot = read.kind === "ok" ? read.snapshot : null;
      this.noteSnapshot(read.kind === "garbage" ? read.reason : null);
      removedThrough = (await this.redis.streamShape()).maxDeletedId;
      entries = [];
      let after = snapshot?.id ?? "0-0";
      for (;;) {
        const page = await this.redis.readAfter(after, PAGE);
        for (const stored of page) entries.push(decodeStoredEntry(stored));
        if (page.length < PAGE) break;
        after = page.at(-1)!.id;
      }
      // A newer snapshot written meanwhile may have let the log be trimmed past the one read: read again.
      const current = await this.redis.snapshotId();
      this.snapshotIdAtLoad = current;
      if (snapshot === null || current === null || current === snapshot.id) break;
      if (attempt === 4) {
        this.log(`ctxr serve: shared state: snapshots kept being replaced while this instance loaded; going on with the one read\n`);
        break;
      }
    }
    const service = this.service!;
    // From here on synchronous: no request sees a half-loaded replica.
    service.importState(snapshot?.state.service ?? EMPTY_SERVICE);
    this.histories.clear();
    for (const [conversation, messages] of snapshot?.state.histories ?? []) this.histories.rememberShared(conversation, messages, () => false);
    this.appliedThrough.clear();
    this.lastId = snapshot?.id ?? "0-0";
    for (const decoded of entries) {
      this.lastId = idOf(decoded);
      if (!decoded.ok) {
        this.deadLetter(decoded.dead);
        continue;
      }
      const entry = decoded.entry;
      if (entry.origin === this.instance) this.pending.confirm(entry.n);
      else if (this.isDuplicate(entry)) continue;
      for (const change of entry.changes) this.applyInOrder(change);
    }
    for (const batch of this.pending.pending()) for (const change of batch.changes) this.applyInOrder(change);
    service.enforceBudgets();
    if (this.loaded) this.counters.resyncs++;
    this.loaded = true;
    this.sinceSnapshot = entries.length;
    if (compareStreamIds(removedThrough, this.removalsHandledThrough) > 0) this.removalsHandledThrough = removedThrough;
  }

  /**
   * The snapshot in Redis was overwritten with something else: this replica (loaded from a good
   * snapshot and the log) writes a new one at the next chance, so new instances load everything.
   */
  private repairSnapshot(): void {
    if (this.sinceSnapshot >= this.snapshotEvery) return;
    this.log(`ctxr serve: shared state: the snapshot in Redis (${this.redis.keys.snapshot}) is not the one recorded; writing a new one\n`);
    this.sinceSnapshot = this.snapshotEvery;
    this.maybeSnapshot();
  }

  /** Records what the snapshot read found wrong (null: nothing), logging each new problem once. */
  private noteSnapshot(problem: string | null): void {
    if (problem !== null && problem !== this.snapshotProblem) {
      this.counters.garbage_snapshots++;
      this.snapshotProblemSince = Date.now();
      this.log(`ctxr serve: shared state: the snapshot in Redis (${this.redis.keys.snapshot}) is unusable: ${problem}; loading from the log alone (what was trimmed from the log behind the snapshot is lost) until a new snapshot is written\n`);
    }
    this.snapshotProblem = problem;
  }

  /** An entry no reader can use: skipped whole, counted, logged with its id. */
  private deadLetter(dead: DeadLetter): void {
    this.counters.skipped_entries++;
    this.recentDeadLetters.push(dead);
    if (this.recentDeadLetters.length > RECENT_DEAD_LETTERS) this.recentDeadLetters.shift();
    const count = this.counters.skipped_entries;
    if (count <= DEAD_LETTERS_LOGGED) this.log(`ctxr serve: shared state: skipped log entry ${dead.id} (dead letter): ${dead.reason}\n`);
    else if (count % DEAD_LETTER_LOG_EVERY === 0) this.log(`ctxr serve: shared state: ${count} log entries skipped so far; the latest, ${dead.id}: ${dead.reason}\n`);
  }

  /**
   * Applies entries read from the log in order, one at a time, giving requests the thread between
   * them: a page can hold many entries of up to an entry's cap each, and decoding and applying
   * them in one go would hold every request for as long. This instance's own entries are only
   * recognised (their changes are already here), never parsed. The tail and catchUp() may run
   * this concurrently: each entry is applied at most once, in the log's order (lastId).
   */
  private async applyEntries(entries: readonly StoredEntry[]): Promise<void> {
    for (let i = 0; i < entries.length; i++) {
      if (i > 0) await yieldToRequests();
      if (this.closed) return;
      this.applyEntry(entries[i]!);
    }
  }

  private applyEntry(stored: StoredEntry): void {
    // Whichever of the tail and catchUp() comes second skips what the first applied.
    if (compareStreamIds(stored.id, this.lastId) <= 0) return;
    this.lastId = stored.id;
    this.sinceSnapshot++;
    this.applyDecoded(decodeStoredEntry(stored, this.instance));
    this.maybeSnapshot();
  }

  private applyDecoded(decoded: DecodedEntry): void {
    if (!decoded.ok) {
      this.deadLetter(decoded.dead);
      return;
    }
    const entry = decoded.entry;
    if (entry.origin === this.instance) {
      this.pending.confirm(entry.n);
      return;
    }
    if (this.isDuplicate(entry)) return;
    this.counters.applied_entries++;
    for (const change of entry.changes) this.applyOther(change);
    this.service!.enforceBudgets();
  }

  private isDuplicate(entry: LogEntry): boolean {
    if (entry.n <= (this.appliedThrough.get(entry.origin) ?? 0)) return true;
    this.appliedThrough.set(entry.origin, entry.n);
    return false;
  }

  /** Another instance's change, arriving while this instance's own changes may still be unplaced. */
  private applyOther(change: SharedChange): void {
    if (this.pending.resetPending) {
      // An own reset follows this change in the log: it would have wiped it.
      this.counters.dropped_changes++;
      return;
    }
    this.counters.applied_changes++;
    if (change.c === "history") {
      this.histories.rememberShared(change.conversation, change.messages, (key) => this.pending.has(historyCell(change.conversation, key)));
    } else if (change.r.op === "reset") {
      this.clear();
      for (const batch of this.pending.pending()) for (const own of batch.changes) this.applyInOrder(own);
    } else {
      this.service!.applyShared(change.r, (conversation, key) => this.pending.has(labelCell(conversation, key)));
    }
  }

  /** A change applied after everything before it in the log (a cell keeps its first value). */
  private applyInOrder(change: SharedChange): void {
    if (change.c === "history") this.histories.rememberShared(change.conversation, change.messages, () => false);
    else if (change.r.op === "reset") this.clear();
    else this.service!.applyShared(change.r, () => false);
  }

  private clear(): void {
    this.service!.importState(EMPTY_SERVICE);
    this.histories.clear();
  }

  private maybeSnapshot(): void {
    if (this.sinceSnapshot < this.snapshotEvery || this.pending.size > 0 || this.gathering.length > 0) return;
    if (this.degradedReason !== null) return;
    // Loaded without the (garbage) snapshot, this replica may lack what was trimmed: an instance
    // that has it gets time to write the new snapshot first (it checks every GAP_CHECK_MS).
    if (this.snapshotProblem !== null && Date.now() - this.snapshotProblemSince < SNAPSHOT_REPAIR_GRACE_MS) return;
    this.sinceSnapshot = 0;
    // Nothing of this instance's own is unplaced: the replica is exactly the log up to lastId.
    const snapshot = { id: this.lastId, state: { version: 1 as const, service: this.service!.exportState(), histories: this.histories.export() } };
    this.redis.writeSnapshot(this.instance, snapshot).then(
      (written) => written && this.counters.snapshots_written++,
      (error) => this.log(`ctxr serve: writing the shared state's snapshot failed: ${messageOf(error)}\n`),
    );
  }
}

/** Lets the event loop run what waits (requests, timers) before going on. */
function yieldToRequests(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function idOf(decoded: DecodedEntry): string {
  return decoded.ok ? decoded.entry.id : decoded.dead.id;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
