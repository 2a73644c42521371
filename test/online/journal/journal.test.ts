import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { JournalError } from "../../../src/online/journal/journal.ts";
import {
  appendIds,
  fileNames,
  openJournal,
  range,
  recoveredIds,
  segmentFiles,
  snapshotFiles,
  tempDir,
  type TestState,
} from "./journalTestKit.ts";
import { spawnPiped } from "../../../src/runtime/childProcess.ts";

describe("journal round trip", () => {
  test("a new directory (with missing parents) opens empty", async () => {
    const dir = join(tempDir(), "a", "b");
    const { journal, recovered } = await openJournal(dir);
    expect(recovered).toEqual({
      snapshot: null,
      records: [],
      report: { snapshotSeq: null, recordsReplayed: 0, skipped: [], discardedSnapshots: [] },
    });
    expect(journal.seq).toBe(0);
    expect(existsSync(dir)).toBe(true);
    await journal.close();
  });

  test("records appended one by one and concurrently come back in call order", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    for (let id = 1; id <= 20; id++) {
      state.push(id);
      await journal.append({ id, text: `sequential ${id}` });
    }
    await appendIds(journal, state, 21, 520, "concurrent ✓ with\nnewline");
    // Interleaved waves: each wave starts before the previous one is durable.
    const waves: Promise<void>[] = [];
    for (let wave = 0; wave < 10; wave++) waves.push(appendIds(journal, state, 521 + wave * 50, 570 + wave * 50));
    await Promise.all(waves);
    expect(journal.seq).toBe(1020);
    expect(journal.stats.batches).toBeLessThan(1020); // group commit shared writes
    await journal.close();

    const reopened = await openJournal(dir);
    expect(reopened.recovered.snapshot).toBeNull();
    expect(reopened.recovered.records.map((r) => r.id)).toEqual(range(1, 1020));
    expect(reopened.recovered.records[0]!.text).toBe("sequential 1");
    expect(reopened.recovered.records[100]!.text).toBe("concurrent ✓ with\nnewline");
    expect(reopened.recovered.report).toMatchObject({ recordsReplayed: 1020, skipped: [], discardedSnapshots: [] });
    expect(reopened.journal.seq).toBe(1020);
    // Numbering continues after a restart.
    await reopened.journal.append({ id: 1021 });
    expect(reopened.journal.seq).toBe(1021);
    await reopened.journal.close();
    const third = await openJournal(dir);
    expect(recoveredIds(third.recovered)).toEqual(range(1, 1021));
    await third.journal.close();
  });

  test("the log is one framed line per record", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    await appendIds(journal, [], 1, 3);
    await journal.close();
    const [segment] = segmentFiles(dir);
    expect(segment).toBe("log-0000000000000001.jsonl");
    const lines = readFileSync(join(dir, segment!), "utf8").split("\n");
    expect(lines.length).toBe(4);
    expect(lines[3]).toBe("");
    expect(lines[1]).toMatch(/^[0-9a-f]{8}\t2\t\{"id":2\}$/);
  });

  test("with fsync off it still round-trips", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir, { fsync: false });
    await appendIds(journal, [], 1, 100);
    await journal.snapshot(range(1, 100));
    await appendIds(journal, [], 101, 110);
    await journal.close();
    const reopened = await openJournal(dir, { fsync: false });
    expect(recoveredIds(reopened.recovered)).toEqual(range(1, 110));
    await reopened.journal.close();
  });

  test("a record that is not JSON-serialisable is rejected and takes no seq", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    await journal.append({ id: 1 });
    const cyclic: Record<string, unknown> = { id: 2 };
    cyclic.self = cyclic;
    await expect(journal.append(cyclic as never)).rejects.toThrow(JournalError);
    await expect(journal.append(undefined as never)).rejects.toThrow("not JSON-serialisable");
    await expect(journal.append({ id: 2, big: 10n } as never)).rejects.toThrow("not JSON-serialisable");
    expect(journal.seq).toBe(1);
    await journal.append({ id: 2 });
    await journal.close();
    const reopened = await openJournal(dir);
    expect(recoveredIds(reopened.recovered)).toEqual([1, 2]);
    await reopened.journal.close();
  });
});

describe("snapshots", () => {
  test("reopen gives the snapshot plus only the later records", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 100);
    await journal.snapshot(state);
    await appendIds(journal, state, 101, 130);
    await journal.close();
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual(range(1, 100));
    expect(recovered.records.map((r) => r.id)).toEqual(range(101, 130));
    expect(recovered.report).toMatchObject({ snapshotSeq: 100, recordsReplayed: 30, skipped: [] });
    expect(reopened.seq).toBe(130);
    await reopened.close();
  });

  test("a snapshot captures the state when called, not when written", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    const written = journal.snapshot(state);
    const more = appendIds(journal, state, 11, 20); // mutates `state` while the snapshot is pending
    await Promise.all([written, more]);
    await journal.close();
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual(range(1, 10));
    expect(recovered.records.map((r) => r.id)).toEqual(range(11, 20));
    await reopened.close();
  });

  test("segments and snapshots are deleted once two newer snapshots cover them", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state); // covers 1..10
    // With one snapshot the whole log stays, as the fallback for a damaged snapshot.
    expect(segmentFiles(dir)).toEqual(["log-0000000000000001.jsonl", "log-0000000000000011.jsonl"]);
    await appendIds(journal, state, 11, 20);
    await journal.snapshot(state); // covers 1..20
    expect(snapshotFiles(dir)).toEqual(["snapshot-0000000000000010.json", "snapshot-0000000000000020.json"]);
    expect(segmentFiles(dir)).toEqual(["log-0000000000000011.jsonl", "log-0000000000000021.jsonl"]);
    await appendIds(journal, state, 21, 30);
    await journal.snapshot(state); // covers 1..30
    expect(snapshotFiles(dir)).toEqual(["snapshot-0000000000000020.json", "snapshot-0000000000000030.json"]);
    expect(segmentFiles(dir)).toEqual(["log-0000000000000021.jsonl", "log-0000000000000031.jsonl"]);
    await appendIds(journal, state, 31, 35);
    await journal.close();
    expect(fileNames(dir).filter((name) => name.endsWith(".tmp"))).toEqual([]);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual(range(1, 30));
    expect(recovered.records.map((r) => r.id)).toEqual(range(31, 35));
    await reopened.close();
  });

  test("a snapshot with no appends since the last one changes nothing but the file", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    await appendIds(journal, [], 1, 5);
    await journal.snapshot(range(1, 5));
    await journal.snapshot(range(1, 5));
    await journal.snapshot(range(1, 5));
    expect(snapshotFiles(dir)).toEqual(["snapshot-0000000000000005.json"]);
    await journal.close();
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recoveredIds(recovered)).toEqual(range(1, 5));
    expect(recovered.records).toEqual([]);
    await reopened.close();
  });

  test("snapshots and appends issued together, without waiting, stay consistent", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    const pending: Promise<void>[] = [];
    for (let id = 1; id <= 2000; id++) {
      state.push(id);
      pending.push(journal.append({ id }));
      if (id % 250 === 0) pending.push(journal.snapshot(state));
    }
    await Promise.all(pending);
    await journal.close();
    expect(snapshotFiles(dir)).toEqual(["snapshot-0000000000001750.json", "snapshot-0000000000002000.json"]);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.report.snapshotSeq).toBe(2000);
    expect(recoveredIds(recovered)).toEqual(range(1, 2000));
    await reopened.close();
  });

  test("a snapshot at seq 0 (state before any record) works", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    await journal.snapshot([]);
    await appendIds(journal, [], 1, 3);
    await journal.close();
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual([]);
    expect(recovered.report.snapshotSeq).toBe(0);
    expect(recoveredIds(recovered)).toEqual([1, 2, 3]);
    await reopened.close();
  });
});

describe("clear", () => {
  test("deletes everything durably; seq restarts at 0 and later appends belong to the fresh journal", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 50);
    await journal.snapshot(state);
    await appendIds(journal, state, 51, 60);
    await journal.snapshot(state);
    const before = journal.append({ id: 61 }); // queued before the clear: written, then cleared
    const cleared = journal.clear();
    expect(journal.seq).toBe(0);
    const after = journal.append({ id: 1 }); // queued after: survives
    await Promise.all([before, cleared, after]);
    expect(fileNames(dir)).toEqual(["journal.lock", "log-0000000000000001.jsonl"]);
    await journal.append({ id: 2 });
    await journal.close();
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toBeNull();
    expect(recoveredIds(recovered)).toEqual([1, 2]);
    expect(reopened.seq).toBe(2);
    await reopened.close();
  });

  test("a snapshot pending when clear() is called finishes first and is cleared too", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 20);
    const snapshot = journal.snapshot(state);
    const cleared = journal.clear();
    const fresh = journal.snapshot([]);
    await Promise.all([snapshot, cleared, fresh]);
    await appendIds(journal, [], 1, 2);
    await journal.close();
    expect(snapshotFiles(dir)).toEqual(["snapshot-0000000000000000.json"]);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual([]);
    expect(recoveredIds(recovered)).toEqual([1, 2]);
    await reopened.close();
  });
});

describe("lock", () => {
  test("opening a directory twice fails with a clear error until the first is closed", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const second = openJournal(dir);
    await expect(second).rejects.toThrow(JournalError);
    await expect(openJournal(dir)).rejects.toThrow(`journal directory ${dir} is locked by this process`);
    await journal.append({ id: 1 }); // the failed open did not disturb the first
    await journal.close();
    expect(existsSync(join(dir, "journal.lock"))).toBe(false);
    const again = await openJournal(dir);
    expect(recoveredIds(again.recovered)).toEqual([1]);
    await again.journal.close();
  });

  test("a lock held by another live process is refused", async () => {
    const dir = tempDir();
    const other = spawnPiped(["sleep", "30"], { env: process.env });
    try {
      writeFileSync(join(dir, "journal.lock"), JSON.stringify({ pid: other.pid, startTime: null, token: "other" }));
      await expect(openJournal(dir)).rejects.toThrow(`locked by process ${other.pid}`);
    } finally {
      other.kill();
      await other.exited;
    }
    // Now that process is gone: the lock is stale and taken over.
    const { journal } = await openJournal(dir);
    await journal.close();
  });

  test("stale locks are taken over: dead pid, recycled pid, unreadable file", async () => {
    const dead = spawnPiped(["true"], { env: process.env });
    await dead.exited;
    const locks = [
      JSON.stringify({ pid: dead.pid, startTime: null, token: "dead" }),
      // Our own pid with another start time: a recycled pid (detectable where /proc exists).
      ...(existsSync("/proc/self/stat") ? [JSON.stringify({ pid: process.pid, startTime: "1", token: "recycled" })] : []),
      "",
      "{not json",
    ];
    for (const lock of locks) {
      const dir = tempDir();
      writeFileSync(join(dir, "journal.lock"), lock);
      const { journal } = await openJournal(dir);
      await journal.append({ id: 1 });
      await journal.close();
      expect(existsSync(join(dir, "journal.lock"))).toBe(false);
    }
  });

  test("a failed open releases the lock", async () => {
    const dir = tempDir();
    // A segment starting at 5 with no snapshot: records 1..4 are missing.
    writeFileSync(join(dir, "log-0000000000000005.jsonl"), "");
    await expect(openJournal(dir)).rejects.toThrow("cannot recover");
    expect(existsSync(join(dir, "journal.lock"))).toBe(false);
  });
});

describe("close", () => {
  test("waits for pending appends and snapshots; later calls are refused", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    const pending = appendIds(journal, state, 1, 100);
    const snapshot = journal.snapshot(state);
    await journal.close();
    await Promise.all([pending, snapshot]);
    await expect(journal.append({ id: 101 })).rejects.toThrow("is closed");
    await expect(journal.snapshot([])).rejects.toThrow("is closed");
    await expect(journal.clear()).rejects.toThrow("is closed");
    await journal.close(); // idempotent
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual(range(1, 100));
    await reopened.close();
  });
});
