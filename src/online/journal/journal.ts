/**
 * A durable journal: an append-only log of JSON records plus periodic snapshots, for state
 * that must survive `kill -9` at any moment. It knows nothing about what it stores.
 *
 * Numbering: every record gets a sequence number, 1 for the first record ever appended,
 * then consecutive. `journal.seq` is the number of the last record appended (0 when none);
 * append() gives its record `seq + 1` synchronously. Numbers continue across restarts
 * (after open, `seq` is the last recovered number) and start again from 0 after clear().
 * A number is skipped only when a damaged record was lost.
 *
 * On disk (see journalFiles.ts): log segments `log-<first seq>.jsonl`, one framed record a
 * line (framing.ts), and snapshots `snapshot-<seq>.json`. snapshot() starts a new segment,
 * writes the snapshot atomically, then deletes what is no longer needed. The two newest
 * snapshots are kept, with every segment the older of them needs, so a damaged newest
 * snapshot falls back to the previous one without losing records (and with a single
 * snapshot, the whole log is kept).
 *
 * Durability: append() resolves after its record is written and fdatasync'd; concurrent
 * appends share one write and one fdatasync (groupCommit.ts). After a failed write or sync
 * the journal rejects everything: reopen it to recover.
 */
import { mkdir } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { acquireDirectoryLock, type DirectoryLock } from "./directoryLock.ts";
import { JournalError, messageOf } from "./errors.ts";
import { closeFile, openFile, removeFile, syncData, syncDirectory, writeAll } from "./fileSystem.ts";
import { GroupCommitQueue, type GroupCommitStats } from "./groupCommit.ts";
import { listJournalFiles, segmentName } from "./journalFiles.ts";
import { finishClear, recoverJournal, type Recovered } from "./recovery.ts";
import { encodeSnapshot, writeSnapshotFile } from "./snapshotStore.ts";

export type { Recovered, RecoveryReport, SkippedBytes } from "./recovery.ts";
export type { GroupCommitStats } from "./groupCommit.ts";
export { JournalError } from "./errors.ts";

export interface JournalOptions {
  /** The journal directory; created (with its parents) if missing. One live journal a directory. */
  dir: string;
  /** fsync appends, snapshots and directory changes (default true). Off only for tests and benchmarks. */
  fsync?: boolean;
}

interface Segment {
  fd: number;
  firstSeq: number;
  path: string;
}

/** How many snapshots are kept (the newest, and one to fall back on). */
const KEPT_SNAPSHOTS = 2;

export class Journal<S, R> {
  /** The journal directory (absolute). */
  readonly dir: string;
  readonly #fsync: boolean;
  readonly #lock: DirectoryLock;
  readonly #queue: GroupCommitQueue;
  #segment: Segment;
  #seq: number;
  #closing: Promise<void> | null = null;
  /** Snapshot writes and clears, one after another. */
  #maintenance: Promise<void> = Promise.resolve();

  private constructor(dir: string, fsync: boolean, lock: DirectoryLock, segment: Segment, seq: number) {
    this.dir = dir;
    this.#fsync = fsync;
    this.#lock = lock;
    this.#segment = segment;
    this.#seq = seq;
    this.#queue = new GroupCommitQueue((bytes, length) => this.#writeBatch(bytes, length));
  }

  /**
   * Locks the directory, recovers its snapshot and records, and opens the journal for
   * appends. Throws a JournalError if another journal holds the directory, or if
   * acknowledged records are provably missing; a torn or corrupt log is repaired and
   * reported in `recovered.report`, never thrown.
   */
  static async open<S, R>(options: JournalOptions): Promise<{ journal: Journal<S, R>; recovered: Recovered<S, R> }> {
    const dir = resolve(options.dir);
    const fsync = options.fsync ?? true;
    const created = await mkdir(dir, { recursive: true });
    // Make new directories durable: fsync the parent of each one created.
    if (created !== undefined && fsync) {
      for (let path = dir; ; path = dirname(path)) {
        await syncDirectory(dirname(path));
        if (path === created || dirname(path) === path) break;
      }
    }
    const lock = acquireDirectoryLock(dir);
    try {
      const result = await recoverJournal<S, R>(dir, fsync);
      const segment = result.lastSegment
        ? { fd: await openFile(result.lastSegment.path, "a"), firstSeq: result.lastSegment.seq, path: result.lastSegment.path }
        : await createSegment(dir, result.seq + 1, fsync);
      return { journal: new Journal<S, R>(dir, fsync, lock, segment, result.seq), recovered: result.recovered };
    } catch (error) {
      lock.release();
      throw error;
    }
  }

  /** The seq of the last record appended (0 if none); the next record gets seq + 1. */
  get seq(): number {
    return this.#seq;
  }

  /** Write batches, records and bytes written since open. */
  get stats(): Readonly<GroupCommitStats> {
    return this.#queue.stats;
  }

  /**
   * Appends a record (serialised now, with JSON.stringify) as seq + 1. Resolves once it is
   * durably on disk. Records are persisted in call order. Rejects if the record is not
   * JSON-serialisable (nothing is appended then), or if the journal is closed or failed.
   */
  append(record: R): Promise<void> {
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    let json: string | undefined;
    try {
      json = JSON.stringify(record);
    } catch (error) {
      return Promise.reject(new JournalError(`record is not JSON-serialisable: ${messageOf(error)}`, { cause: error }));
    }
    if (json === undefined) return Promise.reject(new JournalError(`record is not JSON-serialisable: ${String(record)}`));
    const seq = this.#seq + 1;
    const durable = this.#queue.append(seq, json);
    this.#seq = seq;
    return durable;
  }

  /**
   * Writes a snapshot of `state`, which must reflect exactly the records appended so far
   * (`state` is serialised synchronously, inside this call: call it right after the last
   * mutation it covers). Later appends go to a new log segment. Resolves once the snapshot
   * is durable and what it makes unnecessary is deleted. The snapshot is written only after
   * every record it covers is durable, so it never holds a record whose append failed.
   */
  snapshot(state: S): Promise<void> {
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    const seq = this.#seq;
    let bytes: Uint8Array;
    try {
      bytes = encodeSnapshot(seq, { kind: "state", state });
    } catch (error) {
      return Promise.reject(new JournalError(`snapshot state is not JSON-serialisable: ${messageOf(error)}`, { cause: error }));
    }
    const rotated = this.#queue.enqueueTask(() => this.#rotate(seq + 1));
    rotated.catch(() => {}); // awaited below, possibly after it settles
    const done = this.#maintenance.then(async () => {
      await rotated;
      await writeSnapshotFile(this.dir, seq, bytes, this.#fsync);
      await this.#deleteUnneeded();
    });
    this.#maintenance = done.catch(() => {});
    return done;
  }

  /**
   * Deletes every snapshot and record, durably; `seq` is 0 again at once, so appends made
   * after this call belong to the fresh journal (they are written after the clear). Atomic
   * across a crash: a restart sees either everything before the clear or nothing.
   */
  clear(): Promise<void> {
    const refused = this.#refusal();
    if (refused) return Promise.reject(refused);
    const seqBefore = this.#seq;
    this.#seq = 0;
    const before = this.#maintenance;
    const cleared = this.#queue.enqueueTask(async () => {
      await before;
      // The commit point: a durable `cleared` marker newer than every snapshot.
      const marker = await writeSnapshotFile(this.dir, seqBefore, encodeSnapshot(seqBefore, { kind: "cleared" }), this.#fsync);
      await closeFile(this.#segment.fd);
      await finishClear(this.dir, { seq: seqBefore, path: marker }, this.#fsync);
      this.#segment = await createSegment(this.dir, 1, this.#fsync);
    });
    this.#maintenance = cleared.catch(() => {});
    return cleared;
  }

  /** Waits for pending appends and snapshots, closes the files and releases the lock. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#queue.drained();
      await this.#maintenance;
      await closeFile(this.#segment.fd).catch(() => {});
      this.#lock.release();
    })();
    return this.#closing;
  }

  #refusal(): JournalError | null {
    if (this.#closing) return new JournalError(`journal ${this.dir} is closed`);
    return this.#queue.failure;
  }

  async #writeBatch(bytes: Uint8Array, length: number): Promise<void> {
    const segment = this.#segment;
    try {
      await writeAll(segment.fd, bytes, length);
      if (this.#fsync) await syncData(segment.fd);
    } catch (error) {
      throw new JournalError(`${segment.path}: ${messageOf(error)}`, { cause: error });
    }
  }

  /** Starts the segment log-<firstSeq> for later appends (run by the queue, after earlier appends are durable). */
  async #rotate(firstSeq: number): Promise<void> {
    const current = this.#segment;
    if (current.firstSeq >= firstSeq) return; // it holds no record before firstSeq
    this.#segment = await createSegment(this.dir, firstSeq, this.#fsync);
    await closeFile(current.fd);
  }

  /**
   * Keeps the newest KEPT_SNAPSHOTS snapshots and the segments the oldest of them needs;
   * deletes older snapshots, then segments holding only records that snapshot covers.
   */
  async #deleteUnneeded(): Promise<void> {
    const { snapshots, segments } = await listJournalFiles(this.dir);
    if (snapshots.length < KEPT_SNAPSHOTS) return;
    const oldestKept = snapshots[snapshots.length - KEPT_SNAPSHOTS]!.seq;
    let deleted = 0;
    for (const snapshot of snapshots.slice(0, snapshots.length - KEPT_SNAPSHOTS)) {
      await removeFile(snapshot.path);
      deleted++;
    }
    // A segment is unneeded when the next one starts at or before the first record after oldestKept.
    for (let i = 0; i + 1 < segments.length && segments[i + 1]!.seq <= oldestKept + 1; i++) {
      await removeFile(segments[i]!.path);
      deleted++;
    }
    if (deleted > 0 && this.#fsync) await syncDirectory(this.dir);
  }
}

/** Creates (or opens, if present) log-<firstSeq>.jsonl for appending, durably. */
async function createSegment(dir: string, firstSeq: number, fsync: boolean): Promise<Segment> {
  const path = join(dir, segmentName(firstSeq));
  const fd = await openFile(path, "a");
  if (fsync) await syncDirectory(dir);
  return { fd, firstSeq, path };
}
