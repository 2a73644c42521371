/**
 * Index-build benchmark against ContextPilot's reference figures (shared/workloads/REFERENCE.md).
 *
 *   npx bun scripts/bench-index.ts [--runs 3] [--only NAME,...] [--methods auto,trie,cluster]
 *                                  [--warm 5] [--json out.json]
 *
 * For every workload of REFERENCE.md plus zipf_N100000_k15 (generated once into .bench/ with
 * gen.py) and every method, runs scripts/benchIndexChild.ts --runs times, each in a FRESH process
 * (cold JIT and memory, as a user sees one `ctxr index build`), and takes medians. When a cold
 * build takes under 2 s, one more child times --warm in-process builds (warm JIT). Progress goes
 * to stderr; stdout gets the machine, the command and a markdown table.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";

const REPO = resolve(import.meta.dir, "..");
const WORKLOADS = resolve(REPO, "..", "shared", "workloads");
const CACHE = join(REPO, ".bench");
const CHILD = join(import.meta.dir, "benchIndexChild.ts");
const GENERATED = { name: "zipf_N100000_k15", n: 100_000, k: 15 };
/** cluster is O(N²) in time and memory: not run above this many contexts. */
const CLUSTER_MAX_N = 12_000;
/** Warm in-process runs are taken only when a cold build is cheaper than this. */
const WARM_MAX_MS = 2_000;

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    only: { type: "string" },
    methods: { type: "string", default: "auto" },
    warm: { type: "string", default: "5" },
    json: { type: "string" },
  },
});
const runs = Number(values.runs);
const warmRuns = Number(values.warm);
const methods = values.methods!.split(",");
for (const m of methods) if (!["auto", "trie", "cluster"].includes(m)) fail(`unknown method ${m}`);

/** ContextPilot's row of REFERENCE.md (ratios as fractions). */
interface Reference {
  buildS: number;
  rssMb: number;
  inputUnlimited: number;
  input20: number;
  unlimited: number;
  capped20: number;
}

const references = readReferences();
let names = [...references.keys(), GENERATED.name];
if (values.only) {
  const wanted = values.only.split(",");
  for (const w of wanted) if (!names.includes(w)) fail(`unknown workload ${w} (known: ${names.join(", ")})`);
  names = names.filter((n) => wanted.includes(n));
}

const machine = {
  date: new Date().toISOString(),
  nproc: Number(spawnSync("nproc", { encoding: "utf8" }).stdout.trim()) || cpus().length,
  cpu: /model name\s*:\s*(.*)/.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? cpus()[0]?.model ?? "unknown",
  memory_gb: Math.round(totalmem() / 2 ** 30),
  bun: Bun.version,
  load_avg_at_start: loadavg().map((l) => Math.round(l * 100) / 100),
};
const command = ["npx bun scripts/bench-index.ts", ...process.argv.slice(2)].join(" ");

const results: Record<string, unknown>[] = [];
const notes: string[] = [];
for (const name of names) {
  const file = workloadFile(name);
  const n = Number(/_N(\d+)_/.exec(name)![1]);
  for (const method of methods) {
    if (method === "cluster" && n > CLUSTER_MAX_N) {
      notes.push(`${name}: cluster skipped (O(N²) time and memory; N = ${n} > ${CLUSTER_MAX_N}).`);
      continue;
    }
    results.push(measure(name, file, method, references.get(name)));
  }
}

console.log(`## Index build benchmark\n`);
console.log(`Command: \`${command}\`  `);
console.log(
  `Machine: ${machine.cpu}, nproc ${machine.nproc}, ${machine.memory_gb} GB, Bun ${machine.bun}, ` +
    `${machine.date} (load average at start ${machine.load_avg_at_start.join(" / ")})\n`,
);
console.log(markdownTable(results));
console.log(
  `\nbuild ms: \`buildContextIndex\` alone, input already parsed; median of ${runs} fresh processes ` +
    `(warm: median of ${warmRuns} in-process repeats after one discarded build, only when cold < ${WARM_MAX_MS} ms). ` +
    `process s: child process wall time from spawn to the end of the build (start-up + read + parse + build: ` +
    `compare with ContextPilot's whole-process figure) / to exit (also simulating and Kendall-tau). ` +
    `Peak RSS: the child's maxRSS (parse + build + simulate). Hit ratios: our simulator (= sim.py), ` +
    `256 tokens a block, unlimited / capacity int(0.2 × total tokens); × = ours / ContextPilot's. ` +
    `Speedup: CP build s / our build s, and CP build s / our process-to-build-end s. ` +
    `Kendall τ: mean over contexts of the distance between input and output block order; ` +
    `reordered: share of contexts whose block order changed.`,
);
if (notes.length) console.log(`\nNotes:\n${notes.map((note) => `- ${note}`).join("\n")}`);
if (values.json) {
  mkdirSync(dirname(resolve(values.json)), { recursive: true });
  writeFileSync(values.json, JSON.stringify({ command, machine, runs, warm_runs: warmRuns, results, notes }, null, 1) + "\n");
  console.error(`wrote ${values.json}`);
}

function measure(name: string, file: string, method: string, ref: Reference | undefined): Record<string, unknown> {
  const cold: Record<string, number | string>[] = [];
  for (let r = 0; r < runs; r++) {
    const start = performance.timeOrigin + performance.now();
    const line = runChild(["--input", file, "--method", method]);
    const end = performance.timeOrigin + performance.now();
    line.process_to_build_end_s = ((line.build_end_epoch_ms as number) - start) / 1000;
    line.process_total_s = (end - start) / 1000;
    cold.push(line);
    console.error(`${name} ${method} run ${r + 1}/${runs}: build ${(line.build_ms as number).toFixed(1)} ms, ${line.process_total_s.toFixed(2)} s total`);
  }
  const first = cold[0]!;
  for (const key of ["method", "hit_unlimited", "hit_20", "baseline_unlimited", "baseline_20", "kendall_tau_mean"]) {
    if (cold.some((c) => c[key] !== first[key])) notes.push(`${name} ${method}: ${key} differs between runs (${cold.map((c) => c[key]).join(", ")}).`);
  }
  const median = (key: string) => medianOf(cold.map((c) => c[key] as number));
  const buildMs = median("build_ms");
  let warmMs: number | null = null;
  if (warmRuns > 0 && buildMs < WARM_MAX_MS) warmMs = runChild(["--input", file, "--method", method, "--warm", String(warmRuns)]).warm_ms as number;

  const out: Record<string, unknown> = {
    workload: name,
    requested_method: method,
    method: first.method,
    contexts: first.contexts,
    blocks: first.blocks,
    kernels: first.kernels,
    build_ms: buildMs,
    build_ms_runs: cold.map((c) => c.build_ms),
    warm_build_ms: warmMs,
    process_to_build_end_s: median("process_to_build_end_s"),
    process_total_s: median("process_total_s"),
    peak_rss_mb: median("peak_rss_mb"),
    hit_unlimited: first.hit_unlimited,
    hit_20: first.hit_20,
    baseline_unlimited: first.baseline_unlimited,
    baseline_20: first.baseline_20,
    capacity_tokens: first.capacity_tokens,
    kendall_tau_mean: first.kendall_tau_mean,
    reordered_share: first.reordered_share,
    contextpilot: ref ?? null,
  };
  if (ref) {
    out.hit_unlimited_vs_cp = (first.hit_unlimited as number) / ref.unlimited;
    out.hit_20_vs_cp = (first.hit_20 as number) / ref.capped20;
    out.speedup_build = ref.buildS / (buildMs / 1000);
    out.speedup_process = ref.buildS / (out.process_to_build_end_s as number);
    // Our input-order baseline must agree with the reference's (sim.py), to its rounding.
    for (const [ours, theirs, label] of [[first.baseline_unlimited, ref.inputUnlimited, "unlimited"], [first.baseline_20, ref.input20, "20%"]] as const) {
      if (Math.abs((ours as number) - theirs) > 0.0006) notes.push(`${name}: input-order hit ratio (${label}) ${pct(ours as number)} differs from REFERENCE.md's ${pct(theirs)}.`);
    }
  }
  return out;
}

function runChild(args: string[]): Record<string, number | string> {
  const child = spawnSync(process.execPath, [CHILD, ...args], { encoding: "utf8", maxBuffer: 1 << 24 });
  if (child.status !== 0) fail(`child failed (${args.join(" ")}), exit ${child.status ?? child.signal}:\n${child.stderr}`);
  const last = child.stdout.trim().split("\n").pop()!;
  return JSON.parse(last);
}

function workloadFile(name: string): string {
  if (name !== GENERATED.name) return join(WORKLOADS, "data", `${name}.jsonl`); // checked by readReferences
  const file = join(CACHE, `${name}.jsonl`);
  if (!existsSync(file)) {
    mkdirSync(CACHE, { recursive: true });
    console.error(`generating ${file} with gen.py (once) ...`);
    const args = [join(WORKLOADS, "gen.py"), "rag", "--n", String(GENERATED.n), "--k", String(GENERATED.k), "--out", file];
    const gen = spawnSync("python3", args, { encoding: "utf8" });
    if (gen.status !== 0) fail(`python3 ${args.join(" ")} failed:\n${gen.stderr}`);
  }
  return file;
}

/** The table of REFERENCE.md, keyed by workload; each workload's file must exist. */
function readReferences(): Map<string, Reference> {
  const referencePath = join(WORKLOADS, "REFERENCE.md");
  if (!existsSync(referencePath)) {
    fail(`${referencePath} not found: the benchmark needs the shared workloads (REFERENCE.md, gen.py, data/) in ../shared/workloads next to the repository`);
  }
  const refs = new Map<string, Reference>();
  const row = /^\| (zipf_\w+) \| ([\d.]+) \| [\d.]+ \| (\d+) \| ([\d.]+)% \/ ([\d.]+)% \| ([\d.]+)% \/ ([\d.]+)% \|$/;
  for (const line of readFileSync(referencePath, "utf8").split("\n")) {
    const m = row.exec(line.trim());
    if (!m) continue;
    const [, name, buildS, rss, inU, in20, u, c20] = m;
    refs.set(name!, {
      buildS: Number(buildS),
      rssMb: Number(rss),
      inputUnlimited: Number(inU) / 100,
      input20: Number(in20) / 100,
      unlimited: Number(u) / 100,
      capped20: Number(c20) / 100,
    });
    const file = join(WORKLOADS, "data", `${name}.jsonl`);
    if (!existsSync(file)) fail(`workload ${file} is missing (make it with python3 ${join(WORKLOADS, "gen.py")} all --skip-100k --outdir ${join(WORKLOADS, "data")})`);
  }
  if (refs.size === 0) fail(`no reference rows found in ${referencePath}`);
  return refs;
}

function markdownTable(rows: Record<string, any>[]): string {
  const head = [
    "workload", "method", "build ms (warm)", "process s: to build end / total", "peak RSS MB: ours / CP",
    "CP build s", "speedup: build / process", "hit unlimited: ours / CP (×)", "hit 20% cap: ours / CP (×)",
    "input order: unlimited / 20%", "mean Kendall τ", "reordered",
  ];
  const lines = [`| ${head.join(" | ")} |`, `|${head.map(() => "---").join("|")}|`];
  for (const r of rows) {
    const cp: Reference | null = r.contextpilot;
    const method = r.requested_method === r.method ? r.method : `${r.requested_method}→${r.method}`;
    lines.push(
      `| ${[
        r.workload,
        method,
        `${fixed(r.build_ms, 1)}${r.warm_build_ms === null ? "" : ` (${fixed(r.warm_build_ms, 1)})`}`,
        `${fixed(r.process_to_build_end_s, 2)} / ${fixed(r.process_total_s, 2)}`,
        `${Math.round(r.peak_rss_mb)} / ${cp ? cp.rssMb : "—"}`,
        cp ? String(cp.buildS) : "—",
        cp ? `${times(r.speedup_build)} / ${times(r.speedup_process)}` : "—",
        `${pct(r.hit_unlimited)} / ${cp ? `${pct(cp.unlimited)} (${fixed(r.hit_unlimited_vs_cp, 3)})` : "—"}`,
        `${pct(r.hit_20)} / ${cp ? `${pct(cp.capped20)} (${fixed(r.hit_20_vs_cp, 3)})` : "—"}`,
        `${pct(r.baseline_unlimited)} / ${pct(r.baseline_20)}`,
        fixed(r.kendall_tau_mean, 3),
        pct(r.reordered_share),
      ].join(" | ")} |`,
    );
  }
  return lines.join("\n");
}

function medianOf(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function fixed(x: number, digits: number): string {
  return x.toFixed(digits);
}

function times(x: number): string {
  return `${x.toFixed(x >= 100 ? 0 : 1)}×`;
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

function fail(message: string): never {
  console.error(`bench-index: ${message}`);
  process.exit(2);
}
