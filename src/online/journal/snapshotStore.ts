/**
 * Snapshot files: one frame (see framing.ts) whose seq is the last record the snapshot
 * covers and whose value is `{"state": S}`, or `{"cleared": true}` for the marker that
 * Journal.clear() writes as its commit point.
 *
 * Writing is atomic (files/atomicFile.ts): a reader sees either no snapshot or a whole one.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeAllAsync, writeFileAtomicallyAsync } from "../../files/atomicFile.ts";
import { frameBytes, parseFrames } from "./framing.ts";
import { snapshotName } from "./journalFiles.ts";

export type SnapshotContent<S> = { kind: "state"; state: S } | { kind: "cleared" };

/** Encodes a snapshot file's bytes (synchronously, so `state` is captured as it is now). */
export function encodeSnapshot<S>(seq: number, content: SnapshotContent<S>): Uint8Array {
  return frameBytes(seq, content.kind === "state" ? { state: content.state } : { cleared: true });
}

/** Writes `bytes` as snapshot-<seq>.json atomically; returns its path. */
export async function writeSnapshotFile(dir: string, seq: number, bytes: Uint8Array, fsync: boolean): Promise<string> {
  const path = join(dir, snapshotName(seq));
  await writeFileAtomicallyAsync(path, (fd) => writeAllAsync(fd, bytes), { durable: fsync });
  return path;
}

export type SnapshotRead<S> = SnapshotContent<S> | { kind: "damaged"; reason: string };

/** Reads and checks a snapshot file; never throws. */
export async function readSnapshotFile<S>(path: string, expectedSeq: number): Promise<SnapshotRead<S>> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(path);
  } catch (error) {
    return { kind: "damaged", reason: `unreadable: ${(error as Error).message}` };
  }
  if (bytes.length === 0) return { kind: "damaged", reason: "empty file" };
  const { frames, bad } = parseFrames(bytes);
  if (bad.length > 0) return { kind: "damaged", reason: bad[0]!.reason };
  if (frames.length !== 1) return { kind: "damaged", reason: `expected one frame, found ${frames.length}` };
  const frame = frames[0]!;
  if (frame.seq !== expectedSeq) return { kind: "damaged", reason: `covers seq ${frame.seq} but is named for ${expectedSeq}` };
  const value = frame.value as { state?: S; cleared?: boolean } | null;
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    if ("state" in value) return { kind: "state", state: value.state as S };
    if (value.cleared === true) return { kind: "cleared" };
  }
  return { kind: "damaged", reason: "malformed frame" };
}
