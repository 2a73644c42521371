/**
 * bench-hostile's probes of the state shared through Redis (issue 27, items 9 and 10). Each
 * starts a fresh redis-server (AOF, appendfsync always) and `ctxr serve --state` instances with
 * default flags, attacks the log in Redis directly (as anyone who can write to it could), and
 * reports the longest /healthz answer on instance A during the probe (the stall), A's VmHWM, the
 * statuses, and whether every replica converged (same contexts and conversations, a new
 * instance loading the same).
 *
 *  state-garbage-entry   writes on A and B interleaved with `XADD * foo bar` and type-confused
 *                        change batches (a valid insert followed by a bad one).
 *  state-xdel            a garbage entry and the log's last entry deleted with XDEL, past a gap
 *                        check (6 s); then more writes.
 *  state-garbage-snapshot a garbage snapshot key after snapshots were written (--state-snapshot-every 50).
 *  state-outage-flood    Redis killed, A flooded with reorders of ~110 KB of changes each
 *                        (1,500; --quick 150) under the default --state-queue-bytes; Redis back.
 *                        The stall is also reported per phase (the flood while Redis is down,
 *                        the 503s, the drain, the final check), with B's stall while it applies
 *                        A's drained entries, and the same flood against an instance without
 *                        --state (what the reorders cost by themselves).
 */
import { startRedisServer, type RedisServer } from "../test/helpers/redisServer.ts";
import { spawnServer, type SpawnedServer } from "../test/server/serverKit.ts";
import { StatusTally, procStatusBytes, type HostileProbeResult } from "../test/security/hostileKit.ts";

export const SHARED_STATE_PROBES = ["state-garbage-entry", "state-xdel", "state-garbage-snapshot", "state-outage-flood"] as const;

export interface SharedStateProbeResult extends HostileProbeResult {
  stall_ms: number;
  converged: boolean;
}

interface Fixture {
  redis: RedisServer;
  instances: SpawnedServer[];
  tally: StatusTally;
  result: SharedStateProbeResult;
  start(...extra: string[]): Promise<SpawnedServer>;
  write(server: SpawnedServer, body: unknown, path?: string): Promise<number>;
  /** Counts 503s answered for a full outage queue. */
  refused(n: number): void;
  /** Starts the next phase of the probe: the stall is also reported per phase. */
  phase(name: string): void;
  /** Ends the probe's measurement on A (what follows does not count toward its stall). */
  stopWatching(): Promise<void>;
}

async function stats(server: SpawnedServer) {
  return (await server.get("/v1/stats")).body;
}

/** The longest /healthz answer on `server` until stopped, overall and per phase (`phase(name)` starts the next). */
function watchHealth(server: SpawnedServer): { phase(name: string): void; phases(): Record<string, number>; stop(): Promise<number> } {
  let worst = 0;
  let running = true;
  let current = "start";
  const byPhase: Record<string, number> = {};
  const loop = (async () => {
    while (running) {
      const started = performance.now();
      const phase = current;
      await server.get("/healthz").catch(() => {});
      const took = performance.now() - started;
      worst = Math.max(worst, took);
      byPhase[phase] = Math.max(byPhase[phase] ?? 0, Math.round(took));
      await Bun.sleep(20);
    }
  })();
  return {
    phase(name) {
      current = name;
    },
    phases: () => ({ ...byPhase }),
    async stop() {
      running = false;
      await loop;
      return worst;
    },
  };
}

async function converge(instances: SpawnedServer[], timeoutMs = 30_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const figures = await Promise.all(instances.map(stats));
    if (figures.every((f) => f.contexts === figures[0].contexts && f.conversations === figures[0].conversations)) return true;
    await Bun.sleep(50);
  }
  return false;
}

async function run(name: string, body: (fixture: Fixture) => Promise<void>): Promise<SharedStateProbeResult> {
  const redis = await startRedisServer({ appendOnly: true });
  const tally = new StatusTally();
  let refusedForQueue = 0;
  const result: SharedStateProbeResult = { probe: name, traffic: "", start_rss_bytes: 0, peak_rss_bytes: -1, rss_after_reset_bytes: null, wall_ms: 0, requests: 0, statuses: {}, five_xx: 0, p50_ms_before: null, p50_ms_during: null, notes: "", stall_ms: 0, converged: false };
  const instances: SpawnedServer[] = [];
  const fixture: Fixture = {
    redis,
    instances,
    tally,
    result,
    async start(...extra) {
      const server = await spawnServer(["--state", redis.url, ...extra]);
      instances.push(server);
      return server;
    },
    async write(server, body, path = "/v1/reorder") {
      const answer = await server.post(path, body);
      tally.add(answer.status, answer.text);
      return answer.status;
    },
    refused: () => {},
    phase: () => {},
    stopWatching: async () => {},
  };
  const started = performance.now();
  let watch: ReturnType<typeof watchHealth> | null = null;
  try {
    const a = await fixture.start();
    fixture.refused = (n: number) => void (refusedForQueue += n);
    result.start_rss_bytes = procStatusBytes(a.process.pid, "VmHWM") ?? -1;
    watch = watchHealth(a);
    fixture.phase = (phase) => watch!.phase(phase);
    fixture.stopWatching = async () => {
      if (watch === null) return;
      result.stall_ms = Math.round(await watch.stop());
      result.notes += ` stall by phase (ms): ${JSON.stringify(watch.phases())};`;
      watch = null;
    };
    await body(fixture);
  } catch (error) {
    result.notes += ` probe failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    result.wall_ms = Math.round(performance.now() - started);
    await fixture.stopWatching();
    if (instances[0] !== undefined) result.peak_rss_bytes = procStatusBytes(instances[0].process.pid, "VmHWM") ?? -1;
    for (const server of instances) {
      server.kill(9);
      await server.exited;
    }
    await redis.stop();
  }
  result.requests = tally.requests;
  result.statuses = tally.counts;
  // A 503 for a full outage queue is the designed answer to Redis being down, not a fault on client input.
  result.five_xx = tally.fiveHundreds - refusedForQueue;
  result.notes = `stall ${result.stall_ms} ms; converged: ${result.converged ? "yes" : "NO"};${result.notes}`;
  process.stderr.write(`${name}: peak ${(result.peak_rss_bytes / 2 ** 20).toFixed(0)} MiB, stall ${result.stall_ms} ms, converged ${result.converged}, ${JSON.stringify(result.statuses)}, ${result.wall_ms} ms;${result.notes}\n`);
  return result;
}

const context = (id: string) => ({ contexts: [[{ id, text: `document ${id} `.repeat(20) }]], conversation_id: `conv-${id.length % 7}` });
const confusedBatch = (i: number) => JSON.stringify([
  { c: "service", r: { op: "insert", id: `evil-${i}`, keys: [`evil-${i}`], tokens: [5], at: 1 } },
  { c: "service", r: { op: "insert", id: `evil-${i}b`, keys: `not-a-list`, tokens: [5], at: 1 } },
]);

/** Whether a new instance loads what the others hold, and all converge. */
async function finalCheck(fixture: Fixture): Promise<void> {
  const late = await fixture.start();
  fixture.result.converged = await converge(fixture.instances);
  const figures = await stats(late);
  fixture.result.notes += ` new instance loaded ${figures.contexts} contexts; skipped entries ${figures.shared_state.skipped_entries}, resyncs ${figures.shared_state.resyncs}, read errors ${figures.shared_state.read_errors};`;
  const evil = await late.post("/v1/evict", { request_ids: ["evil-0"] });
  if (evil.body?.evicted !== 0) fixture.result.notes += " a type-confused entry was half-applied!";
}

export async function stateGarbageEntry(quick: boolean): Promise<SharedStateProbeResult> {
  return run("state-garbage-entry", async (fixture) => {
    const [a] = fixture.instances;
    const b = await fixture.start();
    const rounds = quick ? 50 : 500;
    for (let i = 0; i < rounds; i++) {
      await fixture.write(i % 2 ? b : a!, context(`g${i}`));
      fixture.redis.cli("XADD", "ctxr:state:log", "*", "foo", "bar");
      fixture.redis.cli("XADD", "ctxr:state:log", "*", "o", "intruder", "f", String(i + 1), "n", String(i + 1), "d", confusedBatch(i));
    }
    await finalCheck(fixture);
    fixture.result.traffic = `${rounds} writes on 2 instances, each followed by XADD * foo bar and a type-confused batch`;
  });
}

export async function stateXdel(): Promise<SharedStateProbeResult> {
  return run("state-xdel", async (fixture) => {
    const [a] = fixture.instances;
    const b = await fixture.start();
    for (let i = 0; i < 20; i++) await fixture.write(i % 2 ? b : a!, context(`x${i}`));
    const garbage = fixture.redis.cli("XADD", "ctxr:state:log", "*", "foo", "bar").trim();
    await fixture.write(a!, context("after-garbage"));
    fixture.redis.cli("XDEL", "ctxr:state:log", garbage);
    const last = fixture.redis.cli("XADD", "ctxr:state:log", "*", "foo", "baz").trim();
    fixture.redis.cli("XDEL", "ctxr:state:log", last);
    await Bun.sleep(6_000);
    for (let i = 0; i < 20; i++) await fixture.write(i % 2 ? b : a!, context(`y${i}`));
    await finalCheck(fixture);
    fixture.result.traffic = "41 writes on 2 instances; XDEL of a garbage entry and of the log's last entry; 6 s past a gap check";
  });
}

export async function stateGarbageSnapshot(): Promise<SharedStateProbeResult> {
  return run("state-garbage-snapshot", async (fixture) => {
    const [a] = fixture.instances;
    for (let i = 0; i < 120; i++) await fixture.write(a!, context(`s${i}`));
    const b = await fixture.start("--state-snapshot-every", "50");
    for (let i = 120; i < 240; i++) await fixture.write(i % 2 ? b : a!, context(`s${i}`));
    fixture.redis.cli("SET", "ctxr:state:snapshot", "{garbage");
    const c = await fixture.start();
    const problem = (await stats(c)).shared_state.snapshot_problem;
    fixture.result.notes += ` new instance after the garbage snapshot: ${(await stats(c)).contexts} contexts (problem: ${problem});`;
    for (let i = 240; i < 260; i++) await fixture.write(c, context(`s${i}`));
    await finalCheck(fixture);
    fixture.result.traffic = "260 writes on 3 instances, snapshots every 50 entries, then SET ctxr:state:snapshot {garbage";
  });
}

/** ~110 KB of changes a request: 1,000 blocks with long ids (the index records their keys). */
const floodBody = (i: number) => ({ contexts: [Array.from({ length: 1000 }, (_, j) => ({ id: `flood-${i}-${j}-${"x".repeat(90)}`, tokens: 1 }))] });

/**
 * The same flood against an instance without --state (--in-memory, as an instance with --state
 * journals nothing locally): what `count` reorders of ~110 KB cost by themselves, as the longest
 * /healthz answer over the first `split` requests and the rest.
 */
async function floodWithoutState(count: number, split: number): Promise<Record<string, number>> {
  const server = await spawnServer(["--in-memory"]);
  try {
    const watch = watchHealth(server);
    watch.phase("first");
    for (let i = 0; i < count; i++) {
      if (i === split) watch.phase("rest");
      await server.post("/v1/reorder", floodBody(i));
    }
    await watch.stop();
    return watch.phases();
  } finally {
    server.kill(9);
    await server.exited;
  }
}

export async function stateOutageFlood(quick: boolean): Promise<SharedStateProbeResult> {
  return run("state-outage-flood", async (fixture) => {
    const [a] = fixture.instances;
    const b = await fixture.start();
    await fixture.write(a!, context("before"));
    await fixture.redis.kill();
    const count = quick ? 150 : 1500;
    let refused = 0;
    let retryAfter = "";
    fixture.phase("flood (Redis down)");
    for (let i = 0; i < count; i++) {
      const answer = await a!.post("/v1/reorder", floodBody(i));
      fixture.tally.add(answer.status, answer.text);
      if (answer.status === 503) {
        if (refused === 0) fixture.phase("503s");
        refused++;
        retryAfter = answer.headers.get("retry-after") ?? "";
      }
    }
    fixture.refused(refused);
    const queued = (await stats(a!)).shared_state.unsent_bytes;
    const downPeak = procStatusBytes(a!.process.pid, "VmHWM") ?? -1;
    fixture.phase("drain (Redis back)");
    // B applies the entries A drains: its own stall is measured too.
    const watchB = watchHealth(b);
    watchB.phase("drain");
    const back = performance.now();
    await fixture.redis.start();
    const deadline = Date.now() + 60_000;
    while ((await stats(a!)).shared_state.unsent_batches > 0 && Date.now() < deadline) await Bun.sleep(50);
    const drained = Math.round(performance.now() - back);
    const entries = (await stats(a!)).shared_state.appended_entries;
    fixture.result.notes += ` queue at the bound: ${(queued / 2 ** 20).toFixed(1)} MiB; ${refused} refused (Retry-After ${retryAfter}); peak while down ${(downPeak / 2 ** 20).toFixed(0)} MiB; drained in ${drained} ms as ${entries} entries;`;
    fixture.phase("final check");
    watchB.phase("final check");
    await finalCheck(fixture);
    await watchB.stop();
    await fixture.stopWatching();
    fixture.result.notes += ` stall on B, applying A's entries (ms): ${JSON.stringify(watchB.phases())};`;
    const baseline = await floodWithoutState(count, count - refused);
    fixture.result.notes += ` the same ${count} reorders on an instance without --state: stall ${JSON.stringify(baseline)} ms (first ${count - refused}, rest);`;
    fixture.result.traffic = `Redis killed; ${count} reorders of ~110 KB of changes on A (default --state-queue-bytes 64 MiB); Redis back`;
  });
}
