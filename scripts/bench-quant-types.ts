/**
 * The quantized weight types' linear kernels side by side at one shape (issue 29, item 3): each
 * type's `ctxr-runner --bench-linear TYPE M N K` (a fresh process: the runner times --repeat
 * calls of its linear layer and reports the median, with the ISA and the path it chose) in
 * interleaved rounds (every type once a round, the order rotated each round), so that every type
 * sees the same stretch of a shared machine's noise. The table gives each type's median over the
 * rounds, the weight bytes read per second, and the median of its per-round ratios to each
 * baseline (Q4_0 for the 32-element blocks, Q4_K for the 256-element super-blocks).
 *
 *   npx bun scripts/bench-quant-types.ts
 *       [--types q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4,q4_k,q2_k,q3_k,q5_k,q6_k,iq4_xs]
 *       [--baselines q4_0,q4_k] [--m 1,128] [--n 4096] [--k 4096] [--threads 1] [--repeat 30]
 *       [--rounds 7] [--isa native|avx2] [--runner PATH] [--json FILE]
 *
 * M = 1 is a decode step (the int8 row dot kernels, bound by the weight bytes), M = 128 a
 * prefill tile (the int8 GEMM). --isa avx2 sets CTXR_CPU_ISA=avx2. Every type of issue 29 is
 * benched by default; a baseline missing from --types is added.
 */
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { REPO, median, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    types: { type: "string", default: "q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4,q4_k,q2_k,q3_k,q5_k,q6_k,iq4_xs" },
    baselines: { type: "string", default: "q4_0,q4_k" },
    m: { type: "string", default: "1,128" },
    n: { type: "string", default: "4096" },
    k: { type: "string", default: "4096" },
    threads: { type: "string", default: "1" },
    repeat: { type: "string", default: "30" },
    rounds: { type: "string", default: "7" },
    isa: { type: "string", default: "native" },
    runner: { type: "string", default: join(REPO, "cuda", "build", "ctxr-runner-cpu") },
    json: { type: "string" },
  },
});
const baselines = values.baselines!.split(",").filter(Boolean);
const types = [...baselines, ...values.types!.split(",").filter((t) => t && !baselines.includes(t))];
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

interface Result {
  m: string;
  type: string;
  isa: string;
  path: string;
  ms: number;
  gbps: number;
  /** Median over rounds of this type's time / the baseline's time in the same round. */
  ratios: Record<string, number>;
}

const results: Result[] = [];
for (const m of values.m!.split(",")) {
  const samples = new Map<string, Sample[]>(types.map((t) => [t, []]));
  const ratios = new Map<string, Map<string, number[]>>(types.map((t) => [t, new Map(baselines.map((b) => [b, []]))]));
  for (let r = 0; r < rounds; r++) {
    const thisRound = new Map<string, number>();
    for (let i = 0; i < types.length; i++) {
      const type = types[(i + r) % types.length]!;
      const s = once(type, m);
      samples.get(type)!.push(s);
      thisRound.set(type, s.median_ms);
    }
    for (const type of types) for (const b of baselines) ratios.get(type)!.get(b)!.push(thisRound.get(type)! / thisRound.get(b)!);
    progress(`M=${m}: round ${r + 1}/${rounds}`);
  }
  for (const type of types) {
    const s = samples.get(type)!;
    results.push({
      m,
      type,
      isa: s[0]!.isa,
      path: s[0]!.path,
      ms: median(s.map((x) => x.median_ms)),
      gbps: median(s.map((x) => x.weight_gbps)),
      ratios: Object.fromEntries(baselines.map((b) => [b, median(ratios.get(type)!.get(b)!)])),
    });
  }
}

console.log(`${cpus()[0]?.model ?? "cpu"}, ${cpus().length} cores, load ${loadavg()[0]!.toFixed(1)}; N=${values.n} K=${values.k}, ${values.threads} thread(s), ${rounds} rounds × ${values.repeat} calls`);
console.log(`| M | type | ISA, path | median ms | weight GB/s | ${baselines.map((b) => `× ${b.toUpperCase()}`).join(" | ")} |`);
console.log(`|---|---|---|---:|---:|${baselines.map(() => "---:|").join("")}`);
for (const r of results) {
  const cells = baselines.map((b) => r.ratios[b]!.toFixed(2));
  console.log(`| ${r.m} | ${r.type.toUpperCase()} | ${r.isa} ${r.path} | ${r.ms.toFixed(3)} | ${r.gbps.toFixed(1)} | ${cells.join(" | ")} |`);
}
console.log(JSON.stringify(results));
if (values.json) writeFileSync(values.json, JSON.stringify(results, null, 2));
