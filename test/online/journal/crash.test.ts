/**
 * kill -9 at random moments: a child appends (with snapshots) as fast as it can and prints
 * every acknowledged id; after SIGKILL, the reopened journal must hold every acknowledged
 * record, in order, with no duplicates and no gaps. Rounds reuse one directory, so each
 * child also recovers from the previous crash.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";
import { seededRandom } from "../../../src/index/seededRandom.ts";
import { openJournal, range, recoveredIds, tempDir } from "./journalTestKit.ts";
import { scriptCommand, spawnPiped } from "../../../src/runtime/childProcess.ts";

const CHILD = join(import.meta.dirname, "crashChild.ts");

interface Round {
  /** Kill this many ms after the child printed "ready" (or, if negative, after spawning). */
  killAfterMs: number;
  snapshotEvery: number;
  checkLock?: boolean;
}

/** Runs one child until SIGKILL; returns the acknowledged ids it printed and what it recovered. */
async function crashRound(dir: string, round: Round): Promise<{ acknowledged: number[]; recoveredAtStart: number | null }> {
  const child = spawnPiped([...scriptCommand(CHILD), dir, "16", String(round.snapshotEvery)], { env: process.env });
  const kill = () => child.kill("SIGKILL");
  let killTimer: ReturnType<typeof setTimeout> | null = round.killAfterMs < 0 ? setTimeout(kill, -round.killAfterMs) : null;
  let text = "";
  let ready = false;
  const decoder = new TextDecoder();
  for await (const chunk of child.stdout) {
    text += decoder.decode(chunk, { stream: true });
    if (!ready && text.includes("\n")) {
      ready = true;
      if (round.checkLock) {
        await expect(openJournal(dir)).rejects.toThrow(`locked by process ${child.pid}`);
      }
      killTimer ??= setTimeout(kill, round.killAfterMs);
    }
  }
  await child.exited;
  if (killTimer) clearTimeout(killTimer);
  expect(child.signalCode).toBe("SIGKILL");
  const stderr = await new Response(child.stderr).text();
  expect(stderr).toBe("");
  // Only whole lines count: the child may have been killed in the middle of printing one.
  const complete = text.split("\n").slice(0, -1);
  const first = complete[0];
  const recoveredAtStart = first?.startsWith("ready ") ? Number(first.slice(6)) : null;
  const acknowledged = complete.slice(recoveredAtStart === null ? 0 : 1).map(Number);
  return { acknowledged, recoveredAtStart };
}

test("kill -9 at any moment loses no acknowledged record", async () => {
  const dir = tempDir();
  const random = seededRandom(20240611);
  const rounds: Round[] = [
    { killAfterMs: 150, snapshotEvery: 1000, checkLock: true },
    // Soon after spawning: while starting up, opening or recovering.
    { killAfterMs: -Math.floor(2 + random() * 20), snapshotEvery: 1000 },
    { killAfterMs: -Math.floor(20 + random() * 40), snapshotEvery: 1000 },
    ...Array.from({ length: 6 }, (_, i) => ({ killAfterMs: Math.floor(10 + random() * 300), snapshotEvery: [500, 1000, 2500][i % 3]! })),
  ];
  let expectedAtLeast = 0;
  let totalAcknowledged = 0;
  const report: string[] = [];
  for (const round of rounds) {
    const { acknowledged, recoveredAtStart } = await crashRound(dir, round);
    if (recoveredAtStart !== null) expect(recoveredAtStart).toBeGreaterThanOrEqual(expectedAtLeast);
    totalAcknowledged += acknowledged.length;
    const lastAcknowledged = Math.max(0, ...acknowledged);

    const { journal, recovered } = await openJournal(dir);
    const ids = recoveredIds(recovered);
    // In order, no duplicates, no gaps...
    expect(ids).toEqual(range(1, ids.length));
    // ...and every acknowledged record present (earlier rounds' too).
    expect(ids.length).toBeGreaterThanOrEqual(Math.max(lastAcknowledged, expectedAtLeast));
    expect(journal.seq).toBe(ids.length);
    report.push(
      `kill ${round.killAfterMs} ms: ${acknowledged.length} acked (last ${lastAcknowledged}), ${ids.length} recovered, ` +
        `snapshot ${recovered.report.snapshotSeq}, skipped ${recovered.report.skipped.length}`,
    );
    expectedAtLeast = ids.length;
    await journal.close();
  }
  // The test must have exercised real work.
  expect(totalAcknowledged).toBeGreaterThan(1000);
  if (process.env.JOURNAL_CRASH_VERBOSE) console.log(report.join("\n"));
}, 60_000);
