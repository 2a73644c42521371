/**
 * Crash test through the CLI: `ctxr serve --data-dir DIR` as a child process,
 * acknowledged writes (reorders, dedups, evicts) with requests in flight,
 * `kill -9` at a random moment (3 times), restart on the same directory: every
 * acknowledged change survived and the server starts cleanly. Then the same
 * with a graceful SIGTERM.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { seededRandom } from "../helpers/randomContexts.ts";
import { spawnServer, type Client, type SpawnedServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const folder = tempFolder("ctxr-crash-");
afterAll(() => folder.cleanup());

const workload = readFileSync(join(REPO_ROOT, "samples/zipf_N2000_k15.jsonl"), "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line) as number[]);

/** What the clients know for sure: acknowledged inserts, evictions and conversation blocks. */
class Ledger {
  /** Request ids of acknowledged reorders not (possibly) evicted since. */
  readonly present = new Set<string>();
  /** Ids certainly gone: acknowledged-evicted. */
  readonly gone = new Set<string>();
  /** Ids named in an evict request that was not acknowledged. */
  readonly uncertain = new Set<string>();
  /** Blocks each conversation was acknowledged to have been sent. */
  readonly conversations = new Map<string, Set<number>>();

  remember(conversation: string, blocks: readonly number[]): void {
    const seen = this.conversations.get(conversation) ?? new Set<number>();
    for (const b of blocks) seen.add(b);
    this.conversations.set(conversation, seen);
  }
}

class AnswerError extends Error {}

/**
 * Sends random writes with `inFlight` concurrent clients until stopped (or the
 * server goes away); records what was acknowledged. stop() resolves with the
 * number of acknowledged requests and the unexpected answers.
 */
function writeLoad(server: Client, ledger: Ledger, seed: number, inFlight: number): { stop(): Promise<{ acknowledged: number; failures: string[] }> } {
  const random = seededRandom(seed);
  let stopped = false;
  let acknowledged = 0;
  const failures: string[] = [];
  const pickLive = () => {
    const ids = [...ledger.present];
    return ids[Math.floor(random() * ids.length)];
  };
  const worker = async () => {
    while (!stopped) {
      const roll = random();
      try {
        if (roll < 0.55 || ledger.present.size === 0) {
          const contexts = Array.from({ length: 1 + Math.floor(random() * 2) }, () => workload[Math.floor(random() * workload.length)]!);
          const conversation = random() < 0.3 ? `conv-${Math.floor(random() * 8)}` : undefined;
          const answer = await server.post("/v1/reorder", conversation === undefined ? { contexts } : { contexts, conversation_id: conversation });
          if (answer.status !== 200) throw new AnswerError(`reorder answered ${answer.status}: ${answer.text}`);
          for (const r of answer.body.results) ledger.present.add(r.request_id);
          if (conversation !== undefined) ledger.remember(conversation, contexts.flat());
        } else if (roll < 0.8) {
          const ids = [pickLive()!, pickLive()!];
          for (const id of ids) {
            ledger.present.delete(id);
            ledger.uncertain.add(id);
          }
          const answer = await server.post("/v1/evict", { request_ids: ids.map((id, i) => (i === 0 ? `chatcmpl-${id}` : `cmpl-${id}-0-1f2e3d4c`)) });
          if (answer.status !== 200) throw new AnswerError(`evict answered ${answer.status}: ${answer.text}`);
          for (const id of ids) {
            ledger.uncertain.delete(id);
            ledger.gone.add(id);
          }
        } else {
          const conversation = `conv-${Math.floor(random() * 8)}`;
          const blocks = workload[Math.floor(random() * workload.length)]!;
          const answer = await server.post("/v1/dedup", { conversation_id: conversation, blocks });
          if (answer.status !== 200) throw new AnswerError(`dedup answered ${answer.status}: ${answer.text}`);
          ledger.remember(conversation, blocks);
        }
        acknowledged++;
      } catch (error) {
        if (error instanceof AnswerError) failures.push(error.message);
        // Otherwise the connection failed: the server is gone, and the request is not acknowledged.
        else return;
      }
    }
  };
  const workers = Array.from({ length: inFlight }, worker);
  return {
    async stop() {
      stopped = true;
      await Promise.all(workers);
      return { acknowledged, failures };
    },
  };
}

/** Checks that every acknowledged change is in the restarted server, then settles the uncertain ids. */
async function verify(server: SpawnedServer, ledger: Ledger): Promise<void> {
  const present = [...ledger.present];
  const stats = (await server.get("/v1/stats")).body;
  expect(stats.contexts).toBeGreaterThanOrEqual(present.length);
  // Each acknowledged, not evicted request id is evictable exactly once.
  expect((await server.post("/v1/evict", { request_ids: present })).body.evicted).toBe(present.length);
  expect((await server.post("/v1/evict", { request_ids: present })).body.evicted).toBe(0);
  // Acknowledged evictions stay evicted.
  expect((await server.post("/v1/evict", { request_ids: [...ledger.gone] })).body.evicted).toBe(0);
  for (const id of present) ledger.gone.add(id);
  ledger.present.clear();
  const uncertain = [...ledger.uncertain];
  const settled = (await server.post("/v1/evict", { request_ids: uncertain })).body.evicted;
  expect(settled).toBeLessThanOrEqual(uncertain.length);
  for (const id of uncertain) ledger.gone.add(id);
  ledger.uncertain.clear();
  // Conversations still know every acknowledged block.
  for (const [conversation, seen] of ledger.conversations) {
    const blocks = [...seen];
    for (let i = 0; i < blocks.length; i += 500) {
      const part = blocks.slice(i, i + 500);
      const answer = await server.post("/v1/dedup", { conversation_id: conversation, blocks: part });
      expect(answer.status).toBe(200);
      expect(answer.body.duplicates).toEqual(part);
    }
  }
}

function expectCleanStart(server: SpawnedServer, dataDir: string): void {
  const listening = server.startLines[server.startLines.length - 1]!;
  expect(listening).toBe(`ctxr serve: listening on ${server.url} (data: ${dataDir})`);
  expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  // Before the listening line, at most the recovery report (a torn tail cut by the kill).
  for (const line of server.startLines.slice(0, -1)) expect(line).toMatch(/^ctxr serve: recovery: /);
}

describe("ctxr serve with a data dir", () => {
  test("kill -9 while requests are in flight, 3 times: every acknowledged change survives the restart", async () => {
    const dataDir = join(folder.path, "killed");
    const ledger = new Ledger();
    const timing = seededRandom(99);
    for (let round = 0; round < 3; round++) {
      const server = await spawnServer(["--data-dir", dataDir]);
      expectCleanStart(server, dataDir);
      if (round > 0) await verify(server, ledger);
      const load = writeLoad(server, ledger, 1000 + round, 16);
      await Bun.sleep(300 + Math.floor(timing() * 700));
      server.kill("SIGKILL");
      const { acknowledged, failures } = await load.stop();
      await server.exited;
      expect(failures).toEqual([]);
      expect(acknowledged).toBeGreaterThan(20);
    }
    const restarted = await spawnServer(["--data-dir", dataDir]);
    try {
      expectCleanStart(restarted, dataDir);
      const stats = (await restarted.get("/v1/stats")).body;
      expect(stats.persistent).toBe(true);
      expect(stats.recovery).not.toBeNull();
      await verify(restarted, ledger);
    } finally {
      restarted.kill("SIGKILL");
      await restarted.exited;
    }
  });

  test("SIGTERM with requests in flight stops gracefully (exit 0, final snapshot); a restart has everything acknowledged", async () => {
    const dataDir = join(folder.path, "graceful");
    const ledger = new Ledger();
    const server = await spawnServer(["--data-dir", dataDir]);
    expectCleanStart(server, dataDir);
    const load = writeLoad(server, ledger, 7, 16);
    await Bun.sleep(500);
    server.kill("SIGTERM");
    expect(await server.exited).toBe(0);
    expect((await load.stop()).failures).toEqual([]);
    expect(server.stderr()).toContain("SIGTERM: shutting down");
    expect(server.stderr()).toContain(`stopped; state saved in ${dataDir}`);
    expect(ledger.present.size).toBeGreaterThan(20);

    const restarted = await spawnServer(["--data-dir", dataDir]);
    try {
      expect(restarted.startLines).toEqual([`ctxr serve: listening on ${restarted.url} (data: ${dataDir})`]);
      const stats = (await restarted.get("/v1/stats")).body;
      // Restored from the final snapshot alone.
      expect(stats.recovery.snapshotSeq).not.toBeNull();
      expect(stats.recovery.recordsReplayed).toBe(0);
      expect(stats.recovery.skipped).toEqual([]);
      await verify(restarted, ledger);
    } finally {
      restarted.kill("SIGTERM");
      expect(await restarted.exited).toBe(0);
    }
  });
});
