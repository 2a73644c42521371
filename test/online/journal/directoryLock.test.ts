/**
 * The data-directory lock and processes that have exited but are not reaped (zombies): the
 * parsing of /proc/<pid>/stat, a zombie's lock taken over, and end to end the case it is for —
 * `ctxr serve` killed with -9 under a parent that does not reap it (as npm does not while it
 * waits on nothing), then a second `ctxr serve` on the same data directory.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { acquireDirectoryLock, hasExited, parseProcessStat, type ProcessStat } from "../../../src/online/journal/directoryLock.ts";
import { CLI_ENTRY, REPO_ROOT } from "../../helpers/cli.ts";
import { spawnServer } from "../../server/serverKit.ts";
import { tempDir } from "./journalTestKit.ts";
import { sleep } from "../../../src/runtime/sleep.ts";
import { scriptCommand, spawnPiped } from "../../../src/runtime/childProcess.ts";

const HAS_PROC = existsSync("/proc/self/stat");

/** A /proc/<pid>/stat line with the given command name, state and start time. */
function statLine(comm: string, state: string, startTime: number): string {
  // Fields 4..52 after the state; field 22 is the start time.
  const rest = Array.from({ length: 49 }, (_, i) => String(i + 4));
  rest[22 - 4] = String(startTime);
  return `4242 (${comm}) ${state} ${rest.join(" ")}\n`;
}

function readStat(pid: number): ProcessStat | null {
  try {
    return parseProcessStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return null;
  }
}

/** Polls /proc/<pid>/stat until its state is `state` (or the time is up); returns the last stat read. */
async function waitForState(pid: number, state: string, timeoutMs = 5000): Promise<ProcessStat | null> {
  const deadline = Date.now() + timeoutMs;
  let stat = readStat(pid);
  while (stat?.state !== state && Date.now() < deadline) {
    await sleep(10);
    stat = readStat(pid);
  }
  return stat;
}

/** Reads a child's stdout line by line. */
function lineReader(stream: ReadableStream<Uint8Array>): { next(timeoutMs: number): Promise<string> } {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  return {
    async next(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const newline = buffered.indexOf("\n");
        if (newline >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          return line;
        }
        const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), Math.max(0, deadline - Date.now())));
        const read = await Promise.race([reader.read(), timeout]);
        if (read === "timeout") throw new Error(`no line in ${timeoutMs} ms (so far ${JSON.stringify(buffered)})`);
        if (read.done) throw new Error(`stdout ended (so far ${JSON.stringify(buffered)})`);
        buffered += decoder.decode(read.value, { stream: true });
      }
    },
  };
}

describe("parseProcessStat", () => {
  test("takes the fields after the last ')': a command name with spaces and parentheses", () => {
    expect(parseProcessStat(statLine("(a) b)", "Z", 987654))).toEqual({ state: "Z", startTime: "987654" });
    expect(parseProcessStat(statLine("bun", "S", 5))).toEqual({ state: "S", startTime: "5" });
    // A name that looks like fields: ") R 1 2 3".
    expect(parseProcessStat(statLine(") R 1 2 3", "X", 77))).toEqual({ state: "X", startTime: "77" });
    // A start time beyond 2^53 stays exact.
    const big = statLine("x", "R", 0).replace(/^(4242 \(x\) R(?: \S+){18}) 0 /, "$1 18446744073709551615 ");
    expect(parseProcessStat(big)?.startTime).toBe("18446744073709551615");
  });

  test("null for text not in that form", () => {
    expect(parseProcessStat("")).toBeNull();
    expect(parseProcessStat("4242 no parentheses S 1 2 3")).toBeNull();
    expect(parseProcessStat("4242 (short) S 1 2 3\n")).toBeNull();
    expect(parseProcessStat(statLine("x", "SS", 1))).toBeNull();
    expect(parseProcessStat(statLine("x", "S", 1).replace(" 21 1 ", " 21 one "))).toBeNull();
  });

  test.skipIf(!HAS_PROC)("reads this process's own /proc/self/stat", () => {
    const stat = parseProcessStat(readFileSync("/proc/self/stat", "utf8"));
    expect(stat?.state).toMatch(/^[RS]$/);
    expect(stat!.startTime).toMatch(/^\d+$/);
  });
});

describe("hasExited", () => {
  test("a zombie (Z) or a dead process (X) has exited; running, sleeping, stopped ones have not", () => {
    const stat = (state: string): ProcessStat => ({ state, startTime: "1" });
    expect(hasExited(stat("Z"))).toBe(true);
    expect(hasExited(stat("X"))).toBe(true);
    for (const state of ["R", "S", "D", "T", "t", "I"]) expect(hasExited(stat(state))).toBe(false);
  });
});

describe.skipIf(!HAS_PROC)("a lock held by a zombie", () => {
  test("is taken over; a lock held by a live process (same start-time check) is refused", async () => {
    // `sleep 0 &` exits at once; the shell then becomes `sleep 30`, which never reaps it.
    const parent = spawnPiped(["sh", "-c", 'sleep 0 & echo "$!"; exec sleep 30'], { env: process.env });
    try {
      const zombie = Number((await lineReader(parent.stdout).next(5000)).trim());
      const stat = await waitForState(zombie, "Z");
      expect(stat?.state).toBe("Z");
      expect(hasExited(stat!)).toBe(true);
      // kill(pid, 0) still finds it: the check that took it for a live owner.
      expect(process.kill(zombie, 0)).toBe(true);

      const dir = tempDir();
      const lockPath = join(dir, "journal.lock");
      writeFileSync(lockPath, JSON.stringify({ pid: zombie, startTime: stat!.startTime, token: "zombie" }));
      const lock = acquireDirectoryLock(dir);
      expect(JSON.parse(readFileSync(lockPath, "utf8")).pid).toBe(process.pid);
      lock.release();

      // The sleeping parent, with its real start time: alive, refused.
      writeFileSync(lockPath, JSON.stringify({ pid: parent.pid, startTime: readStat(parent.pid)!.startTime, token: "live" }));
      expect(() => acquireDirectoryLock(dir)).toThrow(`locked by process ${parent.pid}`);
    } finally {
      parent.kill("SIGKILL");
      await parent.exited;
    }
    // Its own waits (the zombie's pid line, its Z state) allow 5 s each on a loaded machine.
  }, 20_000);
});

describe.skipIf(!HAS_PROC)("ctxr serve killed with -9 under a parent that does not reap it", () => {
  test("a second ctxr serve on the same data directory starts, serves, and has every acknowledged change", async () => {
    const dataDir = join(tempDir(), "data");
    // The parent runs `ctxr serve` in the background, prints its pid, then becomes `sleep`,
    // which never waits for it: after kill -9 the server stays a zombie, as under `npm run`.
    const parent = spawnPiped(
      ["sh", "-c", '"$0" "$@" & echo "child $!"; exec sleep 120', ...scriptCommand(CLI_ENTRY), "serve", "--port", "0", "--data-dir", dataDir],
      { cwd: REPO_ROOT, env: { ...process.env, NO_COLOR: "1" } },
    );
    let childPid: number | null = null;
    try {
      const lines = lineReader(parent.stdout);
      let url: string | null = null;
      while (childPid === null || url === null) {
        const line = await lines.next(20_000);
        const child = /^child (\d+)$/.exec(line);
        if (child) childPid = Number(child[1]);
        const listening = /^ctxr serve: listening on (http:\/\/\S+) \(data: .+\)$/.exec(line);
        if (listening) url = listening[1]!;
      }
      expect(readStat(childPid)?.state).not.toBe("Z");
      const lockPath = join(dataDir, "journal.lock");
      expect(JSON.parse(readFileSync(lockPath, "utf8")).pid).toBe(childPid);

      // Acknowledged changes: reorders (inserts) and a conversation's blocks.
      const post = async (path: string, body: unknown) => {
        const response = await fetch(url + path, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
        expect(response.status).toBe(200);
        return (await response.json()) as any;
      };
      const requestIds: string[] = [];
      for (let i = 0; i < 5; i++) {
        const answer = await post("/v1/reorder", { contexts: [[i, i + 1, i + 2], [100 + i, 1, 2]] });
        for (const result of answer.results) requestIds.push(result.request_id);
      }
      await post("/v1/dedup", { conversation_id: "conv", blocks: [7, 8, 9] });

      process.kill(childPid, "SIGKILL");
      const stat = await waitForState(childPid, "Z");
      // The case itself: killed, not reaped, still holding its pid (and its lock file names it).
      expect(stat?.state).toBe("Z");
      expect(hasExited(stat!)).toBe(true);
      expect(JSON.parse(readFileSync(lockPath, "utf8")).pid).toBe(childPid);

      const restarted = await spawnServer(["--data-dir", dataDir]);
      try {
        expect(restarted.stderr()).not.toContain("locked by");
        expect(restarted.startLines[restarted.startLines.length - 1]).toBe(`ctxr serve: listening on ${restarted.url} (data: ${dataDir})`);
        expect(JSON.parse(readFileSync(lockPath, "utf8")).pid).toBe(restarted.process.pid);
        // The zombie is still there: the lock was taken over from it, not freed by its reaping.
        expect(readStat(childPid)?.state).toBe("Z");

        const stats = (await restarted.get("/v1/stats")).body;
        expect(stats.persistent).toBe(true);
        expect(stats.contexts).toBe(requestIds.length);
        expect((await restarted.post("/v1/evict", { request_ids: requestIds })).body.evicted).toBe(requestIds.length);
        const dedup = await restarted.post("/v1/dedup", { conversation_id: "conv", blocks: [7, 8, 9, 10] });
        expect(dedup.body.duplicates).toEqual([7, 8, 9]);
      } finally {
        restarted.kill("SIGTERM");
        expect(await restarted.exited).toBe(0);
      }
    } finally {
      if (childPid !== null) {
        try {
          process.kill(childPid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      // Killing the parent hands the zombie to init, which reaps it.
      parent.kill("SIGKILL");
      await parent.exited;
    }
  }, 60_000);
});
