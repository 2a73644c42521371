/**
 * Recovery of a journal directory at open: load the newest usable snapshot, replay the
 * log records after it, and repair what a crash can leave behind.
 *
 *  - Snapshots are tried newest first; one that fails its checks is renamed to
 *    `*.damaged`, reported, and the next older one (or a full replay) is used. Journal keeps
 *    the log segments the second-newest snapshot needs, so one damaged snapshot loses nothing.
 *  - Segments are replayed in seq order from the one holding the first record after the
 *    snapshot. Frames carry their seq: records the snapshot covers are passed over, and a
 *    record whose seq does not increase is reported as a malformed frame and skipped.
 *  - A bad line followed by good ones (a flipped bit) is skipped and reported. Bad lines at
 *    the end of the last segment are a torn tail (a write cut short by a crash): reported
 *    as one "torn tail" entry and truncated away, so later appends follow the last good record.
 *  - A `clear` marker as newest snapshot means a clear() was cut short: it is finished.
 *  - Leftover temporary snapshot files are removed.
 * Recovery throws only when acknowledged records are provably gone (a log segment is missing
 * and no snapshot covers the gap) or the directory cannot be read or written.
 */
import { readFile, rename } from "node:fs/promises";
import { closeFile, openFile, removeFile, syncDirectory, syncFile, truncateFile } from "./fileSystem.ts";
import { JournalError } from "./errors.ts";
import { parseFrames } from "./framing.ts";
import { DAMAGED_SUFFIX, listJournalFiles, type NumberedFile } from "./journalFiles.ts";
import { readSnapshotFile } from "./snapshotStore.ts";

export interface SkippedBytes {
  file: string;
  offset: number;
  bytes: number;
  reason: "torn tail" | "checksum mismatch" | "malformed frame";
}

export interface RecoveryReport {
  /** The seq covered by the loaded snapshot; null when none was loaded. */
  snapshotSeq: number | null;
  /** Records returned after the snapshot. */
  recordsReplayed: number;
  /** Bad log bytes passed over (file paths are full paths). */
  skipped: SkippedBytes[];
  /** Snapshots that failed their checks (renamed to `<file>.damaged`). */
  discardedSnapshots: { file: string; reason: string }[];
}

export interface Recovered<S, R> {
  snapshot: S | null;
  /** Records after the snapshot, in seq order. */
  records: R[];
  report: RecoveryReport;
}

export interface RecoveryResult<S, R> {
  recovered: Recovered<S, R>;
  /** The highest seq in use: the next record gets seq + 1. */
  seq: number;
  /** The last log segment (its torn tail already cut off), where appends continue; null if none. */
  lastSegment: NumberedFile | null;
}

export async function recoverJournal<S, R>(dir: string, fsync: boolean): Promise<RecoveryResult<S, R>> {
  const files = await listJournalFiles(dir);
  for (const path of files.temporary) await removeFile(path);
  const report: RecoveryReport = { snapshotSeq: null, recordsReplayed: 0, skipped: [], discardedSnapshots: [] };
  let highestSeq = files.snapshots.length > 0 ? files.snapshots[files.snapshots.length - 1]!.seq : 0;

  let base: { seq: number; state: S } | null = null;
  for (let i = files.snapshots.length - 1; i >= 0; i--) {
    const file = files.snapshots[i]!;
    const read = await readSnapshotFile<S>(file.path, file.seq);
    if (read.kind === "damaged") {
      report.discardedSnapshots.push({ file: file.path, reason: read.reason });
      await rename(file.path, file.path + DAMAGED_SUFFIX);
      continue;
    }
    if (read.kind === "cleared") {
      await finishClear(dir, file, fsync);
      return { recovered: { snapshot: null, records: [], report }, seq: 0, lastSegment: null };
    }
    base = { seq: file.seq, state: read.state };
    break;
  }
  if (report.discardedSnapshots.length > 0 && fsync) await syncDirectory(dir);

  const baseSeq = base?.seq ?? 0;
  const segments = files.segments;
  // The segment holding record baseSeq + 1 is the last one starting at or before it.
  let first = segments.length;
  while (first > 0 && segments[first - 1]!.seq > baseSeq + 1) first--;
  first--;
  const lost = segments.length > 0 ? first < 0 : report.discardedSnapshots.length > 0 && base === null;
  if (lost) {
    const after = base ? `after snapshot ${baseSeq}` : "and no usable snapshot is left";
    const gap = segments.length > 0 ? `records ${baseSeq + 1}..${segments[0]!.seq - 1}` : "all records";
    throw new JournalError(
      `cannot recover the journal in ${dir}: ${gap} are missing (no log segment holds them ${after}); ` +
        `move the directory aside to start empty`,
    );
  }

  const records: R[] = [];
  let lastSeq = baseSeq;
  for (let i = Math.max(first, 0); i < segments.length; i++) {
    const segment = segments[i]!;
    const isLast = i === segments.length - 1;
    const bytes = await readFile(segment.path);
    const { frames, bad } = parseFrames(bytes);
    const goodEnd = frames.length > 0 ? frames[frames.length - 1]!.end : 0;
    for (const entry of bad) {
      if (isLast && entry.offset >= goodEnd) break;
      report.skipped.push({ file: segment.path, ...entry });
    }
    if (isLast && goodEnd < bytes.length) {
      report.skipped.push({ file: segment.path, offset: goodEnd, bytes: bytes.length - goodEnd, reason: "torn tail" });
      await truncate(segment.path, goodEnd, fsync);
    }
    for (const frame of frames) {
      if (frame.seq <= lastSeq) {
        if (frame.seq > baseSeq) report.skipped.push({ file: segment.path, offset: frame.offset, bytes: frame.end - frame.offset, reason: "malformed frame" });
        continue;
      }
      records.push(frame.value as R);
      lastSeq = frame.seq;
    }
  }

  const lastSegment = segments.length > 0 ? segments[segments.length - 1]! : null;
  highestSeq = Math.max(highestSeq, lastSeq, lastSegment ? lastSegment.seq - 1 : 0);
  report.snapshotSeq = base ? base.seq : null;
  report.recordsReplayed = records.length;
  return { recovered: { snapshot: base ? base.state : null, records, report }, seq: highestSeq, lastSegment };
}

async function truncate(path: string, length: number, fsync: boolean): Promise<void> {
  const fd = await openFile(path, "r+");
  try {
    await truncateFile(fd, length);
    if (fsync) await syncFile(fd);
  } finally {
    await closeFile(fd);
  }
}

/**
 * Deletes every snapshot and segment except `marker`, then the marker itself: the state
 * a completed clear() leaves. Safe to repeat after a crash at any point.
 */
export async function finishClear(dir: string, marker: NumberedFile, fsync: boolean): Promise<void> {
  const files = await listJournalFiles(dir);
  for (const file of [...files.segments, ...files.snapshots]) if (file.path !== marker.path) await removeFile(file.path);
  for (const path of [...files.temporary, ...files.damaged]) await removeFile(path);
  if (fsync) await syncDirectory(dir);
  await removeFile(marker.path);
  if (fsync) await syncDirectory(dir);
}
