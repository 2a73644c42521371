/**
 * A replica catching up on a backlog of large log entries (what another instance drains after
 * an outage) keeps answering requests: entries are decoded and applied one at a time, with the
 * request thread given back between them. Against a real redis-server and `ctxr serve --state`.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";
import { stats, until } from "./sharedStateKit.ts";

setDefaultTimeout(90_000);

let redis: RedisServer;
let replica: SpawnedServer | null = null;

beforeAll(async () => {
  redis = await startRedisServer({});
});
afterAll(async () => {
  replica?.kill(9);
  await replica?.exited;
  await redis.stop();
});

const ENTRIES = 120;
const INSERTS_PER_ENTRY = 2;

/** One entry of another instance: ~220 KB of index inserts (1,000 long block keys each). */
function entryChanges(e: number): string {
  return JSON.stringify(
    Array.from({ length: INSERTS_PER_ENTRY }, (_, i) => ({
      c: "service",
      r: { op: "insert", id: `backlog-${e}-${i}`, keys: Array.from({ length: 1000 }, (_, j) => `k-${e}-${i}-${j}-${"x".repeat(90)}`), tokens: Array(1000).fill(1), at: 1 },
    })),
  );
}

test("a backlog of large entries from another instance is applied between requests: /healthz keeps answering", async () => {
  replica = await spawnServer(["--state", redis.url]);
  await until("the replica to load", async () => (await stats(replica!)).shared_state.healthy);

  let worst = 0;
  let answered = 0;
  let watching = true;
  const watch = (async () => {
    while (watching) {
      const started = performance.now();
      const answer = await replica!.get("/healthz");
      expect(answer.status).toBe(200);
      worst = Math.max(worst, performance.now() - started);
      answered++;
      await Bun.sleep(5);
    }
  })();

  // Appended atomically, so the replica's tail reads the whole backlog in one page.
  const payloads = Array.from({ length: ENTRIES }, (_, e) => entryChanges(e));
  const writer = new Bun.RedisClient(redis.url);
  const script = "for i = 1, #ARGV do redis.call('XADD', KEYS[1], '*', 'o', 'other-instance', 'f', tostring(i), 'n', tostring(i), 'd', ARGV[i]) end return #ARGV";
  await writer.send("EVAL", [script, "1", "ctxr:state:log", ...payloads]);
  writer.close();
  const appended = performance.now();
  worst = 0;
  answered = 0;
  await until("the replica to apply the backlog", async () => (await stats(replica!)).shared_state.applied_entries === ENTRIES, 60_000);
  const applying = performance.now() - appended;
  const [longest, during] = [worst, answered];
  watching = false;
  await watch;

  console.log(`backlog of ${ENTRIES} entries (${(payloads.reduce((n, p) => n + p.length, 0) / 2 ** 20).toFixed(0)} MiB): applied in ${applying.toFixed(0)} ms; longest /healthz ${longest.toFixed(0)} ms; ${during} answered meanwhile`);
  expect((await stats(replica)).shared_state.skipped_entries).toBe(0);
  // Applied in one synchronous go, /healthz would wait for (nearly) all of it; entry by entry it waits for one.
  expect(longest).toBeLessThan(Math.max(100, applying / 3));
  expect(during).toBeGreaterThanOrEqual(3);
});
