/**
 * Kernel benchmark (issue 14, item 6): the index kernels (Rust→WASM, src/kernels/wasmKernels.ts,
 * against their TypeScript twins) timed with tinybench, and the runner's linear kernels (f32,
 * f16, bf16 and the quantized GGUF types) timed by the runner's own loop, in one table.
 *
 *   npx bun scripts/bench-kernels.ts [--time 400] [--threads 1,2] [--repeat 20] [--runner PATH]
 *                                    [--only wasm|runner] [--json out.json]
 *
 * Index kernels: tinybench (a Bench with --time ms and a warm-up a task), WASM and TS of each
 * kernel run back to back on the same seeded inputs, so each pair's ratio comes from the same
 * stretch of machine noise. Inputs are shaped like a context-index build: 300 contexts of 15
 * blocks drawn from 2,000 (Zipf-like popularity), Kendall-τ over 1,000 segments of 32, top-k
 * and top-p over 64 rows of 4,096 scores.
 *
 * Runner kernels: `ctxr-runner --bench-linear TYPE M N K --threads T --repeat R` (a fresh
 * process a case; the runner times R calls of its linear layer and reports the median, and the
 * ISA and path it chose). A decode step is M = 1 (matrix-vector, bound by the weight bytes), a
 * prefill tile M = 128 (GEMM). The runner is `cuda/build/ctxr-runner-cpu` unless --runner.
 *
 * Prints the machine, the command and a markdown table on stdout (progress on stderr).
 */
import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Bench } from "tinybench";
import { type EncodedContexts, type IndexKernels, tsKernels, wasmKernels } from "../src/kernels/index.ts";
import { REPO, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    time: { type: "string", default: "400" },
    threads: { type: "string", default: "1,2" },
    repeat: { type: "string", default: "20" },
    runner: { type: "string" },
    only: { type: "string" },
    json: { type: "string" },
  },
});
const benchTimeMs = Number(values.time);
/** Runner threads; a list ("1,2") runs every case at each. */
const threadCounts = values.threads!.split(",").map(Number);
const repeat = Number(values.repeat);
const runner = values.runner ?? join(REPO, "cuda", "build", "ctxr-runner-cpu");

interface Row {
  group: "index (WASM vs TS)" | "runner linear";
  kernel: string;
  input: string;
  impl: string;
  ops_per_s: number;
  mean_us: number;
  p99_us: number | null;
  rme_percent: number | null;
  samples: number;
  timer: string;
  /** Index kernels: the WASM row's speed over the TS row's; runner: GFLOP/s. */
  note: string;
}

/** A small seeded generator (mulberry32), so every run times the same inputs. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

function zipfContexts(n: number, perContext: number, blockCount: number, random: () => number): EncodedContexts {
  const flat = new Int32Array(n * perContext);
  const offsets = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) {
    const chosen = new Set<number>();
    // popularity ~ 1/rank: rank = floor(blockCount^u) is log-uniform
    while (chosen.size < perContext) chosen.add(Math.min(blockCount - 1, Math.floor(blockCount ** random()) - 1));
    flat.set([...chosen], i * perContext);
    offsets[i + 1] = (i + 1) * perContext;
  }
  return { flat, offsets, blockCount };
}

function shuffledSegments(segments: number, length: number, random: () => number): [Int32Array, Int32Array, Int32Array] {
  const a = new Int32Array(segments * length);
  const b = new Int32Array(segments * length);
  const offsets = new Int32Array(segments + 1);
  for (let s = 0; s < segments; s++) {
    const items = Array.from({ length }, (_, i) => s * length + i);
    a.set(items, s * length);
    for (let i = length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    b.set(items, s * length);
    offsets[s + 1] = (s + 1) * length;
  }
  return [a, b, offsets];
}

async function indexKernelRows(): Promise<Row[]> {
  const random = seeded(14);
  const contexts = zipfContexts(300, 15, 2000, random);
  const n = contexts.offsets.length - 1;
  const condensed = tsKernels.contextDistances(contexts);
  const [ka, kb, koffsets] = shuffledSegments(1000, 32, random);
  const rows = 64;
  const rowLength = 4096;
  const scores = new Float32Array(rows * rowLength).map(() => random());
  const probabilities = scores.map((x) => x ** 8);
  const cases: Array<{ kernel: string; input: string; run: (k: IndexKernels) => unknown }> = [
    { kernel: "contextDistances", input: `${n} contexts × 15 blocks (${condensed.length} pairs)`, run: (k) => k.contextDistances(contexts) },
    { kernel: "linkage (average)", input: `${n} points`, run: (k) => k.linkage(condensed, n, "average") },
    { kernel: "kendallTauDistances", input: "1,000 segments × 32", run: (k) => k.kendallTauDistances(ka, kb, koffsets) },
    { kernel: "topKRows", input: `${rows} rows × ${rowLength}, k 64`, run: (k) => k.topKRows(scores, rowLength, 64) },
    { kernel: "topPRows", input: `${rows} rows × ${rowLength}, p 0.9`, run: (k) => k.topPRows(probabilities, rowLength, 0.9) },
  ];
  const implementations: Array<[string, IndexKernels]> = [["wasm", wasmKernels()], ["ts", tsKernels]];
  const bench = new Bench({ time: benchTimeMs, warmupTime: 100 });
  for (const c of cases) for (const [name, k] of implementations) bench.add(`${c.kernel}|${name}`, () => void c.run(k));
  progress(`index kernels: ${bench.tasks.length} tinybench tasks, ${benchTimeMs} ms each ...`);
  await bench.warmup();
  await bench.run();
  const out: Row[] = [];
  for (const c of cases) {
    const pair = implementations.map(([name]) => bench.getTask(`${c.kernel}|${name}`)!.result!);
    for (const [i, [name]] of implementations.entries()) {
      const r = pair[i]!;
      if (r.error) throw r.error;
      out.push({
        group: "index (WASM vs TS)", kernel: c.kernel, input: c.input, impl: name,
        ops_per_s: r.hz, mean_us: r.mean * 1000, p99_us: r.p99 * 1000, rme_percent: r.rme, samples: r.samples.length, timer: "tinybench",
        note: name === "wasm" ? `${(r.hz / pair[1]!.hz).toFixed(2)}× TS` : "",
      });
    }
  }
  return out;
}

interface LinearResult { type: string; m: number; n: number; k: number; threads: number; isa: string; path: string; median_ms: number; gflops: number; weight_gbps: number }

function runnerLinearRows(): Row[] {
  if (!existsSync(runner)) throw new Error(`no runner at ${runner} (make -C cuda cpu, or pass --runner PATH)`);
  const shapes: Array<[string, number, number, number]> = [["decode matvec", 1, 2048, 2048], ["prefill GEMM", 128, 2048, 2048]];
  const types = ["f32", "f16", "bf16", "q8_0", "q4_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"];
  const out: Row[] = [];
  // Interleaved: every type once per shape, the shapes alternating, so noise spreads evenly.
  for (const [label, m, n, k] of shapes) {
    for (const threads of threadCounts) for (const type of types) {
      const run = spawnSync(runner, ["--bench-linear", type, String(m), String(n), String(k), "--threads", String(threads), "--repeat", String(repeat)], { encoding: "utf8" });
      if (run.status !== 0) throw new Error(`ctxr-runner --bench-linear ${type} ${m} ${n} ${k} failed: ${run.stderr.trim()}`);
      const r = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as LinearResult;
      progress(`runner ${label} ${type} ${threads} threads: ${r.median_ms.toFixed(3)} ms (${r.isa}, ${r.path})`);
      out.push({
        group: "runner linear", kernel: `${label} ${type.toUpperCase()}`, input: `${m}×${k} · ${k}×${n}, ${threads} threads`, impl: `${r.isa} ${r.path}`,
        ops_per_s: 1000 / r.median_ms, mean_us: r.median_ms * 1000, p99_us: null, rme_percent: null, samples: repeat, timer: "runner loop (median)",
        note: `${r.gflops.toFixed(1)} GFLOP/s, ${r.weight_gbps.toFixed(1)} GB/s weights`,
      });
    }
  }
  return out;
}

const rows: Row[] = [];
if (values.only !== "runner") rows.push(...(await indexKernelRows()));
if (values.only !== "wasm") rows.push(...runnerLinearRows());

const fmt = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
console.log(`machine: ${cpus()[0]?.model ?? "unknown CPU"}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`command: npx bun scripts/bench-kernels.ts ${process.argv.slice(2).join(" ")}`.trimEnd());
console.log("");
console.log("| group | kernel | input | implementation | ops/s | latency µs (mean; runner: median) | p99 µs | ±% | samples | note |");
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  console.log(`| ${r.group} | ${r.kernel} | ${r.input} | ${r.impl} | ${fmt(r.ops_per_s)} | ${fmt(r.mean_us)} | ${r.p99_us === null ? "—" : fmt(r.p99_us)} | ${r.rme_percent === null ? "—" : r.rme_percent.toFixed(1)} | ${r.samples} | ${r.note} |`);
}
if (values.json) writeFileSync(values.json, JSON.stringify({ threads: threadCounts, repeat, bench_time_ms: benchTimeMs, rows }, null, 2));
