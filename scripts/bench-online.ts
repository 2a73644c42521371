/**
 * Online benchmark of `ctxr serve` (issue 3, item 7).
 *
 *   npx bun scripts/bench-online.ts (or deno run -A scripts/bench-online.ts --skip-http) [--duration 10] [--samples 20000] [--skip-http] [--skip-inprocess] [--json out.json]
 *
 * (a) In process, with 2,000 and with 100,000 contexts already indexed (filled by reordering
 *     the Zipf workloads shared/workloads/data/zipf_N2000_k15.jsonl and .bench/zipf_N100000_k15.jsonl,
 *     generated with gen.py when missing): per-request latency (p50, p99) of
 *       - service.reorder of one new 15-block context (search + insert + reorder + annotation,
 *         dataDir null), and of the pure index search + insert (LiveContextIndex);
 *       - service.dedup of a 15-block turn (shared multi-turn workload).
 *     New contexts are drawn from the filled workload's block popularity (15 distinct blocks,
 *     weighted by how often the workload uses them), so they share blocks with the index as the
 *     workload's own contexts do. Each measured context is evicted again (untimed), so the index
 *     keeps its size.
 * (b) Over HTTP on loopback: `ctxr serve` spawned as a separate process (journaled data dir in a
 *     temporary folder, and --in-memory), POST /v1/reorder with one 15-block context per request
 *     (500 pre-generated bodies from the workload, cycled), autocannon at 1, 16 and 64
 *     connections, --duration seconds each after a 2 s warm-up. Latency percentiles come from
 *     autocannon's per-response times (sub-millisecond), throughput from its totals.
 *
 * Prints the machine, the command and markdown tables on stdout (progress on stderr).
 */
import autocannon from "autocannon";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, platform, release, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { seededRandom } from "../src/index/seededRandom.ts";
import { ContextService } from "../src/online/contextService.ts";
import { LiveContextIndex } from "../src/online/liveIndex.ts";

const REPO = resolve(import.meta.dirname, "..");
const DATA = resolve(REPO, "..", "shared", "workloads", "data");
const GEN = resolve(REPO, "..", "shared", "workloads", "gen.py");
const CACHE = join(REPO, ".bench");
const K = 15;

const { values } = parseArgs({
  options: {
    duration: { type: "string", default: "10" },
    samples: { type: "string", default: "20000" },
    "skip-http": { type: "boolean", default: false },
    "skip-inprocess": { type: "boolean", default: false },
    json: { type: "string" },
  },
});
const durationS = Number(values.duration);
const samples = Number(values.samples);
const log = (text: string) => void process.stderr.write(`${text}\n`);

function readJsonl<T>(path: string): T[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as T);
}

function workload100k(): string {
  const path = join(CACHE, "zipf_N100000_k15.jsonl");
  if (!existsSync(path)) {
    mkdirSync(CACHE, { recursive: true });
    log(`generating ${path}`);
    const run = spawnSync("python3", [GEN, "rag", "--n", "100000", "--k", String(K), "--out", path], { stdio: ["ignore", "ignore", "inherit"] });
    if (run.status !== 0) throw new Error("gen.py failed");
  }
  return path;
}

/** Draws new contexts with the workload's block popularity (distinct blocks, weighted, in drawn order). */
function contextSampler(workload: number[][], seed: number): () => number[] {
  const counts = new Map<number, number>();
  for (const context of workload) for (const b of context) counts.set(b, (counts.get(b) ?? 0) + 1);
  const blocks = [...counts.keys()];
  const cumulative = new Float64Array(blocks.length);
  let total = 0;
  blocks.forEach((b, i) => (cumulative[i] = total += counts.get(b)!));
  const random = seededRandom(seed);
  const draw = () => {
    const u = random() * total;
    let lo = 0;
    let hi = blocks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return blocks[lo]!;
  };
  return () => {
    const out = new Set<number>();
    while (out.size < K) out.add(draw());
    return [...out];
  };
}

interface Percentiles {
  p50: number;
  p99: number;
  mean: number;
  n: number;
}

function percentiles(values: number[]): Percentiles {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: sorted.reduce((a, b) => a + b, 0) / sorted.length, n: sorted.length };
}

const ms = (x: number) => (x < 0.1 ? x.toFixed(4) : x < 10 ? x.toFixed(3) : x.toFixed(1));

interface InProcessRow {
  indexed: number;
  operation: string;
  p50_ms: number;
  p99_ms: number;
  mean_ms: number;
  samples: number;
}

async function inProcess(name: string, fill: number[][]): Promise<InProcessRow[]> {
  const rows: InProcessRow[] = [];
  const next = contextSampler(fill, 12345);
  const queries = Array.from({ length: samples }, next);

  // (i) service.reorder of one new context, the index holding `fill`.
  const service = await ContextService.open({ dataDir: null });
  let started = performance.now();
  for (const context of fill) await service.reorder([context]);
  log(`${name}: filled the service with ${fill.length} contexts in ${(performance.now() - started).toFixed(0)} ms (${service.stats().nodes} nodes)`);
  // Warm-up (evicted again).
  for (let i = 0; i < 2000; i++) {
    const { results } = await service.reorder([queries[i % queries.length]!]);
    await service.evict([results[0]!.request_id]);
  }
  const reorderTimes: number[] = [];
  let prefixBlocks = 0;
  for (const context of queries) {
    const t0 = performance.now();
    const { results } = await service.reorder([context]);
    reorderTimes.push(performance.now() - t0);
    prefixBlocks += results[0]!.prefix_blocks;
    await service.evict([results[0]!.request_id]);
  }
  const indexed = service.stats().contexts;
  if (indexed !== fill.length) throw new Error(`index size drifted: ${indexed}`);
  const reorder = percentiles(reorderTimes);
  rows.push({ indexed, operation: "service.reorder (search+insert+reorder+annotation)", p50_ms: reorder.p50, p99_ms: reorder.p99, mean_ms: reorder.mean, samples: reorder.n });
  log(`${name}: reorder p50 ${ms(reorder.p50)} ms, p99 ${ms(reorder.p99)} ms, mean prefix ${(prefixBlocks / queries.length).toFixed(2)} blocks`);

  // (ii) dedup of 15-block turns (the shared multi-turn workload, replayed under fresh conversation ids).
  const turns = readJsonl<{ conv: number; turn: number; blocks: number[] }>(join(DATA, "multiturn_C200_T5_k15_o40.jsonl"));
  const dedupTimes: number[] = [];
  for (let round = 0; dedupTimes.length < samples; round++) {
    for (const t of turns) {
      const t0 = performance.now();
      await service.dedup(`r${round}-c${t.conv}`, t.blocks);
      dedupTimes.push(performance.now() - t0);
    }
  }
  const dedup = percentiles(dedupTimes.slice(turns.length)); // the first round warms up
  rows.push({ indexed, operation: "service.dedup (15-block turn)", p50_ms: dedup.p50, p99_ms: dedup.p99, mean_ms: dedup.mean, samples: dedup.n });
  log(`${name}: dedup p50 ${ms(dedup.p50)} ms, p99 ${ms(dedup.p99)} ms`);
  await service.close();

  // The pure live index: search + insert (dense ids interned untimed), removed again untimed.
  const index = new LiveContextIndex();
  const dense = new Map<number, number>();
  const intern = (b: number) => {
    let d = dense.get(b);
    if (d === undefined) dense.set(b, (d = dense.size));
    return d;
  };
  const tokens = new Array<number>(K).fill(256);
  let id = 0;
  const insertOne = (blocks: Int32Array) => {
    const match = index.search(blocks);
    const inPrefix = new Set(match.prefix);
    const ordered = new Int32Array(blocks.length);
    ordered.set(match.prefix);
    let at = match.prefix.length;
    for (const b of blocks) if (!inPrefix.has(b)) ordered[at++] = b;
    const requestId = `r${id++}`;
    index.insert(ordered, tokens, requestId, 0);
    return requestId;
  };
  started = performance.now();
  for (const context of fill) insertOne(Int32Array.from(context, intern));
  log(`${name}: filled the live index in ${(performance.now() - started).toFixed(0)} ms`);
  const denseQueries = queries.map((q) => Int32Array.from(q, intern));
  for (let i = 0; i < 2000; i++) index.remove(insertOne(denseQueries[i % denseQueries.length]!));
  const indexTimes: number[] = [];
  for (const q of denseQueries) {
    const t0 = performance.now();
    const requestId = insertOne(q);
    indexTimes.push(performance.now() - t0);
    index.remove(requestId);
  }
  const pure = percentiles(indexTimes);
  rows.push({ indexed: index.contextCount, operation: "LiveContextIndex search+insert", p50_ms: pure.p50, p99_ms: pure.p99, mean_ms: pure.mean, samples: pure.n });
  log(`${name}: index search+insert p50 ${ms(pure.p50)} ms, p99 ${ms(pure.p99)} ms`);
  return rows;
}

interface HttpRow {
  mode: string;
  connections: number;
  requests_per_s: number;
  p50_ms: number;
  p99_ms: number;
  requests: number;
  errors: number;
  non2xx: number;
}

interface Spawned {
  url: string;
  stop(): Promise<void>;
}

async function spawnServe(args: string[]): Promise<Spawned> {
  const child = Bun.spawn([process.execPath, join(REPO, "src/cli/main.ts"), "serve", "--port", "0", ...args], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const stderr = new Response(child.stderr).text();
  const reader = child.stdout.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`ctxr serve exited: ${text}${await stderr}`);
    text += new TextDecoder().decode(value);
    const match = /listening on (http:\/\/\S+)/.exec(text);
    if (match) {
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return {
        url: match[1]!,
        async stop() {
          child.kill("SIGTERM");
          if ((await child.exited) !== 0) log(`ctxr serve failed:\n${await stderr}`);
        },
      };
    }
  }
}

async function cannon(url: string, bodies: string[], connections: number, seconds: number): Promise<{ row: Omit<HttpRow, "mode">; latencies: number[] }> {
  let next = 0;
  const latencies: number[] = [];
  // Called without a callback, autocannon returns its running instance (an event emitter and a promise of the result).
  const instance = autocannon({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: "POST",
        path: "/v1/reorder",
        headers: { "content-type": "application/json" },
        setupRequest: (request: autocannon.Request) => ({ ...request, body: bodies[next++ % bodies.length] }),
      },
    ],
  }) as unknown as autocannon.Instance & Promise<autocannon.Result>;
  instance.on("response", (_client: unknown, _status: number, _bytes: number, responseTime: number) => latencies.push(responseTime));
  const result = await instance;
  const p = percentiles(latencies);
  return {
    row: {
      connections,
      requests_per_s: result.requests.total / (result.duration || seconds),
      p50_ms: p.p50,
      p99_ms: p.p99,
      requests: result.requests.total,
      errors: result.errors + result.timeouts,
      non2xx: result.non2xx,
    },
    latencies,
  };
}

async function http(workload: number[][]): Promise<HttpRow[]> {
  const random = seededRandom(777);
  const bodies = Array.from({ length: 500 }, () => JSON.stringify({ contexts: [workload[Math.floor(random() * workload.length)]!] }));
  const rows: HttpRow[] = [];
  for (const mode of ["journaled", "in-memory"]) {
    const folder = mkdtempSync(join(tmpdir(), "ctxr-bench-online-"));
    try {
      for (const connections of [1, 16, 64]) {
        // A fresh server per run, so every run starts from the same (empty) index and journal.
        const server = await spawnServe(mode === "journaled" ? ["--data-dir", join(folder, `data-${connections}`)] : ["--in-memory"]);
        try {
          await cannon(server.url, bodies, 16, 2); // warm-up
          const { row } = await cannon(server.url, bodies, connections, durationS);
          rows.push({ mode, ...row });
          log(`http ${mode} c=${connections}: ${row.requests_per_s.toFixed(0)} req/s, p50 ${ms(row.p50_ms)} ms, p99 ${ms(row.p99_ms)} ms, errors ${row.errors}, non-2xx ${row.non2xx}`);
        } finally {
          await server.stop();
        }
      }
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  }
  return rows;
}

const machine = {
  cpu: cpus()[0]?.model ?? "unknown",
  cores: cpus().length,
  memory_gb: Math.round(totalmem() / 2 ** 30),
  os: `${platform()} ${release()}`,
  runtime: typeof Bun !== "undefined" ? `bun ${Bun.version}` : `deno ${process.versions.deno}`,
  loadavg: loadavg().map((x) => x.toFixed(2)).join(" "),
};
const command = `${typeof Bun !== "undefined" ? "npx bun" : "npx deno run -A"} scripts/bench-online.ts${process.argv.slice(2).length ? " " + process.argv.slice(2).join(" ") : ""}`;

const small = readJsonl<number[]>(join(DATA, "zipf_N2000_k15.jsonl"));
let inProcessRows: InProcessRow[] = [];
if (!values["skip-inprocess"]) {
  const large = readJsonl<number[]>(workload100k());
  inProcessRows = [...(await inProcess("N=2000", small)), ...(await inProcess("N=100000", large))];
}
const httpRows = values["skip-http"] ? [] : await http(small);

const out: string[] = [];
out.push(`Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memory_gb} GB, ${machine.os}, ${machine.runtime}, load ${machine.loadavg}`);
out.push(`Command: ${command}`);
out.push("");
if (inProcessRows.length > 0) {
  out.push("In-process latency per request (one 15-block context; index size kept constant):");
  out.push("");
  out.push("| contexts indexed | operation | p50 ms | p99 ms | mean ms | samples |");
  out.push("| ---: | --- | ---: | ---: | ---: | ---: |");
  for (const r of inProcessRows) out.push(`| ${r.indexed.toLocaleString("en-US")} | ${r.operation} | ${ms(r.p50_ms)} | ${ms(r.p99_ms)} | ${ms(r.mean_ms)} | ${r.samples} |`);
  out.push("");
}
if (httpRows.length > 0) {
  out.push(`POST /v1/reorder over loopback (autocannon in this process, ctxr serve in another; ${durationS} s a run, one 15-block context a request):`);
  out.push("");
  out.push("| server | connections | requests/s | p50 ms | p99 ms | requests | errors | non-2xx |");
  out.push("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const r of httpRows) out.push(`| ${r.mode} | ${r.connections} | ${Math.round(r.requests_per_s).toLocaleString("en-US")} | ${ms(r.p50_ms)} | ${ms(r.p99_ms)} | ${r.requests} | ${r.errors} | ${r.non2xx} |`);
  out.push("");
}
process.stdout.write(out.join("\n") + "\n");
const summary = { machine, command, in_process: inProcessRows, http: httpRows };
process.stdout.write(JSON.stringify(summary) + "\n");
if (values.json) writeFileSync(values.json, JSON.stringify(summary, null, 2) + "\n");
