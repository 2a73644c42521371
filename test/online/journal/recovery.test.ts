import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, renameSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { frameBytes } from "../../../src/online/journal/framing.ts";
import { JournalError } from "../../../src/online/journal/journal.ts";
import {
  appendIds,
  copyDir,
  fileNames,
  flipByte,
  lineOffsets,
  openJournal,
  range,
  recoveredIds,
  segmentFiles,
  snapshotFiles,
  tempDir,
  type TestState,
} from "./journalTestKit.ts";

/** A closed journal holding records 1..n (with some text, so records span many bytes). */
async function journalWith(n: number): Promise<string> {
  const dir = tempDir();
  const { journal } = await openJournal(dir);
  for (let id = 1; id <= n; id++) await journal.append({ id, text: `record ${id} `.repeat(3) });
  await journal.close();
  return dir;
}

describe("torn tail", () => {
  test("every cut point: complete records come back, the tail is reported and truncated, appends continue cleanly", async () => {
    const pristine = await journalWith(6);
    const segment = segmentFiles(pristine)[0]!;
    const size = statSync(join(pristine, segment)).size;
    const starts = lineOffsets(join(pristine, segment)); // record k starts at starts[k - 1]
    const lastStart = starts[5]!;
    const fifthStart = starts[4]!;
    // Every byte of the last record (mid-checksum, at the tabs, mid-JSON, just the newline
    // missing), a few inside the fifth, and the exact record boundaries.
    const cuts = [...range(lastStart, size), fifthStart + 1, fifthStart + 4, fifthStart + 9, fifthStart + 20, starts[1]!, 1, 0];
    for (const cut of cuts) {
      const dir = copyDir(pristine);
      truncateSync(join(dir, segment), cut);
      const complete = starts.filter((start, k) => (starts[k + 1] ?? size) <= cut).length;
      const goodEnd = complete === 0 ? 0 : (starts[complete] ?? size);

      const { journal, recovered } = await openJournal(dir);
      expect(recoveredIds(recovered)).toEqual(range(1, complete));
      if (cut === goodEnd) {
        expect(recovered.report.skipped).toEqual([]);
      } else {
        expect(recovered.report.skipped).toEqual([
          { file: join(dir, segment), offset: goodEnd, bytes: cut - goodEnd, reason: "torn tail" },
        ]);
      }
      expect(statSync(join(dir, segment)).size).toBe(goodEnd);
      expect(journal.seq).toBe(complete);

      await journal.append({ id: complete + 1, text: "after the tear" });
      await journal.close();
      const again = await openJournal(dir);
      expect(recoveredIds(again.recovered)).toEqual(range(1, complete + 1));
      expect(again.recovered.report.skipped).toEqual([]);
      await again.journal.close();
    }
  });

  test("a torn tail after a snapshot is repaired the same way", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await appendIds(journal, state, 11, 13);
    await journal.close();
    const segment = join(dir, "log-0000000000000011.jsonl");
    truncateSync(segment, statSync(segment).size - 5);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toEqual(range(1, 10));
    expect(recovered.records.map((r) => r.id)).toEqual([11, 12]);
    expect(recovered.report.skipped.map((s) => s.reason)).toEqual(["torn tail"]);
    await reopened.close();
  });

  test("garbage (zeros) after the last record is a torn tail", async () => {
    const dir = await journalWith(3);
    const segment = join(dir, segmentFiles(dir)[0]!);
    const size = statSync(segment).size;
    writeFileSync(segment, Buffer.concat([readFileSync(segment), Buffer.alloc(4096), Buffer.from("\n\n")]));
    const { journal, recovered } = await openJournal(dir);
    expect(recoveredIds(recovered)).toEqual([1, 2, 3]);
    expect(recovered.report.skipped).toEqual([{ file: segment, offset: size, bytes: 4098, reason: "torn tail" }]);
    expect(statSync(segment).size).toBe(size);
    await journal.close();
  });
});

describe("corrupt records in the middle", () => {
  test("a flipped byte: that record is skipped and reported, later records kept", async () => {
    for (const [where, reason] of [
      [20, "checksum mismatch"], // inside the JSON
      [2, "malformed frame"], // a checksum digit made non-hex ('0'..'9','a'..'f' XOR 0x01 stays hex only sometimes)
    ] as const) {
      const dir = await journalWith(8);
      const segment = join(dir, segmentFiles(dir)[0]!);
      const starts = lineOffsets(segment);
      const original = readFileSync(segment)[starts[3]! + where]!;
      // Record 4: replace one byte with one that breaks it the intended way.
      flipByte(segment, starts[3]! + where, reason === "malformed frame" ? 0x78 /* 'x' */ : original ^ 0x01);
      const { journal, recovered } = await openJournal(dir);
      expect(recoveredIds(recovered)).toEqual([1, 2, 3, 5, 6, 7, 8]);
      expect(recovered.report.skipped).toEqual([{ file: segment, offset: starts[3]!, bytes: starts[4]! - starts[3]!, reason }]);
      expect(journal.seq).toBe(8);
      await journal.append({ id: 9 });
      await journal.close();
      const again = await openJournal(dir);
      expect(recoveredIds(again.recovered)).toEqual([1, 2, 3, 5, 6, 7, 8, 9]);
      expect(again.recovered.report.skipped.length).toBe(1); // still there, still reported, never a crash
      await again.journal.close();
    }
  });

  test("several bad lines, a duplicate and a stray line are all skipped and reported", async () => {
    const dir = await journalWith(6);
    const segment = join(dir, segmentFiles(dir)[0]!);
    const bytes = readFileSync(segment);
    const starts = lineOffsets(segment);
    const line = (k: number) => bytes.subarray(starts[k - 1]!, starts[k] ?? bytes.length);
    const damaged2 = Buffer.from(line(2));
    damaged2[15]! ^= 0x04;
    writeFileSync(
      segment,
      Buffer.concat([line(1), damaged2, Buffer.from("hello world\n"), line(3), line(3), line(4), line(5), line(6)]),
    );
    const { journal, recovered } = await openJournal(dir);
    expect(recoveredIds(recovered)).toEqual([1, 3, 4, 5, 6]);
    expect(recovered.report.skipped.map((s) => s.reason)).toEqual(["checksum mismatch", "malformed frame", "malformed frame"]);
    await journal.close();
  });

  test("a bad last line in a segment that is not the last is reported, not truncated", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 5);
    await journal.snapshot(state);
    await appendIds(journal, state, 6, 8);
    await journal.close();
    // Damage the newest snapshot so that recovery needs log-1, then damage log-1's last record.
    flipByte(join(dir, "snapshot-0000000000000005.json"), 12);
    const first = join(dir, "log-0000000000000001.jsonl");
    const size = statSync(first).size;
    flipByte(first, size - 3);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recoveredIds(recovered)).toEqual([1, 2, 3, 4, 6, 7, 8]);
    expect(recovered.report.skipped.map((s) => [s.file, s.reason])).toEqual([[first, "checksum mismatch"]]);
    expect(statSync(first).size).toBe(size);
    await reopened.close();
  });
});

describe("damaged snapshots", () => {
  async function twoSnapshots(): Promise<string> {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await appendIds(journal, state, 11, 20);
    await journal.snapshot(state);
    await appendIds(journal, state, 21, 25);
    await journal.close();
    return dir;
  }

  const damages: [string, (path: string) => void, string][] = [
    ["a flipped byte", (path) => flipByte(path, 30), "checksum mismatch"],
    ["truncated", (path) => truncateSync(path, statSync(path).size - 4), "torn tail"],
    ["empty", (path) => truncateSync(path, 0), "empty file"],
    ["the wrong seq inside", (path) => writeFileSync(path, frameBytes(19, { state: range(1, 19) })), "covers seq 19 but is named for 20"],
    ["not a snapshot", (path) => writeFileSync(path, frameBytes(20, [1, 2])), "malformed frame"],
  ];
  for (const [what, damage, reason] of damages) {
    test(`newest snapshot ${what}: reported, renamed, and the previous snapshot plus the log recover everything`, async () => {
      const dir = await twoSnapshots();
      const newest = join(dir, "snapshot-0000000000000020.json");
      damage(newest);
      const { journal, recovered } = await openJournal(dir);
      expect(recovered.report.discardedSnapshots).toEqual([{ file: newest, reason }]);
      expect(recovered.report.snapshotSeq).toBe(10);
      expect(recovered.snapshot).toEqual(range(1, 10));
      expect(recoveredIds(recovered)).toEqual(range(1, 25));
      expect(existsSync(newest)).toBe(false);
      expect(existsSync(newest + ".damaged")).toBe(true);
      expect(journal.seq).toBe(25);
      // The journal goes on normally: append, snapshot, reopen.
      const state = recoveredIds(recovered);
      await appendIds(journal, state, 26, 30);
      await journal.snapshot(state);
      await journal.close();
      const again = await openJournal(dir);
      expect(again.recovered.report.discardedSnapshots).toEqual([]);
      expect(again.recovered.snapshot).toEqual(range(1, 30));
      await again.journal.close();
    });
  }

  test("the only snapshot damaged: a full replay of the kept log recovers everything", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await appendIds(journal, state, 11, 12);
    await journal.close();
    flipByte(join(dir, "snapshot-0000000000000010.json"), 25);
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toBeNull();
    expect(recovered.report.snapshotSeq).toBeNull();
    expect(recovered.report.discardedSnapshots.length).toBe(1);
    expect(recovered.records.map((r) => r.id)).toEqual(range(1, 12));
    await reopened.close();
  });

  test("both kept snapshots damaged after older log was deleted: a clear error, not a silent loss", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    for (const to of [10, 20, 30]) {
      await appendIds(journal, state, state.length + 1, to);
      await journal.snapshot(state);
    }
    await journal.close();
    for (const name of snapshotFiles(dir)) flipByte(join(dir, name), 25);
    const open = openJournal(dir);
    await expect(open).rejects.toThrow(JournalError);
    await expect(openJournal(dir)).rejects.toThrow("records 1..20 are missing");
  });

  test("a leftover temporary snapshot (crash while writing one) is removed and ignored", async () => {
    const dir = await twoSnapshots();
    // As an older version named it, and as files/atomicFile.ts names it.
    writeFileSync(join(dir, "snapshot-0000000000000025.json.tmp"), frameBytes(25, { state: [1] }).subarray(0, 9));
    writeFileSync(join(dir, ".snapshot-0000000000000026.json.4242.0.tmp"), frameBytes(26, { state: [1] }).subarray(0, 9));
    const { journal, recovered } = await openJournal(dir);
    expect(recovered.report.snapshotSeq).toBe(20);
    expect(recoveredIds(recovered)).toEqual(range(1, 25));
    expect(fileNames(dir).some((name) => name.endsWith(".tmp"))).toBe(false);
    await journal.close();
  });
});

describe("interrupted operations", () => {
  test("a clear cut short after its marker is durable finishes on open", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await appendIds(journal, state, 11, 15);
    await journal.close();
    // What clear() leaves if killed right after writing its marker.
    writeFileSync(join(dir, "snapshot-0000000000000015.json"), frameBytes(15, { cleared: true }));
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recovered.snapshot).toBeNull();
    expect(recovered.records).toEqual([]);
    expect(reopened.seq).toBe(0);
    expect(fileNames(dir)).toEqual(["journal.lock", "log-0000000000000001.jsonl"]);
    await reopened.append({ id: 1 });
    await reopened.close();
    const again = await openJournal(dir);
    expect(recoveredIds(again.recovered)).toEqual([1]);
    await again.journal.close();
  });

  test("a snapshot whose new segment was never created still recovers", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await journal.close();
    // Remove the (empty) segment the snapshot started.
    renameSync(join(dir, "log-0000000000000011.jsonl"), join(tempDir(), "gone"));
    const { journal: reopened, recovered } = await openJournal(dir);
    expect(recoveredIds(recovered)).toEqual(range(1, 10));
    expect(reopened.seq).toBe(10);
    await reopened.append({ id: 11 });
    await reopened.close();
    const again = await openJournal(dir);
    expect(recoveredIds(again.recovered)).toEqual(range(1, 11));
    await again.journal.close();
  });

  test("a missing segment in the middle of the log is a clear error", async () => {
    const dir = tempDir();
    const { journal } = await openJournal(dir);
    const state: TestState = [];
    await appendIds(journal, state, 1, 10);
    await journal.snapshot(state);
    await appendIds(journal, state, 11, 12);
    await journal.close();
    renameSync(join(dir, "log-0000000000000001.jsonl"), join(tempDir(), "gone"));
    flipByte(join(dir, "snapshot-0000000000000010.json"), 25);
    await expect(openJournal(dir)).rejects.toThrow("cannot recover the journal");
  });
});
