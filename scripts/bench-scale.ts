/**
 * Several `ctxr serve` instances sharing state through Redis (issue 15 item 6).
 *
 *   npx bun scripts/bench-scale.ts [--quick] [--conversations N] [--turns T] [--seed S] [--json OUT]
 *     [--appendfsync everysec|always] [--parts compare,b2b,outage,kill] [--reps R] [--doc-chars C]
 *     [--engines E] [--concurrency K] [--duration-s D] [--outage-s O]
 *
 * Everything runs on loopback: a redis-server this script starts on a free port (its own temporary
 * --dir, `appendonly yes`, `appendfsync everysec` unless `--appendfsync always`), fake engines
 * (benchRoutingEngines.ts: `--engines` FakeEngines in one child process, no prefill time, no KV
 * events: a zero-latency engine) and real `ctxr serve` processes spawned as a user runs them, each
 * with `--upstream` for every engine. The workload is shared/workloads multiturn_C200_T5_k15_o40
 * (the first `--conversations`, turns up to `--turns`): every turn sends the whole history (earlier
 * user turns with their XML-tagged documents in full, the engine's fixed answer as the assistant's
 * messages) plus the new turn's documents (`--doc-chars` characters each). Rounds go one after
 * another (every conversation's turn 1, then turn 2, ...), conversations within a round shuffled
 * (seeded); with 3 instances each turn goes to an instance drawn at random (seeded, the same draws
 * in every run).
 *
 * Parts:
 * 1. compare: configurations side by side — 1 instance `--in-memory`, 1 instance `--state`,
 *    3 instances `--state`, and as a diagnostic 3 instances `--state` with every request sent to the
 *    first (the others only apply its changes) (each configuration its own engines and, for --state, its own
 *    --state-prefix on the one Redis). Requests go one at a time, each request of the workload
 *    sent to every configuration in turn (the order rotating), so drift and the other
 *    agents' load hit all three alike. Reported: prompt tokens received vs forwarded (ctxr's
 *    estimate, /v1/stats upstreams, summed over instances) and the engines' count (the usage's
 *    prompt_tokens vs the fake engine's tokenizer on the prompt as the client wrote it), and the
 *    end-to-end latency p50/p99 per configuration (the engine answers at once, so this is ctxr's
 *    time plus loopback HTTP twice); the first 20 requests each instance answers are not timed
 *    (warm-up). `--reps` repetitions with fresh processes; latency figures are medians over them.
 *    The CPU time of each ctxr process (/proc) is reported for rep 1.
 * 1b. b2b: 1 vs 3 instances `--state`, the same with each conversation's turns back to back (turn n+1 sent the moment turn n
 *    is answered, on another instance two times in three): the window in which another instance
 *    may not have applied the previous turn yet.
 * 2. outage: 3 instances, the workload paced over `--duration-s` (at most `--concurrency` in
 *    flight, a conversation's turns in order); redis-server is killed (SIGKILL) a third of the way
 *    in and restarted `--outage-s` later with the same --dir and AOF. Reported per phase
 *    (before / during / after): requests, errors, latency, forwarded tokens and savings; the time
 *    until every instance is healthy with nothing unsent; and, once caught up, each instance's
 *    contexts / conversations / remembered histories (equal across instances, and equal to the
 *    1-instance reference of part 1 when it ran).
 * 3. kill: 3 instances, paced the same way; one instance is killed with SIGKILL a third of the way
 *    in (requests in flight to it fail and are retried on another instance, as a load balancer
 *    would; later requests drawn for it go to the next live one) and a replacement started at
 *    once; after the run, its contexts / conversations / histories against the survivors'.
 *
 * The machine is shared: the load average (os.loadavg) is printed with the results.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { FAKE_ANSWER } from "../test/helpers/fakeEngine/fakeEngine.ts";
import { simpleTokenizer } from "../test/helpers/fakeEngine/fakeTokenizer.ts";
import { startRedisServer, type RedisServer } from "../test/helpers/redisServer.ts";
import { spawnServer, type SpawnedServer } from "../test/server/serverKit.ts";
import { REPO, median, percentile, progress } from "./benchKit.ts";
import { userTurnText, type WorkloadTurn } from "./benchPrefixChat.ts";
import { startEngines, type EngineFleet } from "./benchRoutingFleet.ts";
import { seeded } from "./benchTtfb.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean" },
    conversations: { type: "string" },
    turns: { type: "string", default: "5" },
    seed: { type: "string", default: "1" },
    json: { type: "string" },
    appendfsync: { type: "string", default: "everysec" },
    parts: { type: "string", default: "compare,b2b,outage,kill" },
    reps: { type: "string" },
    "doc-chars": { type: "string", default: "1000" },
    engines: { type: "string", default: "2" },
    concurrency: { type: "string", default: "4" },
    "duration-s": { type: "string" },
    "outage-s": { type: "string", default: "10" },
    workload: { type: "string", default: resolve(REPO, "../shared/workloads/data/multiturn_C200_T5_k15_o40.jsonl") },
  },
});
const QUICK = values.quick === true;
const CONVERSATIONS = Number(values.conversations ?? (QUICK ? 60 : 200));
const TURNS = Number(values.turns);
const SEED = Number(values.seed);
const REPS = Number(values.reps ?? (QUICK ? 1 : 3));
const DOC_CHARS = Number(values["doc-chars"]);
const ENGINES = Number(values.engines);
const CONCURRENCY = Number(values.concurrency);
const DURATION_S = Number(values["duration-s"] ?? (QUICK ? 30 : 45));
const OUTAGE_S = Number(values["outage-s"]);
const FSYNC = values.appendfsync!;
if (FSYNC !== "everysec" && FSYNC !== "always") throw new Error("--appendfsync takes everysec or always");
const PARTS = new Set(values.parts!.split(","));
const WARMUP = 20;
const INSTANCES = 3;

// ---------------------------------------------------------------------------------------------
// Workload

interface Request {
  conv: number;
  turn: number;
  body: string;
  /** The fake engine's prompt tokens for the prompt as the client wrote it. */
  original: number;
  /** The instance (of 3) this request is drawn for. */
  draw: number;
}

function workload(order: "rounds" | "conversation"): Request[] {
  const random = seeded(SEED);
  const turns = readFileSync(values.workload!, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as WorkloadTurn)
    .filter((t) => t.conv < CONVERSATIONS && t.turn <= TURNS)
    .map((t) => ({ t, shuffle: random() }))
    .sort((a, b) => (order === "rounds" ? a.t.turn - b.t.turn || a.shuffle - b.shuffle : a.shuffle - b.shuffle))
    .map(({ t }) => t);
  if (order === "conversation") {
    // Conversations in a shuffled order, each one's turns back to back.
    const first = new Map<number, number>();
    turns.forEach((t, i) => first.has(t.conv) || first.set(t.conv, i));
    turns.sort((a, b) => first.get(a.conv)! - first.get(b.conv)! || a.turn - b.turn);
  }
  const histories = new Map<number, { role: string; content: string }[]>();
  const draws = seeded(SEED * 7919 + 1);
  return turns.map((turn) => {
    const history = histories.get(turn.conv) ?? [];
    const messages = [...history, { role: "user", content: userTurnText(turn, turn.blocks.length, DOC_CHARS) }];
    histories.set(turn.conv, [...messages, { role: "assistant", content: FAKE_ANSWER }]);
    return {
      conv: turn.conv,
      turn: turn.turn,
      body: JSON.stringify({ model: "fake-model", max_tokens: 8, messages }),
      original: simpleTokenizer.promptIds(simpleTokenizer.chatPrompt(messages)).length,
      draw: Math.floor(draws() * INSTANCES),
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Instances

interface Instance {
  server: SpawnedServer;
  url: string;
  alive: boolean;
  stats(): Promise<any>;
  stop(): Promise<void>;
}

async function startInstance(engines: EngineFleet, state: { url: string; prefix: string } | null): Promise<Instance> {
  const server = await spawnServer(
    [
      ...(state === null ? ["--in-memory"] : ["--state", state.url, "--state-prefix", state.prefix]),
      ...engines.urls.flatMap((url) => ["--upstream", url]),
      "--max-body-bytes", String(64 * 1024 * 1024),
    ],
    {},
    60_000,
  );
  const instance: Instance = {
    server,
    url: server.url,
    alive: true,
    stats: async () => (await (await fetch(`${server.url}/v1/stats`)).json()) as any,
    stop: async () => {
      if (!instance.alive) return;
      instance.alive = false;
      server.kill("SIGTERM");
      await server.exited;
    },
  };
  return instance;
}

const startFleet = () => startEngines({ engines: ENGINES, blockSize: 16, capacityBlocks: 1 << 20, tokenizerDir: null, prefillMsPerToken: 0, kvEvents: false });

interface Reply {
  ok: boolean;
  ms: number;
  promptTokens: number;
  error: string | null;
}

async function send(url: string, body: string): Promise<Reply> {
  const started = performance.now();
  try {
    const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const text = await response.text();
    const ms = performance.now() - started;
    if (response.status !== 200) return { ok: false, ms, promptTokens: 0, error: `status ${response.status}: ${text.slice(0, 200)}` };
    return { ok: true, ms, promptTokens: (JSON.parse(text) as any).usage.prompt_tokens, error: null };
  } catch (error) {
    return { ok: false, ms: performance.now() - started, promptTokens: 0, error: error instanceof Error ? error.message : String(error) };
  }
}

/** ctxr's prompt-token estimate over every upstream of every instance given. */
async function proxyTokens(instances: Instance[]): Promise<{ received: number; forwarded: number; documents: number; deduplicated: number }> {
  const totals = { received: 0, forwarded: 0, documents: 0, deduplicated: 0 };
  for (const instance of instances) {
    for (const upstream of (await instance.stats()).upstreams) {
      totals.received += upstream.prompt_tokens_received;
      totals.forwarded += upstream.prompt_tokens_forwarded;
      totals.documents += upstream.documents;
      totals.deduplicated += upstream.documents_deduplicated;
    }
  }
  return totals;
}

interface Held {
  contexts: number;
  conversations: number;
  histories: number;
  index_tokens: number;
  last_entry: string | null;
}

const held = (stats: any): Held => ({
  contexts: stats.contexts,
  conversations: stats.conversations,
  histories: stats.proxy.history_conversations,
  index_tokens: stats.index_tokens,
  last_entry: stats.shared_state?.last_entry ?? null,
});
/** What the workload leaves (index tokens depend on what was forwarded, so not compared with a run that forwarded otherwise). */
const sameContent = (a: Held, b: Held) => a.contexts === b.contexts && a.conversations === b.conversations && a.histories === b.histories;
const sameHeld = (a: Held, b: Held) => a.contexts === b.contexts && a.conversations === b.conversations && a.histories === b.histories && a.index_tokens === b.index_tokens;

/**
 * Waits until every instance is healthy with nothing unsent or unconfirmed and all have read the
 * log to the same entry (at most `timeoutMs`); returns how long that took and what each holds.
 */
async function catchUp(instances: Instance[], timeoutMs = 30_000): Promise<{ ms: number; caughtUp: boolean; held: Held[]; equal: boolean }> {
  const started = performance.now();
  for (;;) {
    const all = await Promise.all(instances.map((instance) => instance.stats()));
    const settled = all.every((s) => s.shared_state.healthy && s.shared_state.unsent_batches === 0 && s.shared_state.unconfirmed_batches === 0);
    const sameEntry = all.every((s) => s.shared_state.last_entry === all[0].shared_state.last_entry);
    const holds = all.map(held);
    const equal = holds.every((h) => sameHeld(h, holds[0]!));
    const ms = performance.now() - started;
    if ((settled && sameEntry && equal) || ms > timeoutMs) return { ms, caughtUp: settled && sameEntry, held: holds, equal };
    await Bun.sleep(25);
  }
}

// ---------------------------------------------------------------------------------------------
// Part 1: compare

interface ConfigResult {
  name: string;
  instances: number;
  state: boolean;
  p50: number;
  p99: number;
  mean: number;
  timed: number;
  received: number;
  forwarded: number;
  documents: number;
  deduplicated: number;
  enginePrompt: number;
  original: number;
  held: Held[];
  errors: number;
  /** CPU ms each instance used over the whole run (start-up included). */
  cpu: number[];
}

interface Config {
  name: string;
  instances: Instance[];
  engines: EngineFleet;
  state: boolean;
  latencies: number[];
  answered: number[];
  /** Every request to the first instance (the others only apply its changes). */
  allToFirst: boolean;
  /** Engine prompt tokens of each request, by its index in the workload. */
  perRequest: number[];
  enginePrompt: number;
  original: number;
  errors: number;
}

async function startConfig(name: string, count: number, redis: RedisServer | null, prefix: string, allToFirst = false): Promise<Config> {
  const engines = await startFleet();
  const instances = await Promise.all(Array.from({ length: count }, () => startInstance(engines, redis === null ? null : { url: redis.url, prefix })));
  return { name, instances, engines, state: redis !== null, latencies: [], answered: new Array(count).fill(0), allToFirst, perRequest: [], enginePrompt: 0, original: 0, errors: 0 };
}

/** CPU time (user + system) a process has used so far, ms (Linux /proc). */
function cpuMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return Number.NaN;
  }
}

async function finishConfig(config: Config): Promise<ConfigResult> {
  const cpu = config.instances.map((instance) => cpuMs(instance.server.process.pid));
  const tokens = await proxyTokens(config.instances);
  const holds = config.state ? (await catchUp(config.instances)).held : [held(await config.instances[0]!.stats())];
  await Promise.all(config.instances.map((instance) => instance.stop()));
  await config.engines.stop();
  return {
    name: config.name,
    instances: config.instances.length,
    state: config.state,
    p50: percentile(config.latencies, 0.5),
    p99: percentile(config.latencies, 0.99),
    mean: config.latencies.reduce((a, b) => a + b, 0) / Math.max(1, config.latencies.length),
    timed: config.latencies.length,
    ...tokens,
    enginePrompt: config.enginePrompt,
    original: config.original,
    held: holds,
    errors: config.errors,
    cpu,
  };
}

async function sendTo(config: Config, request: Request, at: number): Promise<void> {
  const index = config.instances.length === 1 || config.allToFirst ? 0 : request.draw;
  const reply = await send(config.instances[index]!.url, request.body);
  if (!reply.ok) {
    config.errors++;
    if (config.errors <= 3) progress(`${config.name}: ${reply.error}`);
    return;
  }
  config.enginePrompt += reply.promptTokens;
  config.perRequest[at] = reply.promptTokens;
  config.original += request.original;
  if (++config.answered[index]! > WARMUP) config.latencies.push(reply.ms);
}

async function compare(redis: RedisServer): Promise<{ reps: ConfigResult[][]; loads: number[][]; threePerRequest: number[] }> {
  const requests = workload("rounds");
  const reps: ConfigResult[][] = [];
  const loads: number[][] = [];
  let threePerRequest: number[] = [];
  for (let rep = 0; rep < REPS; rep++) {
    const configs = [
      await startConfig("1 instance, --in-memory", 1, null, ""),
      await startConfig("1 instance, --state", 1, redis, `bench:r${rep}:one`),
      await startConfig("3 instances, --state", INSTANCES, redis, `bench:r${rep}:three`),
      await startConfig("3 instances, --state, every request to the 1st", INSTANCES, redis, `bench:r${rep}:first`, true),
    ];
    progress(`compare rep ${rep + 1}/${REPS}: ${requests.length} requests x ${configs.length} configurations`);
    for (const [i, request] of requests.entries()) {
      for (let k = 0; k < configs.length; k++) await sendTo(configs[(i + k) % configs.length]!, request, i);
      if ((i + 1) % 200 === 0) progress(`  ${i + 1}/${requests.length}`);
    }
    loads.push(loadavg());
    if (rep === 0) threePerRequest = configs[2]!.perRequest;
    reps.push(await Promise.all(configs.map(finishConfig)));
  }
  return { reps, loads, threePerRequest };
}

async function backToBack(redis: RedisServer): Promise<ConfigResult[]> {
  // Back to back: a conversation's next turn the moment the previous one is answered.
  const b2b = workload("conversation");
  const configs = [await startConfig("1 instance, --state", 1, redis, "bench:b2b:one"), await startConfig("3 instances, --state", INSTANCES, redis, "bench:b2b:three")];
  progress(`compare back to back: ${b2b.length} requests x ${configs.length} configurations`);
  for (const [i, request] of b2b.entries()) for (let k = 0; k < configs.length; k++) await sendTo(configs[(i + k) % configs.length]!, request, i);
  return await Promise.all(configs.map(finishConfig));
}

// ---------------------------------------------------------------------------------------------
// Paced runs (parts 2 and 3)

interface Sample {
  index: number;
  sentS: number;
  ms: number;
  ok: boolean;
  retried: boolean;
  promptTokens: number;
  original: number;
}

/**
 * Sends `requests` at a steady rate over DURATION_S (at most CONCURRENCY in flight, a conversation's
 * turns in order), each to its drawn instance or, when that one is down, the next live one; a
 * failed request is retried once on another live instance when `retry`.
 */
async function paced(requests: Request[], instances: () => Instance[], retry: boolean, events: { atS: number; run: () => Promise<void> }[]): Promise<Sample[]> {
  const samples: Sample[] = [];
  const intervalMs = (DURATION_S * 1000) / requests.length;
  const started = performance.now();
  const lastOfConversation = new Map<number, Promise<void>>();
  const inFlight = new Set<Promise<void>>();
  const pending = [...events].sort((a, b) => a.atS - b.atS);
  const eventRuns: Promise<void>[] = [];
  const pick = (draw: number, avoid: Instance | null): Instance | null => {
    const all = instances();
    for (let k = 0; k < all.length; k++) {
      const candidate = all[(draw + k) % all.length]!;
      if (candidate.alive && candidate !== avoid) return candidate;
    }
    return null;
  };
  for (const [i, request] of requests.entries()) {
    const due = started + i * intervalMs;
    while (pending.length > 0 && (performance.now() - started) / 1000 >= pending[0]!.atS) eventRuns.push(pending.shift()!.run());
    if (performance.now() < due) await Bun.sleep(due - performance.now());
    while (pending.length > 0 && (performance.now() - started) / 1000 >= pending[0]!.atS) eventRuns.push(pending.shift()!.run());
    while (inFlight.size >= CONCURRENCY) await Promise.race(inFlight);
    const before = lastOfConversation.get(request.conv);
    const sent = (async () => {
      await before;
      const sentS = (performance.now() - started) / 1000;
      const target = pick(request.draw, null);
      let reply = target === null ? { ok: false, ms: 0, promptTokens: 0, error: "no live instance" } : await send(target.url, request.body);
      let retried = false;
      if (!reply.ok && retry) {
        const other = pick(request.draw + 1, target);
        if (other !== null) {
          const again = await send(other.url, request.body);
          reply = { ...again, ms: reply.ms + again.ms };
          retried = true;
        }
      }
      samples.push({ index: i, sentS, ms: reply.ms, ok: reply.ok, retried, promptTokens: reply.promptTokens, original: request.original });
    })();
    const tracked: Promise<void> = sent.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
    lastOfConversation.set(request.conv, sent);
  }
  await Promise.all(inFlight);
  for (const event of pending) eventRuns.push(event.run());
  await Promise.all(eventRuns);
  return samples;
}

interface Phase {
  phase: string;
  requests: number;
  errors: number;
  retried: number;
  p50: number;
  p99: number;
  enginePrompt: number;
  original: number;
  /** The same requests' engine prompt tokens in part 1's 3-instance run (no fault), when it ran. */
  baseline: number | null;
}

let baselinePerRequest: number[] | null = null;

function phase(name: string, samples: Sample[]): Phase {
  const ok = samples.filter((s) => s.ok);
  const latencies = ok.map((s) => s.ms);
  return {
    phase: name,
    requests: samples.length,
    errors: samples.length - ok.length,
    retried: samples.filter((s) => s.retried).length,
    p50: latencies.length > 0 ? percentile(latencies, 0.5) : Number.NaN,
    p99: latencies.length > 0 ? percentile(latencies, 0.99) : Number.NaN,
    enginePrompt: ok.reduce((a, s) => a + s.promptTokens, 0),
    original: ok.reduce((a, s) => a + s.original, 0),
    baseline: baselinePerRequest === null ? null : ok.reduce((a, s) => a + (baselinePerRequest![s.index] ?? Number.NaN), 0),
  };
}

interface Timeline {
  t: number;
  instance: number;
  healthy: boolean;
  unsent: number;
  applied: number;
}

/** Polls every instance's shared_state every 100 ms until stopped. */
function watch(instances: () => Instance[], started: number): { timeline: Timeline[]; stop: () => Promise<void> } {
  const timeline: Timeline[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      await Promise.all(
        instances().map(async (instance, i) => {
          if (!instance.alive) return;
          try {
            const s = (await instance.stats()).shared_state;
            timeline.push({ t: (performance.now() - started) / 1000, instance: i, healthy: s.healthy, unsent: s.unsent_batches, applied: s.applied_changes });
          } catch {
            // killed meanwhile
          }
        }),
      );
      await Bun.sleep(100);
    }
  })();
  return {
    timeline,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

async function outage(redis: RedisServer) {
  const requests = workload("rounds");
  const engines = await startFleet();
  const prefix = "bench:outage";
  const instances = await Promise.all(Array.from({ length: INSTANCES }, () => startInstance(engines, { url: redis.url, prefix })));
  const killAt = DURATION_S / 3;
  const restartAt = killAt + OUTAGE_S;
  progress(`outage: ${requests.length} requests over ${DURATION_S} s, redis-server SIGKILL at ${killAt.toFixed(1)} s, restarted at ${restartAt.toFixed(1)} s`);
  const started = performance.now();
  const watcher = watch(() => instances, started);
  let killedAtS = Number.NaN;
  let restartedAtS = Number.NaN;
  let restartMs = Number.NaN;
  const samples = await paced(requests, () => instances, false, [
    {
      atS: killAt,
      run: async () => {
        killedAtS = (performance.now() - started) / 1000;
        await redis.kill();
      },
    },
    {
      atS: restartAt,
      run: async () => {
        const t = performance.now();
        await redis.start();
        restartMs = performance.now() - t;
        restartedAtS = (performance.now() - started) / 1000;
      },
    },
  ]);
  const endS = (performance.now() - started) / 1000;
  const done = await catchUp(instances);
  await watcher.stop();
  // The first poll after the restart at which every instance is healthy with nothing unsent.
  const polls = new Map<number, Timeline[]>();
  for (const row of watcher.timeline.filter((r) => r.t >= restartedAtS)) {
    const key = Math.round(row.t * 10);
    polls.set(key, [...(polls.get(key) ?? []), row]);
  }
  let healthyAfterS = Number.NaN;
  for (const [, rows] of [...polls.entries()].sort((a, b) => a[0] - b[0])) {
    if (rows.length === INSTANCES && rows.every((r) => r.healthy && r.unsent === 0)) {
      healthyAfterS = Math.max(...rows.map((r) => r.t)) - restartedAtS;
      break;
    }
  }
  const maxUnsent = Math.max(0, ...watcher.timeline.map((r) => r.unsent));
  const appliedAt = (t: number) => watcher.timeline.filter((r) => Math.abs(r.t - t) < 0.15);
  const tokens = await proxyTokens(instances);
  const stats = await Promise.all(instances.map((instance) => instance.stats()));
  await Promise.all(instances.map((instance) => instance.stop()));
  await engines.stop();
  return {
    requests: requests.length,
    killedAtS,
    restartedAtS,
    restartMs,
    endS,
    phases: [
      phase("before (Redis up)", samples.filter((s) => s.sentS < killedAtS)),
      phase(`during (Redis down ${OUTAGE_S} s)`, samples.filter((s) => s.sentS >= killedAtS && s.sentS < restartedAtS)),
      phase("after (Redis restarted)", samples.filter((s) => s.sentS >= restartedAtS)),
      phase("whole run", samples),
    ],
    healthyAfterS,
    maxUnsent,
    catchUpAfterRunMs: done.ms,
    caughtUp: done.caughtUp,
    equal: done.equal,
    held: done.held,
    tokens,
    sharedState: stats.map((s) => s.shared_state),
    appliedNearRestart: appliedAt(restartedAtS),
  };
}

async function killInstance(redis: RedisServer) {
  const requests = workload("rounds");
  const engines = await startFleet();
  const prefix = "bench:kill";
  const state = { url: redis.url, prefix };
  const instances = await Promise.all(Array.from({ length: INSTANCES }, () => startInstance(engines, state)));
  const killAt = DURATION_S / 3;
  progress(`kill: ${requests.length} requests over ${DURATION_S} s, one instance SIGKILLed at ${killAt.toFixed(1)} s and replaced`);
  const started = performance.now();
  let killedAtS = Number.NaN;
  let replacementReadyS = Number.NaN;
  let replacementStartMs = Number.NaN;
  const victim = 1;
  const samples = await paced(requests, () => instances, true, [
    {
      atS: killAt,
      run: async () => {
        killedAtS = (performance.now() - started) / 1000;
        const dead = instances[victim]!;
        dead.alive = false;
        dead.server.kill("SIGKILL");
        await dead.server.exited;
        const t = performance.now();
        const replacement = await startInstance(engines, state);
        replacementStartMs = performance.now() - t;
        replacementReadyS = (performance.now() - started) / 1000;
        instances[victim] = replacement;
      },
    },
  ]);
  const done = await catchUp(instances);
  const tokens = await proxyTokens(instances);
  await Promise.all(instances.map((instance) => instance.stop()));
  await engines.stop();
  return {
    requests: requests.length,
    killedAtS,
    replacementReadyS,
    replacementStartMs,
    phases: [
      phase("before the kill", samples.filter((s) => s.sentS < killedAtS)),
      phase("until the replacement listens", samples.filter((s) => s.sentS >= killedAtS && s.sentS < replacementReadyS)),
      phase("after", samples.filter((s) => s.sentS >= replacementReadyS)),
      phase("whole run", samples),
    ],
    catchUpMs: done.ms,
    caughtUp: done.caughtUp,
    equal: done.equal,
    held: done.held,
    tokens,
  };
}

// ---------------------------------------------------------------------------------------------

const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "–");
const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
const heldText = (h: Held) => `${h.contexts} / ${h.conversations} / ${h.histories} / ${h.index_tokens}`;

const command = `npx bun scripts/bench-scale.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(" ")}` : ""}`;
const lines: string[] = [
  `Command: \`${command}\` (Bun ${Bun.version}, ${cpus().length} CPUs shared with other work; load average at start ${loadavg().map((x) => x.toFixed(2)).join(" / ")})`,
  "",
  `Workload: ${values.workload!.split("/").pop()}, ${CONVERSATIONS} conversations × ${TURNS} turns, documents of ${DOC_CHARS} characters, seed ${SEED}; ${ENGINES} zero-latency fake engines behind every instance; redis-server ${spawnSync("redis-server", ["--version"], { encoding: "utf8" }).stdout.match(/v=(\S+)/)?.[1] ?? "?"} with appendonly yes, appendfsync ${FSYNC}.`,
  "",
];
const summary: Record<string, unknown> = { command, conversations: CONVERSATIONS, turns: TURNS, seed: SEED, appendfsync: FSYNC, loadStart: loadavg() };
const redis = await startRedisServer({ appendOnly: true, appendFsync: FSYNC });
let reference: Held | null = null;
const savings = (c: ConfigResult) => 1 - c.forwarded / c.received;
const engineSavings = (c: ConfigResult) => 1 - c.enginePrompt / c.original;
try {
  if (PARTS.has("compare")) {
    const result = await compare(redis);
    summary.compare = result;
    const names = result.reps[0]!.map((c) => c.name);
    const medianOf = (i: number, key: "p50" | "p99" | "mean") => median(result.reps.map((rep) => rep[i]![key]));
    const first = result.reps[0]!;
    reference = first[1]!.held[0]!;
    baselinePerRequest = result.threePerRequest;
    lines.push(
      `### Forwarded prompt tokens, 1 vs 3 instances (rounds: every conversation's turn n, then turn n+1; rep 1)`,
      "",
      "| configuration | errors | received (ctxr est.) | forwarded (ctxr est.) | savings | engine: original prompts | engine: prompt tokens | engine savings | documents / deduplicated |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
      ...first.map((c) => `| ${c.name} | ${c.errors} | ${c.received} | ${c.forwarded} | **${pct(savings(c))}** | ${c.original} | ${c.enginePrompt} | ${pct(engineSavings(c))} | ${c.documents} / ${c.deduplicated} |`),
      "",
    );
    if (result.reps.length > 1) {
      lines.push(`Savings of every rep (ctxr est.): ${names.map((name, i) => `${name}: ${result.reps.map((rep) => pct(savings(rep[i]!))).join(", ")}`).join("; ")}.`, "");
    }
    const base = medianOf(0, "p50");
    const base99 = medianOf(0, "p99");
    lines.push(
      `### Latency through ctxr (zero-latency engine, one request at a time, the configurations interleaved request by request; ms, median over ${REPS} rep${REPS > 1 ? "s" : ""}; load average after each rep: ${result.loads.map((l) => l[0]!.toFixed(2)).join(", ")})`,
      "",
      "| configuration | timed requests | p50 | p99 | mean | added p50 vs in-memory | added p99 vs in-memory |",
      "|---|---:|---:|---:|---:|---:|---:|",
      ...names.map((name, i) => `| ${name} | ${first[i]!.timed} | ${f2(medianOf(i, "p50"))} | ${f2(medianOf(i, "p99"))} | ${f2(medianOf(i, "mean"))} | ${i === 0 ? "" : `**${f2(medianOf(i, "p50") - base)}**`} | ${i === 0 ? "" : `**${f2(medianOf(i, "p99") - base99)}**`} |`),
      "",
    );
    lines.push(
      `CPU time of the ctxr processes over rep 1 (start-up included), ms: ${first.map((c) => `${c.name}: ${c.cpu.map((x) => x.toFixed(0)).join(" + ")}`).join("; ")}.`,
      "",
    );
    if (result.reps.length > 1) lines.push(`Per rep p50 / p99: ${names.map((name, i) => `${name}: ${result.reps.map((rep) => `${f2(rep[i]!.p50)} / ${f2(rep[i]!.p99)}`).join(", ")}`).join("; ")}.`, "");
    lines.push(
      `What each instance holds after catch-up (contexts / conversations / remembered histories / index tokens; the reference for parts 3 and 4 is the 1-instance --state one, index tokens aside): ${first.map((c) => `${c.name}: ${c.held.map(heldText).join(", ")}`).join("; ")}.`,
      "",
    );
  }
  if (PARTS.has("b2b")) {
    const rows = await backToBack(redis);
    summary.backToBack = rows;
    lines.push(
      `### Back to back (each conversation's turns one right after the other, a turn sent the moment the previous one is answered; one request at a time)`,
      "",
      "| configuration | errors | received (ctxr est.) | forwarded (ctxr est.) | savings | engine savings | documents / deduplicated |",
      "|---|---:|---:|---:|---:|---:|---:|",
      ...rows.map((c) => `| ${c.name} | ${c.errors} | ${c.received} | ${c.forwarded} | **${pct(savings(c))}** | ${pct(engineSavings(c))} | ${c.documents} / ${c.deduplicated} |`),
      "",
    );
  }
  const phaseRows = (phases: Phase[]) => [
    "| phase | requests | errors | retried | p50 ms | p99 ms | engine prompt tokens | original | savings | same requests without the fault (part 1, 3 instances) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...phases.map(
      (p) =>
        `| ${p.phase} | ${p.requests} | ${p.errors} | ${p.retried} | ${f2(p.p50)} | ${f2(p.p99)} | ${p.enginePrompt} | ${p.original} | ${p.original > 0 ? pct(1 - p.enginePrompt / p.original) : "–"} | ${p.baseline === null || p.original === 0 ? "–" : `${p.baseline} (${pct(1 - p.baseline / p.original)})`} |`,
    ),
  ];
  if (PARTS.has("outage")) {
    const r = await outage(redis);
    summary.outage = r;
    lines.push(
      `### Redis killed (SIGKILL) for ${OUTAGE_S} s and restarted (same --dir, AOF, appendfsync ${FSYNC}); 3 instances, ${r.requests} requests paced over ${DURATION_S} s, ≤ ${CONCURRENCY} in flight`,
      "",
      ...phaseRows(r.phases),
      "",
      `Redis killed at ${r.killedAtS.toFixed(1)} s, restarted at ${r.restartedAtS.toFixed(1)} s (answering PING ${r.restartMs.toFixed(0)} ms after the spawn); most unsent batches on one instance meanwhile: ${r.maxUnsent}. Every instance healthy with nothing unsent ${f2(r.healthyAfterS)} s after the restart; after the last request, converged (same log entry, nothing unconfirmed) within ${r.catchUpAfterRunMs.toFixed(0)} ms: ${r.caughtUp ? "yes" : "NO"}.`,
      "",
      `Held after catch-up (contexts / conversations / remembered histories / index tokens): ${r.held.map(heldText).join(", ")} — ${r.equal ? "equal across instances" : "**NOT equal across instances**"}${reference === null ? "" : `; the 1-instance reference (part 1) ${heldText(reference)}: ${r.held.every((h) => sameContent(h, reference!)) ? "equal" : "**different**"}`}.`,
      `shared_state after: ${r.sharedState.map((s: any) => `write_errors ${s.write_errors}, read_errors ${s.read_errors}, resyncs ${s.resyncs}, acknowledged_degraded ${s.acknowledged_degraded}, applied_changes ${s.applied_changes}`).join("; ")}.`,
      "",
    );
  }
  if (PARTS.has("kill")) {
    const r = await killInstance(redis);
    summary.kill = r;
    lines.push(
      `### One of 3 instances killed with SIGKILL and replaced; ${r.requests} requests paced over ${DURATION_S} s, ≤ ${CONCURRENCY} in flight (a request that fails is retried once on another instance)`,
      "",
      ...phaseRows(r.phases),
      "",
      `Killed at ${r.killedAtS.toFixed(1)} s; the replacement listened ${r.replacementStartMs.toFixed(0)} ms after its spawn (loaded from Redis). Converged after the run within ${r.catchUpMs.toFixed(0)} ms: ${r.caughtUp ? "yes" : "NO"}.`,
      "",
      `Held after catch-up (contexts / conversations / remembered histories / index tokens; the replacement is the 2nd): ${r.held.map(heldText).join(", ")} — ${r.equal ? "equal across instances" : "**NOT equal across instances**"}${reference === null ? "" : `; the 1-instance reference (part 1) ${heldText(reference)}: ${r.held.every((h) => sameContent(h, reference!)) ? "equal" : "**different**"}`}.`,
      "",
    );
  }
} finally {
  await redis.stop();
}
lines.push(`Load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(" / ")}.`, "");
summary.loadEnd = loadavg();
process.stdout.write(`${lines.join("\n")}\n`);
if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(summary, null, 2)}\n`);
