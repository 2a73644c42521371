/**
 * The quantized weight formats' linear kernels against a baseline format at the same shape, in
 * interleaved rounds (every format once a round, in a rotating order), so that each round's
 * ratio to the baseline comes from the same stretch of a shared machine's noise.
 *
 *   npx bun scripts/bench-quant-types.ts [--types q2_k,q3_k,q5_k,iq4_xs,q6_k] [--baseline q4_k]
 *       [--shapes 1x4096x4096,128x4096x4096] [--threads 1] [--rounds 7] [--repeat 30]
 *       [--isa avx512|avx2] [--runner PATH]
 *
 * Each case is `ctxr-runner --bench-linear TYPE M N K --threads T --repeat R` (a fresh process:
 * the runner times R calls of its linear layer and reports the median, with the ISA and the path
 * it chose: the row dot products for M ≤ 16, the int8 GEMM above). --isa avx2 sets
 * CTXR_CPU_ISA=avx2. Prints, per shape and format, the median over rounds of the per-call median
 * (ms), the weight bytes read per second, and the median of the per-round ratios to the baseline.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { REPO, median, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    types: { type: "string", default: "q2_k,q3_k,q5_k,iq4_xs,q6_k" },
    baseline: { type: "string", default: "q4_k" },
    shapes: { type: "string", default: "1x4096x4096,128x4096x4096" },
    threads: { type: "string", default: "1" },
    rounds: { type: "string", default: "7" },
    repeat: { type: "string", default: "30" },
    isa: { type: "string" },
    runner: { type: "string", default: join(REPO, "cuda", "build", "ctxr-runner-cpu") },
  },
});

interface Measurement {
  median_ms: number;
  weight_gbps: number;
  isa: string;
  path: string;
}

function measure(type: string, [m, n, k]: number[]): Measurement {
  const env = { ...process.env, ...(values.isa === "avx2" ? { CTXR_CPU_ISA: "avx2" } : {}) };
  const args = ["--bench-linear", type, String(m), String(n), String(k), "--threads", values.threads!, "--repeat", values.repeat!];
  const result = spawnSync(values.runner!, args, { env, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`${values.runner} ${args.join(" ")} failed: ${result.stderr}`);
  return JSON.parse(result.stdout.trim().split("\n").at(-1)!) as Measurement;
}

const baseline = values.baseline!;
const types = [baseline, ...values.types!.split(",").filter((t) => t !== baseline)];
const rounds = Number(values.rounds);
console.log(`# ctxr-runner --bench-linear, ${values.threads} thread(s), ${rounds} interleaved rounds, ratios to ${baseline}`);
for (const shapeText of values.shapes!.split(",")) {
  const shape = shapeText.split("x").map(Number);
  const times = new Map<string, number[]>(types.map((t) => [t, []]));
  const ratios = new Map<string, number[]>(types.map((t) => [t, []]));
  const last = new Map<string, Measurement>();
  for (let round = 0; round < rounds; round++) {
    const order = types.map((_, i) => types[(i + round) % types.length]!);
    const thisRound = new Map<string, number>();
    for (const type of order) {
      const m = measure(type, shape);
      thisRound.set(type, m.median_ms);
      times.get(type)!.push(m.median_ms);
      last.set(type, m);
    }
    for (const type of types) ratios.get(type)!.push(thisRound.get(type)! / thisRound.get(baseline)!);
    progress(`${shapeText} round ${round + 1}/${rounds}`);
  }
  console.log(`\n## ${shapeText} (M×N×K), isa ${last.get(baseline)!.isa}\n`);
  console.log("| format | path | median ms | weight GB/s | × " + baseline + " time |");
  console.log("|---|---|---:|---:|---:|");
  for (const type of types) {
    const ms = median(times.get(type)!);
    const m = last.get(type)!;
    const gbps = (m.weight_gbps * m.median_ms) / ms;
    console.log(`| ${type} | ${m.path} | ${ms.toFixed(3)} | ${gbps.toFixed(1)} | ${median(ratios.get(type)!).toFixed(2)} |`);
  }
}
