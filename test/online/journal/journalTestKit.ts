/** Shared helpers for the journal tests. */
import { afterEach } from "bun:test";
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Journal, type JournalOptions } from "../../../src/online/journal/journal.ts";

/** The record the tests append: its id is the seq it gets. */
export interface TestRecord {
  id: number;
  text?: string;
}
/** The state the tests snapshot: the ids of every record so far. */
export type TestState = number[];
export type TestJournal = Journal<TestState, TestRecord>;

const made: string[] = [];
afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temporary directory, removed after the current test. */
export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "ctxr-journal-test-"));
  made.push(dir);
  return dir;
}

/** A copy of `dir` in a fresh temporary directory (without its lock). */
export function copyDir(dir: string): string {
  const copy = tempDir();
  for (const name of readdirSync(dir)) if (name !== "journal.lock") cpSync(join(dir, name), join(copy, name));
  return copy;
}

export function openJournal(dir: string, options: Partial<JournalOptions> = {}) {
  return Journal.open<TestState, TestRecord>({ dir, ...options });
}

/** The ids a recovery yields: the snapshot's, then the replayed records'. */
export function recoveredIds(recovered: { snapshot: TestState | null; records: TestRecord[] }): number[] {
  return [...(recovered.snapshot ?? []), ...recovered.records.map((record) => record.id)];
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
}

/** Appends records `from..to` (ids = seqs), all issued at once, and mirrors them in `state`. */
export async function appendIds(journal: TestJournal, state: TestState, from: number, to: number, text?: string): Promise<void> {
  const pending: Promise<void>[] = [];
  for (let id = from; id <= to; id++) {
    state.push(id);
    pending.push(journal.append(text === undefined ? { id } : { id, text }));
  }
  await Promise.all(pending);
}

/** File names in `dir`, sorted. */
export function fileNames(dir: string): string[] {
  return readdirSync(dir).sort();
}

export function segmentFiles(dir: string): string[] {
  return fileNames(dir).filter((name) => name.startsWith("log-"));
}

export function snapshotFiles(dir: string): string[] {
  return fileNames(dir).filter((name) => /^snapshot-\d+\.json$/.test(name));
}

/** Replaces the byte at `offset` of a file with `value` (default: the byte XOR 0x01). */
export function flipByte(path: string, offset: number, value?: number): void {
  const bytes = readFileSync(path);
  bytes[offset] = value ?? bytes[offset]! ^ 0x01;
  writeFileSync(path, bytes);
}

/** Byte offsets at which each line of a file starts, and its length. */
export function lineOffsets(path: string): number[] {
  const bytes = readFileSync(path);
  const offsets = [0];
  for (let i = 0; i < bytes.length; i++) if (bytes[i] === 0x0a && i + 1 < bytes.length) offsets.push(i + 1);
  return offsets;
}
