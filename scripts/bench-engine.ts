/**
 * Engine benchmark (issue 5, item 6): prefill and decode tokens/s of the bundled runner, next to
 * the machine's measured GEMM peak.
 *
 *   npx bun scripts/bench-engine.ts [--device cpu|cuda] [--threads N] [--models tiny,100m]
 *                                   [--contexts 512,4096] [--decode-steps 16] [--batch 8]
 *                                   [--runs 3] [--json out.json]
 *
 * Models are random-weight Llama checkpoints written by the same code as `ctxr model tiny`
 * into .bench/engine-models/ when missing:
 *   tiny  the default tiny model (2 layers, hidden 64, vocab 259), f32
 *   100m  12 layers, hidden 768, 12 heads (4 KV heads, GQA), intermediate 2048, vocab 16384:
 *         100.7M parameters, f32 (CPU) — the "~100M-parameter" model of the issue
 *   1b    16 layers, hidden 2048, 32 heads (8 KV), intermediate 8192, vocab 32000: 1.37B, bf16 (GPU)
 *
 * For each model and context length L (one fresh runner per model):
 *   prefill  one FORWARD of L tokens (positions 0..L-1), with the runner's PROFILE on: wall
 *            tokens/s, and the GFLOP/s of the GEMMs (every linear layer, FLOPs 2·m·n·k, timed
 *            inside the runner) and of attention.
 *   decode   one token a step at context L: a single sequence, and `--batch` sequences (COPY of
 *            the prefilled blocks) decoded together in one FORWARD a step (continuous batching).
 * Medians over --runs. The CPU peak is `ctxr-runner --peak-gflops` (AVX2 FMA loop on all
 * threads), measured before and after the runs; the GEMM share is quoted against the median.
 *
 * Prints the machine, the command and a markdown table on stdout (progress on stderr).
 *
 * Against llama.cpp (issue 14, item 5), CPU only; see scripts/benchEngineVsLlamaCpp.ts:
 *   npx bun scripts/bench-engine.ts --vs-llamacpp [--quick] [--threads 2] [--models 100m,1b]
 *        [--types f16,q8_0,q4_k] [--contexts 512,4096] [--decode-after 512] [--decode-steps 32]
 *        [--runs 3] [--long-runs 1] [--llamacpp-dir DIR] [--runner PATH] [--json out.json]
 * the same GGUF file (`ctxr model quantize` of the bench model, .bench/engine-models/gguf/) on
 * both sides, the same threads, fresh processes interleaved: prefill and decode tokens/s, peak
 * RSS, and the ggml CPU variant llama.cpp picked. llama.cpp is node-llama-cpp@3.22.1's prebuilt
 * CPU build driven by llama_native (../shared/tools/llama-native), installed into a scratch
 * folder (.bench/llamacpp) when missing. --runner PATH: a built runner instead of
 * `make -C cuda cpu` (any mode). --quick: the 100m model, prefill 512 and decode only.
 *
 * The architectures of issue 29 (item 6) at ~1B parameters, same comparison:
 *   npx bun scripts/bench-engine.ts --vs-llamacpp --arch qwen3,gemma3,phi3[,llama]
 *        [--types q4_k_m,q8_0] [--parallel 4] ...
 * random-weight files of each family's shape and vocabulary written by llama.cpp's gguf-py and
 * quantized by llama.cpp's quantizer (scripts/benchArchModels.ts, .bench/arch-models/).
 * --parallel N (N > 1, either mode): N streams' total decode tok/s, ctxr's one FORWARD of N
 * sequences a step against llama.cpp's one llama_decode of N sequences (llama_native --parallel N).
 */
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { parseArgs } from "node:util";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { type RunnerProfile, sequenceRange } from "../src/runner/runnerProtocol.ts";
import { tinyModelParameterCount } from "../src/model/tinyModel.ts";
import { DEFAULT_ARCH_TYPES } from "./benchArchModels.ts";
import { benchVsLlamaCpp } from "./benchEngineVsLlamaCpp.ts";
import { BENCH_MODELS as MODELS, benchModelFolder as modelFolder, buildBenchRunner, median, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    device: { type: "string", default: "cpu" },
    threads: { type: "string", default: String(cpus().length) },
    models: { type: "string" },
    contexts: { type: "string", default: "512,4096" },
    "decode-steps": { type: "string", default: "16" },
    batch: { type: "string", default: "8" },
    runs: { type: "string", default: "3" },
    json: { type: "string" },
    "vs-llamacpp": { type: "boolean", default: false },
    quick: { type: "boolean", default: false },
    types: { type: "string" },
    arch: { type: "string" },
    parallel: { type: "string", default: "1" },
    "decode-after": { type: "string", default: "512" },
    "long-runs": { type: "string", default: "1" },
    "llamacpp-dir": { type: "string" },
    runner: { type: "string" },
  },
});
const vsLlamaCpp = values["vs-llamacpp"]!;
if (!Number.isInteger(Number(values.parallel)) || Number(values.parallel) < 1) throw new Error(`--parallel must be a whole number ≥ 1, not '${values.parallel}'`);
if (values.arch !== undefined && !vsLlamaCpp) throw new Error("--arch is a mode of --vs-llamacpp");
values.types ??= values.arch !== undefined ? DEFAULT_ARCH_TYPES.join(",") : "f16,q8_0,q4_k";
values.models ??= vsLlamaCpp ? (values.quick ? "100m" : "100m,1b") : "tiny,100m";
if (vsLlamaCpp && values.quick) values.contexts = "512";

const device = values.device!;
const threads = Number(values.threads);
const contexts = values.contexts!.split(",").map(Number);
const decodeSteps = Number(values["decode-steps"]);
const batch = Number(values.batch);
const runs = Number(values.runs);
const modelNames = values.models!.split(",");
for (const name of modelNames) if (!MODELS[name]) throw new Error(`unknown model '${name}' (${Object.keys(MODELS).join(", ")})`);
if (device !== "cpu" && !device.startsWith("cuda")) throw new Error("--device must be cpu or cuda[:N]");

const buildRunner = () => values.runner ?? buildBenchRunner(device);

if (vsLlamaCpp) {
  if (device !== "cpu") throw new Error("--vs-llamacpp compares CPU builds: use --device cpu");
  const decodeStepsGiven = process.argv.includes("--decode-steps");
  await benchVsLlamaCpp({
    executable: buildRunner(),
    threads,
    models: modelNames,
    archs: values.arch?.split(","),
    types: values.types!.split(","),
    parallel: Number(values.parallel),
    contexts,
    decodeAfter: Number(values["decode-after"]),
    decodeSteps: decodeStepsGiven ? decodeSteps : 32,
    runs,
    longRuns: Number(values["long-runs"]),
    llamacppDir: values["llamacpp-dir"],
    json: values.json,
    command: `npx bun scripts/bench-engine.ts ${process.argv.slice(2).join(" ")}`.trimEnd(),
  });
  process.exit(0);
}

function peakGflops(executable: string): number {
  const run = spawnSync(executable, ["--peak-gflops", "--threads", String(threads), "--seconds", "1"], { encoding: "utf8" });
  if (run.status !== 0) throw new Error(`--peak-gflops failed: ${run.stderr}`);
  return (JSON.parse(run.stdout.trim()) as { gflops: number }).gflops;
}

interface Row {
  model: string;
  parameters: number;
  context: number;
  prefill_tokens_per_s: number;
  prefill_seconds: number;
  gemm_gflops: number;
  gemm_share_of_time: number;
  attention_gflops: number;
  decode_tokens_per_s: number;
  batch_decode_tokens_per_s: number;
}

async function benchModel(executable: string, name: string): Promise<Row[]> {
  const path = modelFolder(name);
  const blockSize = 16;
  const maxContext = Math.max(...contexts);
  const perSequence = Math.ceil((maxContext + decodeSteps + 1) / blockSize);
  const runner = await RunnerProcess.start({ executable, model: path, blocks: perSequence * (batch + 1), blockSize, threads, device, log: () => {} });
  const rows: Row[] = [];
  try {
    const vocabForPrompt = Math.min(256, runner.info.vocab);
    for (const context of contexts) {
      const tokens = Array.from({ length: context }, (_, i) => (i * 7919 + 13) % vocabForPrompt);
      const prefill: RunnerProfile[] = [];
      const prefillWall: number[] = [];
      const decode: number[] = [];
      const batchDecode: number[] = [];
      for (let run = 0; run < runs; run++) {
        const table = await runner.alloc(perSequence);
        await runner.profile(true);
        const started = performance.now();
        await runner.forward({ sequences: [{ table, tokens, indices: sequenceRange(0, context), logitRows: [context - 1] }] });
        prefillWall.push((performance.now() - started) / 1000);
        prefill.push(await runner.profile(false));

        // Decode at context L: tokens L .. L+steps-1 of the one sequence.
        let begin = performance.now();
        for (let step = 0; step < decodeSteps; step++) {
          await runner.forward({ sequences: [{ table, tokens: [tokens[step]!], indices: [context + step], logitRows: [0] }] });
        }
        decode.push(decodeSteps / ((performance.now() - begin) / 1000));

        // The same context copied into `batch` sequences, decoded together.
        const tables: number[][] = [];
        for (let b = 0; b < batch; b++) {
          const copy = await runner.alloc(perSequence);
          await runner.copy(table.map((src, i) => ({ src, dst: copy[i]! })));
          tables.push(copy);
        }
        begin = performance.now();
        for (let step = 0; step < decodeSteps; step++) {
          await runner.forward({ sequences: tables.map((t, b) => ({ table: t, tokens: [tokens[(step + b) % context]!], indices: [context + step], logitRows: [0] })) });
        }
        batchDecode.push((batch * decodeSteps) / ((performance.now() - begin) / 1000));
        await runner.free([...table, ...tables.flat()]);
        progress(`${name} L=${context} run ${run + 1}/${runs}: prefill ${prefillWall.at(-1)!.toFixed(3)} s, decode ${decode.at(-1)!.toFixed(1)} tok/s, batch ${batchDecode.at(-1)!.toFixed(1)} tok/s`);
      }
      rows.push({
        model: name,
        parameters: tinyModelParameterCount(MODELS[name]!),
        context,
        prefill_seconds: median(prefillWall),
        prefill_tokens_per_s: context / median(prefillWall),
        gemm_gflops: median(prefill.map((p) => p.linear_flops / p.linear_seconds / 1e9)),
        gemm_share_of_time: median(prefill.map((p) => p.linear_seconds / p.total_seconds)),
        attention_gflops: median(prefill.map((p) => p.attention_flops / p.attention_seconds / 1e9)),
        decode_tokens_per_s: median(decode),
        batch_decode_tokens_per_s: median(batchDecode),
      });
    }
  } finally {
    await runner.shutdown();
  }
  return rows;
}

const executable = buildRunner();
const peaks: number[] = [];
if (device === "cpu") peaks.push(peakGflops(executable));
const rows: Row[] = [];
for (const name of modelNames) rows.push(...(await benchModel(executable, name)));
if (device === "cpu") peaks.push(peakGflops(executable));
const peak = peaks.length ? median(peaks) : NaN;

const cpu = cpus()[0]?.model ?? "unknown CPU";
console.log(`machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`command: npx bun scripts/bench-engine.ts ${process.argv.slice(2).join(" ")}`.trimEnd());
console.log(`device ${device}, ${threads} threads, ${runs} runs (medians), decode ${decodeSteps} steps, batch ${batch}`);
if (device === "cpu") console.log(`measured f32 FMA peak: ${peak.toFixed(1)} GFLOP/s (before ${peaks[0]!.toFixed(1)}, after ${peaks[1]!.toFixed(1)})`);
console.log("");
console.log("| model | params | context | prefill tok/s | prefill s | GEMM GFLOP/s | GEMM % of peak | GEMM share of prefill | attention GFLOP/s | decode tok/s (1 seq) | decode tok/s (batch) |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  const share = device === "cpu" ? `${((100 * r.gemm_gflops) / peak).toFixed(1)}%` : "—";
  console.log(
    `| ${r.model} | ${(r.parameters / 1e6).toFixed(1)}M | ${r.context} | ${r.prefill_tokens_per_s.toFixed(0)} | ${r.prefill_seconds.toFixed(3)} | ${r.gemm_gflops.toFixed(1)} | ${share} | ${(100 * r.gemm_share_of_time).toFixed(0)}% | ${r.attention_gflops.toFixed(1)} | ${r.decode_tokens_per_s.toFixed(1)} | ${r.batch_decode_tokens_per_s.toFixed(1)} |`,
  );
}
if (values.json) writeFileSync(values.json, JSON.stringify({ device, threads, peak_gflops: peak, peaks, rows }, null, 2));
