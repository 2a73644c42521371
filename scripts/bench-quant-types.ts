/**
 * The quantized weight types' linear kernels side by side at one shape (issue 29, item 3): each
 * type's `ctxr-runner --bench-linear TYPE M N K` (median of --repeat calls in one process) in
 * interleaved rounds (type order rotated each round), so that every type sees the same stretch
 * of a shared machine's noise; the table gives each type's median over the rounds and its time
 * relative to Q4_0 and Q8_0.
 *
 *   npx bun scripts/bench-quant-types.ts [--types q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4]
 *       [--m 1,128] [--n 4096] [--k 4096] [--threads 1] [--repeat 30] [--rounds 5]
 *       [--isa native|avx2] [--runner PATH] [--json FILE]
 *
 * M = 1 is a decode step (the int8 row dot kernels, bound by the weight bytes), M = 128 a
 * prefill tile (the int8 GEMM; where the GEMM does not take the type on AVX2 — Q8_0, IQ4_NL —
 * the row dots). --isa avx2 sets CTXR_CPU_ISA=avx2.
 */
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { REPO, median, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    types: { type: "string", default: "q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4" },
    m: { type: "string", default: "1,128" },
    n: { type: "string", default: "4096" },
    k: { type: "string", default: "4096" },
    threads: { type: "string", default: "1" },
    repeat: { type: "string", default: "30" },
    rounds: { type: "string", default: "5" },
    isa: { type: "string", default: "native" },
    runner: { type: "string", default: join(REPO, "cuda", "build", "ctxr-runner-cpu") },
    json: { type: "string" },
  },
});
const types = values.types!.split(",");
const rounds = Number(values.rounds);
const env = { ...process.env, ...(values.isa === "avx2" ? { CTXR_CPU_ISA: "avx2" } : {}) };

interface Sample {
  isa: string;
  path: string;
  median_ms: number;
  weight_gbps: number;
}

function once(type: string, m: string): Sample {
  const argv = ["--bench-linear", type, m, values.n!, values.k!, "--threads", values.threads!, "--repeat", values.repeat!];
  const run = spawnSync(values.runner!, argv, { encoding: "utf8", env });
  if (run.status !== 0) throw new Error(`ctxr-runner ${argv.join(" ")} failed: ${run.stderr.trim()}`);
  return JSON.parse(run.stdout.trim().split("\n").at(-1)!) as Sample;
}

const results: { m: string; type: string; isa: string; path: string; ms: number; gbps: number }[] = [];
for (const m of values.m!.split(",")) {
  const samples = new Map<string, Sample[]>(types.map((t) => [t, []]));
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < types.length; i++) {
      const type = types[(i + r) % types.length]!;
      samples.get(type)!.push(once(type, m));
    }
    progress(`M=${m}: round ${r + 1}/${rounds}`);
  }
  for (const type of types) {
    const s = samples.get(type)!;
    results.push({ m, type, isa: s[0]!.isa, path: s[0]!.path, ms: median(s.map((x) => x.median_ms)), gbps: median(s.map((x) => x.weight_gbps)) });
  }
}

console.log(`${cpus()[0]?.model ?? "cpu"}, ${cpus().length} cores, load ${loadavg()[0]!.toFixed(1)}; N=${values.n} K=${values.k}, ${values.threads} thread(s), ${rounds} rounds × ${values.repeat} calls`);
console.log("| M | type | ISA, path | median ms | weight GB/s | × Q4_0 | × Q8_0 |");
console.log("|---|---|---|---|---|---|---|");
for (const r of results) {
  const of = (t: string) => results.find((x) => x.m === r.m && x.type === t)?.ms;
  const ratio = (t: string) => (of(t) ? (r.ms / of(t)!).toFixed(2) : "–");
  console.log(`| ${r.m} | ${r.type.toUpperCase()} | ${r.isa} ${r.path} | ${r.ms.toFixed(3)} | ${r.gbps.toFixed(1)} | ${ratio("q4_0")} | ${ratio("q8_0")} |`);
}
console.log(JSON.stringify(results));
if (values.json) writeFileSync(values.json, JSON.stringify(results, null, 2));
