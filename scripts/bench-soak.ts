/**
 * Serving under load (issue 26): a soak of `--clients` clients sending mixed traffic for
 * `--seconds` against real `ctxr serve` child processes.
 *
 *   npx bun scripts/bench-soak.ts [--clients 32] [--seconds 600] [--target engine|proxy|both]
 *     [--threads 2] [--model-size tiny|small|125m] [--seed 1] [--json OUT]
 *     [--doc-chars 400] [--docs-per-request 4] [--doc-pool 24] [--max-tokens 32] [--kv-blocks N]
 *     [--mix kind=weight,...] [--drain-seconds 60]
 *
 * Targets: `engine` is `ctxr serve --model DIR`; `proxy` is `ctxr serve --upstream URL` in front of
 * a second `ctxr serve --model DIR` (its engine, started for it). The model is a random-weight Llama
 * written by `ctxr model tiny` (into .bench/soak-models/SIZE when missing; byte-level tokenizer, so
 * a character is a token); 125m is the reviewer's size (121M parameters, 14 layers, hidden 768).
 *
 * Each client loops until the time is up, drawing a kind by weighted random from its own seeded
 * generator (soakMix.ts: streamed documents chats from a shared pool, non-streamed chats, plain
 * completions, n > 1, hang-ups after the first chunk or a random delay, over-long prompts and
 * malformed bodies that must get 400). Every request is classified (soakOutcome.ts): completed
 * ([DONE], or a 200 JSON), cut (ended without [DONE] or an error event, or a reset we did not
 * cause), hang-up (ours), error event, or its HTTP status. Requests still running `--drain-seconds`
 * after the time is up are aborted and counted as unfinished.
 *
 * Reported per target: the counts (all, and by kind), TTFT (first content token of a stream, not
 * the role chunk) and queue time (usage.ctxr.queue_ms of completed answers; n/a when the server
 * does not report it) p50/p99, peak RSS of every server process (VmHWM, and VmRSS sampled each
 * second, of ctxr and its model runner), and once the clients stopped and the engine is idle, its
 * KV blocks from /metrics: used minus the prefix cache's and the chunk cache's blocks must be 0.
 *
 * Prints progress on stderr, then a markdown table and one JSON line on stdout.
 */
import { readFileSync, readdirSync, existsSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { TINY_MODEL_DEFAULTS, tinyModelArgs, tinyModelParameterCount, type TinyModelOptions } from "../src/model/tinyModel.ts";
import { CLI_ENTRY } from "../test/helpers/cli.ts";
import { procStatusBytes } from "../test/security/hostileKit.ts";
import { spawnServer, type SpawnedServer } from "../test/server/serverKit.ts";
import { REPO, progress } from "./benchKit.ts";
import { seeded } from "./benchTtfb.ts";
import { documentPool, parseWeights, pickWeighted, soakRequest, type MixShape, type SoakRequest } from "./soakMix.ts";
import { SseParser, jsonOutcome, readPayload, streamOutcome, type StreamSeen } from "./soakOutcome.ts";
import { kvCheck, parseMetrics, summaryTable, tally, type KvCheck, type RequestRecord, type TargetSummary } from "./soakReport.ts";

/**
 * Model shapes by --model-size. Every vocab is the byte tokenizer's 259: with random weights, a
 * larger vocab's padding rows would be most of what the model samples, and they decode to nothing
 * (no content, no TTFT).
 */
const MODEL_SIZES: Record<string, TinyModelOptions> = {
  /** 2 layers, hidden 64: ~0.1M parameters (the load is on the HTTP path, hardly on the model). */
  tiny: { ...TINY_MODEL_DEFAULTS },
  /** 4 layers, hidden 256: ~3M parameters. */
  small: { ...TINY_MODEL_DEFAULTS, layers: 4, hidden: 256, heads: 4, kvHeads: 2, intermediate: 768 },
  /** The reviewer's ~125M (121M): 14 layers, hidden 768, intermediate 3072. */
  "125m": { ...TINY_MODEL_DEFAULTS, layers: 14, hidden: 768, heads: 12, kvHeads: 4, intermediate: 3072 },
};

const { values } = parseArgs({
  options: {
    clients: { type: "string", default: "32" },
    seconds: { type: "string", default: "600" },
    target: { type: "string", default: "both" },
    threads: { type: "string", default: "2" },
    "model-size": { type: "string", default: "tiny" },
    seed: { type: "string", default: "1" },
    json: { type: "string" },
    "doc-chars": { type: "string", default: "400" },
    "docs-per-request": { type: "string", default: "4" },
    "doc-pool": { type: "string", default: "24" },
    "max-tokens": { type: "string", default: "32" },
    "kv-blocks": { type: "string" },
    mix: { type: "string" },
    "drain-seconds": { type: "string", default: "60" },
  },
});

const positive = (name: string, text: string | undefined): number => {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} takes a positive integer, got '${text}'`);
  return value;
};
const CLIENTS = positive("clients", values.clients);
const SECONDS = positive("seconds", values.seconds);
const THREADS = positive("threads", values.threads);
const SEED = positive("seed", values.seed);
const DRAIN_MS = positive("drain-seconds", values["drain-seconds"]) * 1000;
const SIZE = values["model-size"]!;
if (MODEL_SIZES[SIZE] === undefined) throw new Error(`--model-size: one of ${Object.keys(MODEL_SIZES).join(", ")}`);
const TARGETS = values.target === "both" ? ["engine", "proxy"] : [values.target!];
for (const t of TARGETS) if (t !== "engine" && t !== "proxy") throw new Error("--target takes engine, proxy or both");
const WEIGHTS = parseWeights(values.mix);
const MODEL_ID = "soak-model";

// ---------------------------------------------------------------------------------------------
// Processes

/** The model folder, written by `ctxr model tiny` when missing or written with other options. */
function modelFolder(size: string): string {
  const dir = join(REPO, ".bench", "soak-models", size);
  const args = tinyModelArgs(MODEL_SIZES[size]!);
  const stamp = join(dir, "soak-model-args.txt");
  if (existsSync(join(dir, "model.safetensors")) && existsSync(stamp) && readFileSync(stamp, "utf8") === args.join(" ")) return dir;
  progress(`writing the ${size} model to ${dir} (ctxr ${args.join(" ")}) ...`);
  const made = Bun.spawnSync([process.execPath, CLI_ENTRY, ...args, "--out", dir, "--force"], { stdout: "ignore", stderr: "pipe" });
  if (made.exitCode !== 0) throw new Error(`ctxr model tiny failed: ${made.stderr.toString().slice(-1000)}`);
  writeFileSync(stamp, args.join(" "));
  return dir;
}

async function startEngine(model: string): Promise<SpawnedServer> {
  const args = ["--in-memory", "--model", model, "--threads", String(THREADS), "--served-model-name", MODEL_ID];
  if (values["kv-blocks"] !== undefined) args.push("--kv-blocks", String(positive("kv-blocks", values["kv-blocks"])));
  return spawnServer(args, {}, 180_000);
}

/** The pids of a process's children (every thread's), from /proc. */
function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((task) => {
      try {
        return readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
}

/** Peak resident set of named processes and their descendants: VmRSS sampled, and VmHWM read while they live. */
class RssWatch {
  private readonly peaks: Record<string, number | null> = {};
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(private readonly roots: Record<string, number>) {
    for (const name of Object.keys(roots)) this.peaks[name] = null;
    this.sample();
    this.timer = setInterval(() => this.sample(), 1000);
  }

  /** ctxr processes by role; their children are the model runners ("<role> runner"). */
  sample(): void {
    for (const [name, pid] of Object.entries(this.roots)) {
      this.raise(name, pid);
      for (const child of childPids(pid)) this.raise(`${name} runner`, child);
    }
  }

  private raise(name: string, pid: number): void {
    const value = Math.max(procStatusBytes(pid, "VmHWM") ?? 0, procStatusBytes(pid, "VmRSS") ?? 0);
    if (value > 0) this.peaks[name] = Math.max(this.peaks[name] ?? 0, value);
  }

  stop(): Record<string, number | null> {
    this.sample();
    clearInterval(this.timer);
    return { ...this.peaks };
  }
}

async function stopServer(server: SpawnedServer): Promise<void> {
  server.kill("SIGTERM");
  const killer = setTimeout(() => server.kill("SIGKILL"), 5000);
  await server.exited;
  clearTimeout(killer);
}

// ---------------------------------------------------------------------------------------------
// Clients

/** Sends one request and classifies what came back. `drain` aborts whatever still runs after the drain time. */
async function send(url: string, request: SoakRequest, drain: AbortSignal): Promise<RequestRecord> {
  const controller = new AbortController();
  let ours = false;
  const hangUp = () => {
    ours = true;
    controller.abort();
  };
  const onDrain = () => controller.abort();
  drain.addEventListener("abort", onDrain);
  const timer = request.hangUp?.after === "delay" ? setTimeout(hangUp, request.hangUp.ms) : null;
  const record: RequestRecord = { kind: request.kind, outcome: "cut", status: null, expectStatus: request.expectStatus, ttftMs: null, queueMs: null };
  const started = performance.now();
  try {
    let response: Response;
    try {
      response = await fetch(url + request.path, { method: "POST", body: request.body, headers: { "content-type": "application/json" }, signal: controller.signal });
    } catch {
      // No status: a reset or refusal, or our hang-up before the headers came.
      record.outcome = ours ? "hangup" : "cut";
      return record;
    }
    record.status = response.status;
    if (response.status !== 200 || !request.stream) {
      let text: string | null;
      try {
        text = await response.text();
      } catch {
        text = null;
      }
      record.outcome = text === null && ours ? "hangup" : jsonOutcome(response.status, text);
      if (text !== null && response.status === 200) record.queueMs = readPayload(text).queueMs;
      return record;
    }
    const seen: StreamSeen = { sawDone: false, errorEvents: 0, end: "end" };
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const reader = response.body!.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        for (const payload of parser.push(decoder.decode(value, { stream: true }))) {
          const reading = readPayload(payload);
          if (reading.done) seen.sawDone = true;
          if (reading.error) seen.errorEvents++;
          if (reading.hasContent && record.ttftMs === null) record.ttftMs = performance.now() - started;
          if (reading.queueMs !== null) record.queueMs = reading.queueMs;
        }
        if (request.hangUp?.after === "first_chunk" && !seen.sawDone) {
          hangUp();
          await reader.cancel().catch(() => {});
          seen.end = "aborted";
          break;
        }
      }
    } catch {
      seen.end = ours ? "aborted" : "reset";
    }
    record.outcome = streamOutcome(seen);
    return record;
  } finally {
    if (timer !== null) clearTimeout(timer);
    drain.removeEventListener("abort", onDrain);
    if (drain.aborted && !ours && record.outcome === "cut") record.outcome = "unfinished";
  }
}

interface RunResult {
  records: RequestRecord[];
  wallMs: number;
}

async function runClients(url: string, shape: MixShape, label: string): Promise<RunResult> {
  const records: RunResult["records"] = [];
  const deadline = performance.now() + SECONDS * 1000;
  const drain = new AbortController();
  const started = performance.now();
  const ticker = setInterval(() => {
    const cut = records.filter((r) => r.outcome === "cut").length;
    progress(`${label}: ${Math.round((performance.now() - started) / 1000)} s, ${records.length} requests, ${cut} cut`);
  }, 10_000);
  const client = async (index: number) => {
    const random = seeded(SEED * 100_003 + index);
    while (performance.now() < deadline) {
      const request = soakRequest(pickWeighted(WEIGHTS, random), shape, random);
      records.push(await send(url, request, drain.signal));
    }
  };
  const clients = Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
  // After the time is up, requests in flight get --drain-seconds to end; then they are aborted.
  const drainTimer = setTimeout(() => drain.abort(), SECONDS * 1000 + DRAIN_MS);
  await clients;
  clearTimeout(drainTimer);
  clearInterval(ticker);
  return { records, wallMs: performance.now() - started };
}

/** The engine's KV check once nothing runs or waits (polled for up to 20 s). */
async function kvAfterRun(engineUrl: string): Promise<KvCheck | null> {
  let check: KvCheck | null = null;
  for (let i = 0; i < 40; i++) {
    try {
      check = kvCheck(parseMetrics(await (await fetch(`${engineUrl}/metrics`)).text()));
    } catch {
      return check;
    }
    if (check === null || (check.running === 0 && check.waiting === 0)) break;
    await Bun.sleep(500);
  }
  return check;
}

async function modelLength(engineUrl: string): Promise<number> {
  const models = (await (await fetch(`${engineUrl}/v1/models`)).json()) as { data: { max_model_len?: number }[] };
  const length = models.data[0]?.max_model_len;
  if (typeof length !== "number") throw new Error("the engine's /v1/models gives no max_model_len");
  return length;
}

interface TargetResult extends TargetSummary {
  wall_ms: number;
  servers_alive_after: boolean;
  stderr_tail: string;
}

async function soak(target: "engine" | "proxy", model: string): Promise<TargetResult> {
  progress(`${target}: starting ${target === "proxy" ? "the engine and the proxy" : "the engine"} ...`);
  const engine = await startEngine(model);
  const proxy = target === "proxy" ? await spawnServer(["--in-memory", "--upstream", engine.url], {}, 60_000) : null;
  const roles: Record<string, number> = target === "proxy" ? { proxy: proxy!.process.pid, engine: engine.process.pid } : { engine: engine.process.pid };
  const watch = new RssWatch(roles);
  try {
    const maxModelLen = await modelLength(engine.url);
    const shape: MixShape = {
      model: MODEL_ID,
      documents: documentPool(positive("doc-pool", values["doc-pool"]), positive("doc-chars", values["doc-chars"])),
      documentsPerRequest: positive("docs-per-request", values["docs-per-request"]),
      maxTokens: positive("max-tokens", values["max-tokens"]),
      // Byte-level tokenizer: a character is at least one token.
      overlongChars: maxModelLen + 1000,
    };
    progress(`${target}: ${CLIENTS} clients for ${SECONDS} s (max_model_len ${maxModelLen}) ...`);
    const run = await runClients((proxy ?? engine).url, shape, target);
    const kv = await kvAfterRun(engine.url);
    const alive = engine.process.exitCode === null && (proxy === null || proxy.process.exitCode === null);
    const result: TargetResult = {
      target,
      tally: tally(run.records),
      peakRss: watch.stop(),
      kv,
      wall_ms: Math.round(run.wallMs),
      servers_alive_after: alive,
      stderr_tail: [engine.stderr(), proxy?.stderr() ?? ""].join("\n").trim().slice(-1500),
    };
    const a = result.tally.all;
    progress(`${target}: ${a.requests} requests: ${a.completed} completed, ${a.cut} cut, ${a.hangup} hang-ups, ${a.error_event} error events, ${a.unfinished} unfinished at drain, ${a.four_xx} 4xx, ${a.five_xx} 5xx; KV ${JSON.stringify(kv)}`);
    return result;
  } finally {
    watch.stop();
    if (proxy !== null) await stopServer(proxy);
    await stopServer(engine);
  }
}

// ---------------------------------------------------------------------------------------------

const model = modelFolder(SIZE);
const results: TargetResult[] = [];
for (const target of TARGETS) results.push(await soak(target as "engine" | "proxy", model));

const settings = {
  clients: CLIENTS,
  seconds: SECONDS,
  threads: THREADS,
  model_size: SIZE,
  model_parameters: tinyModelParameterCount(MODEL_SIZES[SIZE]!),
  seed: SEED,
  doc_chars: Number(values["doc-chars"]),
  docs_per_request: Number(values["docs-per-request"]),
  doc_pool: Number(values["doc-pool"]),
  max_tokens: Number(values["max-tokens"]),
  kv_blocks: values["kv-blocks"] === undefined ? null : Number(values["kv-blocks"]),
  mix: WEIGHTS,
  nproc: cpus().length,
  loadavg: loadavg().map((x) => Number(x.toFixed(2))),
  bun: Bun.version,
};
process.stdout.write(`${summaryTable(results)}\n\n`);
for (const r of results) {
  const kinds = Object.entries(r.tally.byKind)
    .map(([kind, c]) => `${kind} ${c!.requests} (${c!.completed} completed, ${c!.cut} cut, ${c!.hangup} hang-ups, statuses ${JSON.stringify(c!.statuses)})`)
    .join("; ");
  process.stdout.write(`${r.target} by kind: ${kinds}\n${r.target}: queue_ms missing on ${r.tally.queueMissing} completed answers; servers alive after: ${r.servers_alive_after}\n`);
}
const json = JSON.stringify({ bench: "soak", settings, results });
process.stdout.write(`${json}\n`);
if (values.json !== undefined) writeFileSync(values.json, json + "\n");
// The server kit's start-up timer (180 s) would keep the process alive for a while.
process.exit(0);
