/**
 * What the live quality audit (--reuse-audit-rate, issue 31 item 4) costs a saturated engine,
 * through the real HTTP server on models/quality.
 *
 *   npx bun scripts/bench-reuse-audit.ts [--model models/quality] [--examples 16] [--requests 200]
 *        [--concurrency 4] [--family dependence] [--policy prophet] [--ratio 0.2] [--rates 0,0.01,0.1]
 *        [--rounds 3] [--threads 2] [--json FILE]
 *
 * Each run is an engine of its own (`--no-prefix-cache`, the default background budget 0.2, the
 * audit's defaults but the rate): first --examples examples are warmed up (their chunks cached after
 * other neighbours, src/quality/qualityClient.ts; not timed), then --requests requests ask them in
 * turn under --policy at --ratio, every one reusing chunks (so every one is eligible for the
 * audit), from --concurrency clients sending back to back (a closed loop: the engine never idles
 * while the run lasts). The rates run in turn for --rounds rounds (interleaved, so drift on a
 * shared machine hits them alike), after one discarded run.
 *
 * Per rate: requests per second over the run (median of rounds) and its ratio to rate 0 (the
 * target: ≥ 0.97 at 0.01), median TTFT and latency; the audits run, dropped and deferred pieces
 * during the run, and the time the pending audits took to drain after it. Prints markdown on
 * stdout; the last line is the result as JSON (also --json FILE).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { GenerationEngine } from "../src/engine/generationEngine.ts";
import { ContextService } from "../src/online/contextService.ts";
import { startServer } from "../src/server/serve.ts";
import { QualityClient } from "../src/quality/qualityClient.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { QUALITY_FAMILIES, qualityExample, type QualityExample, type QualityFamily } from "../src/quality/qualityTasks.ts";
import { findRunner } from "../src/runner/runnerExecutable.ts";
import { median } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "models/quality" },
    examples: { type: "string", default: "16" },
    requests: { type: "string", default: "200" },
    concurrency: { type: "string", default: "4" },
    family: { type: "string", default: "dependence" },
    policy: { type: "string", default: "prophet" },
    ratio: { type: "string", default: "0.2" },
    rates: { type: "string", default: "0,0.01,0.1" },
    rounds: { type: "string", default: "3" },
    threads: { type: "string", default: "2" },
    json: { type: "string" },
  },
});
const examplesCount = Number(values.examples);
const requests = Number(values.requests);
const concurrency = Number(values.concurrency);
const rounds = Number(values.rounds);
const threads = Number(values.threads);
const ratio = Number(values.ratio);
const family = values.family as QualityFamily;
const policy = values.policy!;
const rates = values.rates!.split(",").map(Number);
if (!QUALITY_FAMILIES.includes(family)) throw new Error(`--family must be one of ${QUALITY_FAMILIES.join(", ")}`);
if (!["none", "cachecraft", "prophet", "epic"].includes(policy)) throw new Error("--policy must be one that reuses chunks: none, cachecraft, prophet or epic");
if (!(ratio >= 0 && ratio <= 1)) throw new Error("--ratio must be from 0 to 1");
if (rates.length === 0 || rates[0] !== 0 || !rates.every((r) => r >= 0 && r <= 1)) throw new Error("--rates must list rates from 0 to 1, the first 0 (the baseline)");
for (const [name, value] of [["examples", examplesCount], ["requests", requests], ["concurrency", concurrency], ["rounds", rounds], ["threads", threads]] as const) {
  if (!(Number.isSafeInteger(value) && value >= 1)) throw new Error(`--${name} must be a positive integer`);
}

interface RunFigures {
  seconds: number;
  requestsPerSecond: number;
  ttftMs: number;
  latencyMs: number;
  /** Requests that found no chunk to reuse (should be 0: every one is eligible). */
  notReused: number;
  audited: number;
  dropped: number;
  deferredPieces: number;
  auditRunnerSeconds: number;
  /** Audits finished by the end of the run (the rest drained after it). */
  auditedDuringRun: number;
  drainSeconds: number;
}

const runner = await findRunner("cpu", { log: () => {} });
const service = await ContextService.open({ dataDir: null });
const examples: QualityExample[] = Array.from({ length: examplesCount }, (_, i) => qualityExample(family, exampleSeed(0xa0d17000, i)));

async function runRate(rate: number): Promise<RunFigures> {
  const engine = await GenerationEngine.open({ model: values.model!, runner, threads, prefixCache: false, reuseAuditRate: rate });
  const server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  try {
    const client = new QualityClient(server.url);
    for (const example of examples) await client.warmUp(example);
    await engine.scheduler.background.idle();
    const ttft: number[] = [];
    const latency: number[] = [];
    let notReused = 0;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < requests) {
          const example = examples[next++ % examples.length]!;
          const sent = performance.now();
          const answer = await client.ask(example, { policy: policy as "prophet", ratio });
          latency.push(performance.now() - sent);
          ttft.push(answer.usage?.ttft_ms ?? NaN);
          if (!answer.chunksReused) notReused++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const auditedDuringRun = engine.scheduler.reuseAudit.stats.audited;
    const drainStart = performance.now();
    await engine.scheduler.background.idle();
    const drainSeconds = (performance.now() - drainStart) / 1000;
    const audit = engine.scheduler.reuseAudit.stats;
    const pieces = engine.scheduler.background.stats.kinds.audit;
    return {
      seconds,
      requestsPerSecond: requests / seconds,
      ttftMs: median(ttft),
      latencyMs: median(latency),
      notReused,
      audited: audit.audited,
      dropped: audit.dropped,
      deferredPieces: pieces?.deferred ?? 0,
      auditRunnerSeconds: pieces?.runnerSeconds ?? 0,
      auditedDuringRun,
      drainSeconds,
    };
  } finally {
    await server.stop(1000);
    await engine.close();
  }
}

const results = new Map<number, RunFigures[]>(rates.map((r) => [r, []]));
// One discarded run first: the JIT, the page cache and the runner binary warm up.
await runRate(0);
for (let round = 0; round < rounds; round++) {
  for (const rate of rates) {
    const figures = await runRate(rate);
    results.get(rate)!.push(figures);
    console.error(
      `round ${round + 1}/${rounds} rate ${rate}: ${figures.requestsPerSecond.toFixed(2)} req/s, ttft ${figures.ttftMs.toFixed(1)} ms, audited ${figures.audited} (${figures.auditedDuringRun} during the run), dropped ${figures.dropped}, deferred pieces ${figures.deferredPieces}, drain ${figures.drainSeconds.toFixed(2)} s`,
    );
  }
}
await service.close();

const command = `npx bun scripts/bench-reuse-audit.ts ${process.argv.slice(2).join(" ")}`.trim();
console.log(`${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), load ${loadavg().map((l) => l.toFixed(2)).join(" ")}; model ${values.model}, CPU runner, ${threads} threads; ${requests} requests a run over ${examplesCount} warmed ${family} examples, ${policy}@${ratio}, ${concurrency} clients back to back, ${rounds} rounds`);
console.log(`\n\`${command}\`\n`);
console.log("| --reuse-audit-rate | req/s (median of rounds) | vs rate 0 | median TTFT ms | median latency ms | audited (during the run) / dropped | deferred pieces | audit runner s | drain s after the run |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
const baseRate = median(results.get(0)!.map((r) => r.requestsPerSecond));
const summary: Record<string, unknown> = {};
for (const rate of rates) {
  const runs = results.get(rate)!;
  const perSecond = median(runs.map((r) => r.requestsPerSecond));
  const sum = (f: (r: RunFigures) => number) => runs.reduce((s, r) => s + f(r), 0);
  console.log(
    `| ${rate} | ${perSecond.toFixed(2)} | ${(perSecond / baseRate).toFixed(3)} | ${median(runs.map((r) => r.ttftMs)).toFixed(1)} | ${median(runs.map((r) => r.latencyMs)).toFixed(1)} | ${sum((r) => r.audited)} (${sum((r) => r.auditedDuringRun)}) / ${sum((r) => r.dropped)} | ${sum((r) => r.deferredPieces)} | ${sum((r) => r.auditRunnerSeconds).toFixed(2)} | ${median(runs.map((r) => r.drainSeconds)).toFixed(2)} |`,
  );
  summary[String(rate)] = { requests_per_second: perSecond, ratio_to_rate_0: perSecond / baseRate, runs };
}
const notReused = [...results.values()].flat().reduce((n, r) => n + r.notReused, 0);
if (notReused > 0) console.log(`\nwarning: ${notReused} requests found no chunk to reuse (not eligible for the audit)`);
const result = { bench: "reuse-audit", command, model: values.model, family, policy, ratio, examples: examplesCount, requests, concurrency, rounds, threads, rates: summary };
if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result));
