import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ContextService } from "../../src/online/contextService.ts";
import { acquireDirectoryLock } from "../../src/online/journal/directoryLock.ts";
import { ServiceJournal } from "../../src/online/serviceJournal.ts";

const folders: string[] = [];
function freshDir(): string {
  const parent = mkdtempSync(join(tmpdir(), "ctxr-lazy-"));
  folders.push(parent);
  return join(parent, "ctxr-data");
}
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

describe("a data dir created on the first write", () => {
  test("not created by opening, reading or closing; created by the first change, every change of a burst kept in order", async () => {
    const dir = freshDir();
    const quiet = await ContextService.open({ dataDir: dir, createDataDirOnFirstWrite: true });
    expect(quiet.stats().persistent).toBe(true);
    expect(await quiet.evict(["nothing"])).toEqual({ evicted: 0 });
    await quiet.close();
    expect(existsSync(dir)).toBe(false);

    const writer = await ContextService.open({ dataDir: dir, createDataDirOnFirstWrite: true });
    // Concurrent changes while the journal is being opened: all of them, in order.
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => writer.reorder([[i, 1000 + i]])));
    expect(existsSync(join(dir, "journal.lock"))).toBe(true);
    await writer.close();
    const restored = await ContextService.open({ dataDir: dir, createDataDirOnFirstWrite: true });
    expect(restored.stats().contexts).toBe(20);
    const ids = answers.map((answer) => answer.results[0]!.request_id);
    expect(await restored.evict(ids.slice(0, 5))).toEqual({ evicted: 5 });
    await restored.close();
  });

  test("a directory locked by another journal meanwhile: the change fails with the lock's message and its fixes", async () => {
    const dir = freshDir();
    const service = await ContextService.open({ dataDir: dir, createDataDirOnFirstWrite: true });
    mkdirSync(dir);
    const lock = acquireDirectoryLock(dir);
    try {
      await expect(service.reorder([[1, 2]])).rejects.toThrow(/journal write failed; changes are not durable: .*is locked by this process.*--data-dir DIR.*--in-memory/);
      expect(service.failure).toContain("is locked by");
    } finally {
      lock.release();
      await service.close();
    }
  });

  test("a directory another server wrote to meanwhile is not taken over (its state would be lost)", async () => {
    const dir = freshDir();
    const service = await ContextService.open({ dataDir: dir, createDataDirOnFirstWrite: true });
    const other = await ContextService.open({ dataDir: dir });
    await other.reorder([[7, 8]]);
    await other.close();
    await expect(service.reorder([[1, 2]])).rejects.toThrow(/was created and written by another server after this one started; restart this one to load that state/);
    await service.close();
    // What the other one wrote is intact.
    const reopened = await ServiceJournal.open(dir);
    expect(reopened.recovered.snapshot?.contexts.length).toBe(1);
    await reopened.release();
  });
});
