/**
 * Where `--kv-events-publish`'s connection handling runs (issue 27): the publisher in this process,
 * on the request thread (KvEventPublisher) or on a thread of its own (KvEventsPublishThread), while
 * a child process opens --connections idle TCP connections to its PUB port (and waits until the
 * server has closed them all: refused at the cap, or at the handshake deadline). Reports, per
 * run, the CPU time each thread of this process used during the flood (/proc/self/task) and the
 * request thread's event-loop lag (a 2 ms timer's longest gap; `idle` is the same timer with no
 * publisher and no flood, the machine's floor).
 *
 * Usage: npx bun scripts/bench-kv-publish-thread.ts [--connections 19990] [--runs 3]
 * Prints a line per run on stderr, then a markdown table and a JSON line on stdout.
 */
import { readdirSync, readFileSync } from "node:fs";
import { KvEventPublisher, parseKvEventsPublish } from "../src/server/kvEventPublisher.ts";
import { KvEventsPublishThread } from "../src/server/kvEventsPublishThread.ts";
import { floodConnections } from "../test/security/kvEventsHostileKit.ts";

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args[at + 1] !== undefined ? args[at + 1]! : fallback;
};

// The flooding child: `--flood PORT COUNT`.
if (args[0] === "--flood") {
  const [port, count] = [Number(args[1]), Number(args[2])];
  const flood = await floodConnections(port, count);
  const deadline = Date.now() + 60_000;
  while (flood.closed() < count && Date.now() < deadline) await Bun.sleep(20);
  for (const socket of flood.sockets) socket.destroy();
  console.log(JSON.stringify({ closed: flood.closed() }));
  process.exit(0);
}

const CONNECTIONS = Number(option("--connections", "19990"));
const RUNS = Number(option("--runs", "3"));
const IDLE_MS = 6000;
const CLOCK_TICK_MS = 10; // USER_HZ 100

type Placement = "request thread" | "own thread" | "idle";

/** CPU time (ms) of each thread of this process, by "tid:name". */
function threadCpuMs(): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync("/proc/self/task")) {
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    out.set(`${tid}:${name}`, (Number(fields[11]) + Number(fields[12])) * CLOCK_TICK_MS);
  }
  return out;
}

/** The longest gap between the ticks of a 2 ms timer on this thread, while `work` runs. */
async function longestLag(work: () => Promise<void>): Promise<number> {
  let longest = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 2);
  await work();
  clearInterval(timer);
  return longest;
}

interface RunResult {
  placement: Placement;
  closed: number;
  wall_ms: number;
  request_thread_cpu_ms: number;
  publisher_thread_cpu_ms: number | null;
  longest_lag_ms: number;
}

async function run(placement: Placement): Promise<RunResult> {
  const mainThread = `${process.pid}:`;
  const options = parseKvEventsPublish("tcp://127.0.0.1:0");
  const publisher = placement === "idle" ? null : placement === "request thread" ? await KvEventPublisher.open(options) : await KvEventsPublishThread.open(options);
  await Bun.sleep(200);
  const before = threadCpuMs();
  const started = performance.now();
  let closed = 0;
  const lag = await longestLag(async () => {
    if (publisher === null) return void (await Bun.sleep(IDLE_MS));
    const port = Number(publisher.endpoint.slice(publisher.endpoint.lastIndexOf(":") + 1));
    const child = Bun.spawn([process.execPath, import.meta.path, "--flood", String(port), String(CONNECTIONS)], { stdout: "pipe", stderr: "inherit" });
    closed = (JSON.parse(await new Response(child.stdout).text()) as { closed: number }).closed;
  });
  const wall = performance.now() - started;
  const used = [...threadCpuMs()].map(([thread, ms]) => [thread, ms - (before.get(thread) ?? 0)] as const);
  await publisher?.close();
  const requestThread = used.find(([thread]) => thread.startsWith(mainThread))?.[1] ?? 0;
  const worker = used.filter(([thread]) => thread.endsWith(":Worker")).reduce((total, [, ms]) => total + ms, 0);
  return { placement, closed, wall_ms: Math.round(wall), request_thread_cpu_ms: requestThread, publisher_thread_cpu_ms: placement === "own thread" ? worker : null, longest_lag_ms: Math.round(lag) };
}

const results: RunResult[] = [];
for (let i = 0; i < RUNS; i++) {
  for (const placement of ["request thread", "own thread", "idle"] as const) {
    const result = await run(placement);
    results.push(result);
    const load = readFileSync("/proc/loadavg", "utf8").split(" ")[0];
    process.stderr.write(`${placement}: ${result.closed} of ${placement === "idle" ? 0 : CONNECTIONS} closed in ${result.wall_ms} ms; request thread ${result.request_thread_cpu_ms} ms CPU, publisher thread ${result.publisher_thread_cpu_ms ?? "-"} ms; longest lag ${result.longest_lag_ms} ms (load ${load})\n`);
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const lines = ["| publisher | request thread CPU (median) | publisher thread CPU | longest event-loop lag (median; runs) |", "|---|---:|---:|---|"];
for (const placement of ["request thread", "own thread", "idle"] as const) {
  const mine = results.filter((r) => r.placement === placement);
  const worker = mine.map((r) => r.publisher_thread_cpu_ms).filter((ms): ms is number => ms !== null);
  lines.push(`| ${placement} | ${median(mine.map((r) => r.request_thread_cpu_ms))} ms | ${worker.length === 0 ? "" : `${median(worker)} ms`} | ${median(mine.map((r) => r.longest_lag_ms))} ms (${mine.map((r) => r.longest_lag_ms).join(", ")}) |`);
}
console.log(lines.join("\n"));
console.log(JSON.stringify({ bench: "kv-publish-thread", connections: CONNECTIONS, runs: RUNS, results }));
process.exit(0);
