/**
 * What measuring every stored variant's KV shift costs a workload whose chunks are all new
 * (issue 31, item 1), through the real HTTP server on models/quality.
 *
 *   npx bun scripts/bench-reuse-scoring.ts [--model models/quality] [--requests 24] [--concurrency 2]
 *        [--family lookup] [--rounds 2] [--threads 2] [--think-ms 0] [--json FILE]
 *
 * Modes, each an engine of its own (`--no-prefix-cache`, prophet at 0.2, the defaults), run in
 * turn for --rounds rounds (so drift on a shared machine hits them alike), after one discarded run:
 * - off: --reuse-scoring-budget 0 (no variant gets a shift; the baseline);
 * - idle: the default, --reuse-scoring-budget 0.2 (measured in the engine's idle time);
 * - sync: --reuse-scoring sync (measured in the storing request, between its first and second token).
 * Every request carries documents no earlier request sent (examples of --family drawn from their
 * own seeds), so every chunk is new and stored, and each stored variant (but the one right after
 * the head) is one measurement. --concurrency clients send back to back (a closed loop), each
 * pausing --think-ms after every answer (with a pause over the engine's 20 ms idle grace, the
 * jobs run between requests instead of after the run).
 *
 * Per mode: requests per second over the run (median over rounds), median TTFT and latency, and
 * after the run the background jobs' figures from /v1/stats and the time they took to drain.
 * Prints markdown on stdout; the last line is the result as JSON (also --json FILE).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { GenerationEngine, type EngineOptions } from "../src/engine/generationEngine.ts";
import { ContextService } from "../src/online/contextService.ts";
import { startServer } from "../src/server/serve.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { QUALITY_FAMILIES, qualityExample, type QualityExample, type QualityFamily } from "../src/quality/qualityTasks.ts";
import { findRunner } from "../src/runner/runnerExecutable.ts";
import { median } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "models/quality" },
    requests: { type: "string", default: "24" },
    concurrency: { type: "string", default: "2" },
    family: { type: "string", default: "lookup" },
    rounds: { type: "string", default: "2" },
    threads: { type: "string", default: "2" },
    "think-ms": { type: "string", default: "0" },
    json: { type: "string" },
  },
});
const requests = Number(values.requests);
const concurrency = Number(values.concurrency);
const rounds = Number(values.rounds);
const threads = Number(values.threads);
const family = values.family as QualityFamily;
const thinkMs = Number(values["think-ms"]);
if (!(Number.isFinite(thinkMs) && thinkMs >= 0)) throw new Error("--think-ms must be a non-negative number");
if (!QUALITY_FAMILIES.includes(family)) throw new Error(`--family must be one of ${QUALITY_FAMILIES.join(", ")}`);
for (const [name, value] of [["requests", requests], ["concurrency", concurrency], ["rounds", rounds], ["threads", threads]] as const) {
  if (!(Number.isSafeInteger(value) && value >= 1)) throw new Error(`--${name} must be a positive integer`);
}

const MODES: { name: string; options: Partial<EngineOptions> }[] = [
  { name: "off", options: { reuseScoringBudget: 0 } },
  { name: "idle", options: {} },
  { name: "sync", options: { reuseScoring: "sync" } },
];

interface RunFigures {
  seconds: number;
  requestsPerSecond: number;
  ttftMs: number;
  latencyMs: number;
  promptTokens: number;
  /** Prompt tokens whose KV came from a cached chunk (should be 0: every chunk is new). */
  chunkReusedTokens: number;
  jobs: { run: number; deferred: number; dropped: number; runner_seconds: number } | null;
  drainSeconds: number;
}

const runner = await findRunner("cpu", { log: () => {} });
const service = await ContextService.open({ dataDir: null });

async function runMode(mode: (typeof MODES)[number], round: number): Promise<RunFigures> {
  const engine = await GenerationEngine.open({ model: values.model!, runner, threads, prefixCache: false, ...mode.options });
  const server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  try {
    // Fresh documents for every request of every run.
    const set = (0x5c0e0000 + round * 0x1000 + MODES.indexOf(mode) * 0x100) >>> 0;
    const examples: QualityExample[] = Array.from({ length: requests }, (_, i) => qualityExample(family, exampleSeed(set, i)));
    const ttft: number[] = [];
    const latency: number[] = [];
    let promptTokens = 0;
    let chunkReusedTokens = 0;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < examples.length) {
          const example = examples[next++]!;
          const sent = performance.now();
          const response = await fetch(`${server.url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ segments: [...example.documents, example.question], temperature: 0, max_tokens: example.answer.length + 1 }),
          });
          const body: any = await response.json();
          if (response.status !== 200) throw new Error(`POST /v1/completions: ${response.status} ${JSON.stringify(body).slice(0, 300)}`);
          latency.push(performance.now() - sent);
          ttft.push(body.usage.ctxr.ttft_ms);
          promptTokens += body.usage.prompt_tokens;
          if (thinkMs > 0) await Bun.sleep(thinkMs);
          chunkReusedTokens += body.usage.ctxr.prompt_tokens_chunk_reused + body.usage.ctxr.prompt_tokens_recomputed;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const drainStart = performance.now();
    await engine.scheduler.background.idle();
    const drainSeconds = (performance.now() - drainStart) / 1000;
    const stats: any = await (await fetch(`${server.url}/v1/stats`)).json();
    const job = stats.engine.reuse_scoring?.jobs?.shift_scoring;
    return {
      seconds,
      requestsPerSecond: requests / seconds,
      ttftMs: median(ttft),
      latencyMs: median(latency),
      promptTokens,
      chunkReusedTokens,
      jobs: job === undefined ? null : { run: job.run, deferred: job.deferred, dropped: job.dropped, runner_seconds: job.runner_seconds },
      drainSeconds,
    };
  } finally {
    await server.stop(1000);
    await engine.close();
  }
}

const results: Record<string, RunFigures[]> = Object.fromEntries(MODES.map((m) => [m.name, []]));
// One discarded run first: the JIT, the page cache and the runner binary warm up.
await runMode(MODES[0]!, rounds);
for (let round = 0; round < rounds; round++) {
  for (const mode of MODES) {
    const figures = await runMode(mode, round);
    results[mode.name]!.push(figures);
    console.error(`round ${round + 1}/${rounds} ${mode.name}: ${figures.requestsPerSecond.toFixed(2)} req/s, ${figures.promptTokens} prompt tokens (${figures.chunkReusedTokens} from cached chunks), ttft ${figures.ttftMs.toFixed(1)} ms, jobs ${JSON.stringify(figures.jobs)}, drain ${figures.drainSeconds.toFixed(2)} s`);
  }
}
await service.close();

function cachedShare(): string {
  const runs = Object.values(results).flat();
  const cached = runs.reduce((n, r) => n + r.chunkReusedTokens, 0);
  const prompt = runs.reduce((n, r) => n + r.promptTokens, 0);
  return `${((100 * cached) / Math.max(1, prompt)).toFixed(1)}%`;
}

const command = `npx bun scripts/bench-reuse-scoring.ts ${process.argv.slice(2).join(" ")}`.trim();
console.log(`${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), load ${loadavg().map((l) => l.toFixed(2)).join(" ")}; model ${values.model}, CPU runner, ${threads} threads; ${requests} requests a run of family ${family}, documents new to each request (${cachedShare()} of prompt tokens still found in cached chunks: records that repeat), ${concurrency} clients${thinkMs > 0 ? ` pausing ${thinkMs} ms after each answer` : ""}, ${rounds} rounds`);
console.log(`\n\`${command}\`\n`);
console.log("| mode | req/s (median of rounds) | vs off | median TTFT ms | median latency ms | shift jobs run / deferred / dropped | job runner s | drain s after the run |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
const offRate = median(results.off!.map((r) => r.requestsPerSecond));
const summary: Record<string, unknown> = {};
for (const mode of MODES) {
  const runs = results[mode.name]!;
  const rate = median(runs.map((r) => r.requestsPerSecond));
  const jobs = runs.map((r) => r.jobs).filter((j) => j !== null);
  const sum = (f: (j: NonNullable<RunFigures["jobs"]>) => number) => jobs.reduce((s, j) => s + f(j), 0);
  const jobText = jobs.length === 0 ? "—" : `${sum((j) => j.run)} / ${sum((j) => j.deferred)} / ${sum((j) => j.dropped)}`;
  console.log(
    `| ${mode.name} | ${rate.toFixed(2)} | ${(rate / offRate).toFixed(3)} | ${median(runs.map((r) => r.ttftMs)).toFixed(1)} | ${median(runs.map((r) => r.latencyMs)).toFixed(1)} | ${jobText} | ${jobs.length === 0 ? "—" : sum((j) => j.runner_seconds).toFixed(2)} | ${median(runs.map((r) => r.drainSeconds)).toFixed(2)} |`,
  );
  summary[mode.name] = { requests_per_second: rate, ratio_to_off: rate / offRate, runs };
}
const result = { bench: "reuse-scoring", command, model: values.model, family, requests, concurrency, think_ms: thinkMs, rounds, threads, modes: summary };
if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result));
