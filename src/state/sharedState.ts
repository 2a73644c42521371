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
 * A new instance starts from the snapshot in Redis plus the log after it. Every
 * `snapshotEvery` log entries one instance (a lock decides) writes a snapshot and trims the log
 * behind the previous one.
 */
import { hostname } from "node:os";
import type { ChangeRecord, ChangeSink, ContextService } from "../online/contextService.ts";
import type { ServiceSnapshot } from "../online/serviceJournal.ts";
import { HistoryStore, type HistoryStoreOptions } from "../proxy/historyStore.ts";
import { PendingChanges, type PendingBatch } from "./pendingChanges.ts";
import { RedisStateLog, type LogEntry } from "./redisStateLog.ts";
import type { RedisUrl } from "./redisUrl.ts";
import { historyCell, labelCell, type SharedChange } from "./sharedChange.ts";
import { compareStreamIds } from "./streamIds.ts";

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
  log: (line: string) => void;
}

export const SHARED_READS = ["log", "local"] as const;
export type SharedReads = (typeof SHARED_READS)[number];

export interface SharedSnapshotState {
  version: 1;
  service: ServiceSnapshot;
  histories: [string, [string, unknown][]][];
}

const EMPTY_SERVICE: ServiceSnapshot = { version: 1, contexts: [], conversations: [] };
/** After a failed command, the next try waits this long. */
const RETRY_MS = 250;
/** How long the tail's XREAD blocks; how often, at most, a stalled reader notices trimming. */
const TAIL_BLOCK_MS = 1_000;
const GAP_CHECK_MS = 5_000;
const PAGE = 2_000;
/** How long shutdown waits for queued changes to reach Redis. */
const CLOSE_WAIT_MS = 5_000;

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
  private unsent: PendingBatch[] = [];
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
  private inflight: PendingBatch[] | null = null;
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
  };

  constructor(options: SharedStateOptions) {
    this.redis = new RedisStateLog(options.url, options.prefix ?? "ctxr:state");
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
      this.applyEntries(await this.redis.readAfter(this.lastId, PAGE));
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

  async close(): Promise<void> {
    this.seal();
    // flush() settles once everything is appended (or an append failed); not worth waiting for while Redis is away.
    if (this.writeError === null) await Promise.race([this.flush(), Bun.sleep(CLOSE_WAIT_MS)]);
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
      unconfirmed_batches: this.pending.size,
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

  /** One append at a time, each carrying every batch queued meanwhile (group commit). */
  private async send(): Promise<void> {
    if (this.sending || this.closed) return;
    this.sending = true;
    try {
      while (this.unsent.length > 0 && !this.closed) {
        const batches = (this.inflight ??= this.unsent.slice());
        const changes = batches.flatMap((batch) => batch.changes);
        try {
          await this.redis.append(this.instance, batches[0]!.n, batches.at(-1)!.n, changes);
        } catch (error) {
          this.counters.write_errors++;
          if (this.writeError === null) this.log(`ctxr serve: shared state degraded: writing to Redis failed (${messageOf(error)}); queueing changes\n`);
          this.writeError = messageOf(error);
          for (const waiter of this.waiters.splice(0)) {
            this.counters.acknowledged_degraded++;
            waiter.resolve();
          }
          this.retryTimer ??= setTimeout(() => {
            this.retryTimer = null;
            void this.send();
          }, RETRY_MS);
          return;
        }
        if (this.writeError !== null) this.log(`ctxr serve: shared state: writing to Redis works again\n`);
        this.writeError = null;
        this.inflight = null;
        this.unsent = this.unsent.slice(batches.length);
        this.appendedThrough = batches.at(-1)!.n;
        this.counters.appended_entries++;
        this.counters.appended_changes += changes.length;
        const done = this.waiters.filter((waiter) => waiter.n <= this.appendedThrough);
        this.waiters = this.waiters.filter((waiter) => waiter.n > this.appendedThrough);
        for (const waiter of done) waiter.resolve();
      }
    } finally {
      this.sending = false;
    }
  }

  /** Follows the log until closed: applies new entries, reloads after a gap or before the first load. */
  private async follow(): Promise<void> {
    while (!this.closed) {
      try {
        if (!this.loaded || (await this.missedEntries())) await this.resync();
        const entries = await this.redis.waitAfter(this.lastId, TAIL_BLOCK_MS, PAGE);
        if (this.readError !== null) this.log(`ctxr serve: shared state: reading from Redis works again\n`);
        this.readError = null;
        this.applyEntries(entries);
      } catch (error) {
        if (this.closed) return;
        this.counters.read_errors++;
        if (this.readError === null) this.log(`ctxr serve: shared state degraded: reading from Redis failed (${messageOf(error)})\n`);
        this.readError = messageOf(error);
        this.lastGapCheck = 0;
        await Bun.sleep(RETRY_MS);
      }
    }
  }

  /** Whether the log was trimmed past what this replica has applied (it fell behind two snapshots). */
  private async missedEntries(): Promise<boolean> {
    if (Date.now() - this.lastGapCheck < GAP_CHECK_MS) return false;
    this.lastGapCheck = Date.now();
    return compareStreamIds(await this.redis.maxDeletedId(), this.lastId) > 0;
  }

  /** Rebuilds the replica from the snapshot and the log, then applies this instance's unconfirmed changes on top. */
  private async resync(): Promise<void> {
    let snapshot: { id: string; state: SharedSnapshotState } | null = null;
    let entries: LogEntry[] = [];
    for (let attempt = 0; ; attempt++) {
      snapshot = await this.redis.readSnapshot<SharedSnapshotState>();
      entries = [];
      let after = snapshot?.id ?? "0-0";
      for (;;) {
        const page = await this.redis.readAfter(after, PAGE);
        entries.push(...page);
        if (page.length < PAGE) break;
        after = page.at(-1)!.id;
      }
      // Trimmed past the snapshot read: a newer one was written meanwhile.
      if (compareStreamIds(await this.redis.maxDeletedId(), snapshot?.id ?? "0-0") <= 0) break;
      if (attempt === 4) throw new Error("the shared log kept being trimmed while this instance loaded it");
    }
    if (snapshot !== null && snapshot.state?.version !== 1) throw new Error(`the snapshot in Redis has version ${String(snapshot.state?.version)}; this ctxr reads version 1`);
    const service = this.service!;
    // From here on synchronous: no request sees a half-loaded replica.
    service.importState(snapshot?.state.service ?? EMPTY_SERVICE);
    this.histories.clear();
    for (const [conversation, messages] of snapshot?.state.histories ?? []) this.histories.rememberShared(conversation, messages, () => false);
    this.appliedThrough.clear();
    this.lastId = snapshot?.id ?? "0-0";
    for (const entry of entries) {
      this.lastId = entry.id;
      if (entry.origin === this.instance) this.pending.confirm(entry.n);
      else if (this.isDuplicate(entry)) continue;
      for (const change of entry.changes) this.applyInOrder(change);
    }
    for (const batch of this.pending.pending()) for (const change of batch.changes) this.applyInOrder(change);
    service.enforceBudgets();
    if (this.loaded) this.counters.resyncs++;
    this.loaded = true;
    this.sinceSnapshot = entries.length;
  }

  private applyEntries(entries: LogEntry[]): void {
    if (entries.length === 0) return;
    for (const entry of entries) {
      // The tail and catchUp() read concurrently: whichever comes second skips what the first applied.
      if (compareStreamIds(entry.id, this.lastId) <= 0) continue;
      this.lastId = entry.id;
      this.sinceSnapshot++;
      if (entry.origin === this.instance) {
        this.pending.confirm(entry.n);
        continue;
      }
      if (this.isDuplicate(entry)) continue;
      this.counters.applied_entries++;
      for (const change of entry.changes) this.applyOther(change);
    }
    this.service!.enforceBudgets();
    this.maybeSnapshot();
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
    this.sinceSnapshot = 0;
    // Nothing of this instance's own is unplaced: the replica is exactly the log up to lastId.
    const snapshot = { id: this.lastId, state: { version: 1 as const, service: this.service!.exportState(), histories: this.histories.export() } };
    this.redis.writeSnapshot(this.instance, snapshot).then(
      (written) => written && this.counters.snapshots_written++,
      (error) => this.log(`ctxr serve: writing the shared state's snapshot failed: ${messageOf(error)}\n`),
    );
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
