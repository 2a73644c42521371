/**
 * Whether a reader of the shared log missed entries it must reload from the snapshot. Entries
 * leave a Redis Stream two ways: trimming (ours, behind a snapshot: XTRIM MINID) removes the
 * oldest ones, and XDEL removes any single entry. Redis only says the highest id removed either
 * way (max-deleted-entry-id), so a removal past the reader is a trim it must reload after only
 * when the stream's first entry is also past the reader (trims take the front) and a snapshot
 * newer than the reader covers what went. Otherwise the gap was a deleted entry: every reader
 * skips it alike, and reading on is right. Pure.
 */
import { compareStreamIds } from "./streamIds.ts";

export interface StreamShape {
  /** The stream's highest removed entry id ("0-0": none). */
  maxDeletedId: string;
  /** Its first entry's id, null when it is empty. */
  firstId: string | null;
  /** The id the snapshot in Redis covers through, null when there is none or it is unreadable. */
  snapshotId: string | null;
}

export type GapVerdict =
  /** Nothing removed past what this reader has handled. */
  | "none"
  /** Entries after the reader were deleted one by one (XDEL): read on, and remember this removal as handled. */
  | "deleted"
  /** The log was trimmed past the reader: reload from the snapshot. */
  | "trimmed";

/** `lastId`: the reader's last entry; `handledThrough`: the highest removal already judged. */
export function judgeGap(shape: StreamShape, lastId: string, handledThrough: string): GapVerdict {
  const removedAfter = compareStreamIds(shape.maxDeletedId, lastId) > 0 && compareStreamIds(shape.maxDeletedId, handledThrough) > 0;
  if (!removedAfter) return "none";
  const frontPastReader = shape.firstId === null || compareStreamIds(shape.firstId, lastId) > 0;
  if (!frontPastReader) return "deleted";
  if (shape.snapshotId !== null && compareStreamIds(shape.snapshotId, lastId) > 0) return "trimmed";
  return "deleted";
}
