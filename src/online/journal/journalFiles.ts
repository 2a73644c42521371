/**
 * Names of the files in a journal directory, and listing them.
 *
 *   log-<first seq>.jsonl           a log segment; its first record has seq >= <first seq>
 *   snapshot-<seq>.json             a snapshot covering records 1..<seq>
 *   .snapshot-<seq>.json.<pid>.<n>.tmp   a snapshot being written (removed on open; see
 *                                   files/atomicFile.ts; snapshot-<seq>.json.tmp from older versions)
 *   snapshot-<seq>.json.damaged     a snapshot that failed its checks (kept for inspection)
 *   journal.lock                    the lock of the live process
 * Numbers are zero-padded to 16 digits, so name order is seq order.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { temporaryTarget } from "../../files/atomicFile.ts";

const DIGITS = 16;
const SEGMENT = /^log-(\d{16})\.jsonl$/;
const SNAPSHOT = /^snapshot-(\d{16})\.json$/;

export const LOCK_FILE = "journal.lock";
export const TMP_SUFFIX = ".tmp";
export const DAMAGED_SUFFIX = ".damaged";

export function segmentName(firstSeq: number): string {
  return `log-${String(firstSeq).padStart(DIGITS, "0")}.jsonl`;
}

export function snapshotName(seq: number): string {
  return `snapshot-${String(seq).padStart(DIGITS, "0")}.json`;
}

export interface NumberedFile {
  /** The segment's first seq, or the seq a snapshot covers. */
  seq: number;
  path: string;
}

export interface JournalFiles {
  /** Ascending by first seq. */
  segments: NumberedFile[];
  /** Ascending by covered seq. */
  snapshots: NumberedFile[];
  /** Leftover temporary files. */
  temporary: string[];
  /** Damaged snapshots kept for inspection. */
  damaged: string[];
}

export async function listJournalFiles(dir: string): Promise<JournalFiles> {
  const files: JournalFiles = { segments: [], snapshots: [], temporary: [], damaged: [] };
  for (const name of await readdir(dir)) {
    const segment = SEGMENT.exec(name);
    const snapshot = SNAPSHOT.exec(name);
    if (segment) files.segments.push({ seq: Number(segment[1]), path: join(dir, name) });
    else if (snapshot) files.snapshots.push({ seq: Number(snapshot[1]), path: join(dir, name) });
    else if (isTemporarySnapshot(name)) files.temporary.push(join(dir, name));
    else if (name.startsWith("snapshot-") && name.endsWith(DAMAGED_SUFFIX)) files.damaged.push(join(dir, name));
  }
  files.segments.sort((a, b) => a.seq - b.seq);
  files.snapshots.sort((a, b) => a.seq - b.seq);
  return files;
}

function isTemporarySnapshot(name: string): boolean {
  const target = temporaryTarget(name);
  if (target !== null) return SNAPSHOT.test(target);
  return name.startsWith("snapshot-") && name.endsWith(TMP_SUFFIX);
}
