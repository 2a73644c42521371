/**
 * `scripts/bench-engine.ts --vs-llamacpp`: the bundled runner against llama.cpp in its own loop
 * (scripts/benchLlamaCpp.ts) on the same GGUF files, the same threads.
 *
 * Files: the bench models of benchKit.ts (random weights) written by `ctxr model quantize` into
 * .bench/engine-models/gguf/<model>-<type>.gguf when missing; with --arch, the ~1B-parameter
 * files of scripts/benchArchModels.ts (llama.cpp's gguf-py and quantizer). Each repetition starts one fresh
 * process per side, file and type, in interleaved order (ctxr first on even repetitions,
 * llama.cpp first on odd ones), and each process does the same work:
 *   warm-up   one 512-token prefill (llama.cpp's driver does the same)
 *   prefill   L tokens from an empty cache, for each --contexts L, in batches of 512 tokens on
 *             both sides (llama.cpp's default batch in llama_decode; ctxr's FORWARDs of at most
 *             512 prompt tokens, the chunk `ctxr serve` prefills per step), tokens/s
 *   decode    a (decode-after − 1)-token prompt, then --decode-steps single-token steps, each
 *             fed the argmax of the previous logits, tokens/s (ctxr: FORWARD's greedy rows, the
 *             argmax token the runner returns in place of the logits, as `ctxr serve` asks for a
 *             greedy request without logprobs; llama.cpp: its logits read in-process)
 *   parallel  with --parallel N > 1: N sequences at decode-after tokens decoded together, one token
 *             each per step (ctxr: one FORWARD of N sequences, as `ctxr serve` batches streams;
 *             llama.cpp: one llama_decode of N sequences, llama_native --parallel N), total
 *             tokens/s. ctxr copies one prefilled prompt into the N sequences (COPY of its KV
 *             blocks), llama.cpp prefills N prompts; only the decode steps are timed
 *   peak RSS  of the process (ctxr: VmHWM before shutdown; llama.cpp: getrusage at exit)
 * Contexts above 1,024 are measured in the first --long-runs repetitions only (they dominate
 * the time). Figures are medians over repetitions; ratios are ctxr / llama.cpp.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { sequenceRange } from "../src/runner/runnerProtocol.ts";
import { archModelFile } from "./benchArchModels.ts";
import { REPO, benchModelFolder, median, progress } from "./benchKit.ts";
import { type LlamaCpp, prepareLlamaCpp, runLlamaNative } from "./benchLlamaCpp.ts";

export interface VsLlamaCppOptions {
  executable: string;
  threads: number;
  models: string[];
  /** Architectures (scripts/benchArchModels.ts) instead of `models`. */
  archs?: string[];
  types: string[];
  /** > 1: also N streams' batched decode. */
  parallel: number;
  contexts: number[];
  decodeAfter: number;
  decodeSteps: number;
  runs: number;
  longRuns: number;
  llamacppDir?: string;
  json?: string;
  command: string;
}

/** One process's figures. */
interface Sample {
  prefill: Record<number, number>;
  decode: number;
  parallelDecode?: number;
  peakRssBytes: number;
  /** llama.cpp only: the ggml CPU variant it loaded. */
  cpuVariant?: string;
}

interface Row {
  model: string;
  type: string;
  file: string;
  file_bytes: number;
  ctxr: Summary & { samples: Sample[] };
  llamacpp: Summary & { samples: Sample[]; cpu_variant: string };
  ratio: { prefill: Record<number, number>; decode: number; parallel_decode?: number };
}

interface Summary {
  prefill: Record<number, number>;
  decode: number;
  parallel_decode?: number;
  peak_rss_bytes: number;
}

const GGUF_DIR = join(REPO, ".bench", "engine-models", "gguf");
const PROMPT_VOCAB = 256;
const WARMUP_TOKENS = 512;
// Prompt tokens per FORWARD: the default chunk `ctxr serve` prefills per step and llama.cpp's default batch.
const PREFILL_BATCH = 512;

/** The same prompt as llama_native's: token i of salt s is (i·7919 + 13 + s) mod 256. */
function prompt(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (i * 7919 + 13 + salt) % PROMPT_VOCAB);
}

/** The model's GGUF file of `type`, quantized from the bench model folder when missing. */
function ggufFile(model: string, type: string): string {
  const path = join(GGUF_DIR, `${model}-${type}.gguf`);
  if (existsSync(path)) return path;
  const folder = benchModelFolder(model);
  mkdirSync(GGUF_DIR, { recursive: true });
  progress(`ctxr model quantize ${folder} ${path} --type ${type} ...`);
  const run = spawnSync(process.execPath, [join(REPO, "src", "cli", "main.ts"), "model", "quantize", folder, path, "--type", type], { stdio: ["ignore", "ignore", "inherit"] });
  if (run.status !== 0) throw new Error(`ctxr model quantize failed for ${model} ${type} (exit ${run.status})`);
  return path;
}

function peakRss(pid: number | null): number {
  if (pid === null) return NaN;
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return match ? Number(match[1]) * 1024 : NaN;
}

async function runCtxr(options: VsLlamaCppOptions, file: string, contexts: number[]): Promise<Sample & { kvDtype: string }> {
  const blockSize = 16;
  const blocksFor = (tokens: number) => Math.ceil((tokens + options.decodeSteps) / blockSize) + 1;
  const longest = Math.max(WARMUP_TOKENS, options.decodeAfter, ...contexts);
  // The longest prompt alone, or the parallel streams and the prompt they are copied from.
  const blocks = Math.max(blocksFor(longest), (options.parallel + 1) * blocksFor(options.decodeAfter));
  // One KV group: this driver gives each sequence one table and copies the prompt's blocks into the
  // parallel streams (COPY), which a sliding-window model's two groups refuse; the compute per token
  // is the same (sliding layers attend within their window either way).
  const runner = await RunnerProcess.start({ executable: options.executable, model: file, blocks, blockSize, threads: options.threads, kvGroups: 1, log: () => {} });
  try {
    const forward = async (tokens: number[], start: number) => {
      const table = await runner.alloc(blocksFor(tokens.length));
      const began = performance.now();
      let logits: Float32Array | undefined;
      for (let at = 0; at < tokens.length; at += PREFILL_BATCH) {
        const batch = tokens.slice(at, at + PREFILL_BATCH);
        const last = at + batch.length === tokens.length;
        const result = await runner.forward({ sequences: [{ table, tokens: batch, indices: sequenceRange(start + at, batch.length), logitRows: last ? [batch.length - 1] : [] }] });
        if (last) logits = result.logits[0];
      }
      return { table, seconds: (performance.now() - began) / 1000, logits: logits! };
    };
    const warm = await forward(prompt(WARMUP_TOKENS, 99), 0);
    await runner.free(warm.table);
    const prefill: Record<number, number> = {};
    for (const context of contexts) {
      const run = await forward(prompt(context, context), 0);
      await runner.free(run.table);
      prefill[context] = context / run.seconds;
    }
    const tokens = prompt(options.decodeAfter, 1);
    const head = await forward(tokens.slice(0, -1), 0);
    let token = tokens.at(-1)!;
    const began = performance.now();
    for (let step = 0; step < options.decodeSteps; step++) {
      const position = options.decodeAfter - 1 + step;
      const { greedy } = await runner.forward({ sequences: [{ table: head.table, tokens: [token], indices: [position], logitRows: [0] }], greedyRows: true });
      token = greedy![0]!.tokens[0]!;
    }
    const decode = options.decodeSteps / ((performance.now() - began) / 1000);
    await runner.free(head.table);
    const parallelDecode = options.parallel > 1 ? await decodeStreams(runner, forward, options) : undefined;
    return { prefill, decode, parallelDecode, peakRssBytes: peakRss(runner.pid), kvDtype: runner.info.kv_dtype };
  } finally {
    await runner.shutdown();
  }
}

type Prefill = (tokens: number[], start: number) => Promise<{ table: number[]; logits: Float32Array }>;

/** N streams at decode-after tokens, decoded together one token each per FORWARD: total tokens/s. */
async function decodeStreams(runner: RunnerProcess, prefill: Prefill, options: VsLlamaCppOptions): Promise<number> {
  const head = await prefill(prompt(options.decodeAfter - 1, 100), 0);
  const tables: number[][] = [];
  for (let s = 0; s < options.parallel; s++) {
    const table = await runner.alloc(head.table.length);
    await runner.copy(head.table.map((src, i) => ({ src, dst: table[i]! })));
    tables.push(table);
  }
  await runner.free(head.table);
  // Each stream its own last prompt token, so that the streams diverge as llama_native's do.
  let last = tables.map((_, s) => prompt(options.decodeAfter, 100 + 17 * s).at(-1)!);
  const began = performance.now();
  for (let step = 0; step < options.decodeSteps; step++) {
    const position = options.decodeAfter - 1 + step;
    const { greedy } = await runner.forward({ sequences: tables.map((table, s) => ({ table, tokens: [last[s]!], indices: [position], logitRows: [0] })), greedyRows: true });
    last = greedy!.map((rows) => rows.tokens[0]!);
  }
  const tokensPerSecond = (options.parallel * options.decodeSteps) / ((performance.now() - began) / 1000);
  await runner.free(tables.flat());
  return tokensPerSecond;
}

/** One more try when a process dies (on a shared machine something else may kill it); a second failure throws. */
async function retryOnce<T>(what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    progress(`  ${what} failed (${(error as Error).message.split("\n")[0]}); once more`);
    return await run();
  }
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
const fixed = (x: number | undefined, digits = 1) => (x === undefined || !Number.isFinite(x) ? "—" : x.toFixed(digits));

export async function benchVsLlamaCpp(options: VsLlamaCppOptions): Promise<void> {
  const llama: LlamaCpp = prepareLlamaCpp(options.llamacppDir);
  progress(`llama.cpp: node-llama-cpp ${llama.version} (llama.cpp ${llama.release}) in ${llama.dir}`);
  const cases: Array<{ model: string; type: string; file: string }> = [];
  if (options.archs) for (const arch of options.archs) for (const type of options.types) cases.push({ model: arch, type, file: archModelFile(arch, type) });
  else for (const model of options.models) for (const type of options.types) cases.push({ model, type, file: ggufFile(model, type) });

  const ours = new Map<string, Sample[]>();
  const theirs = new Map<string, Sample[]>();
  const variants = new Set<string>();
  let kvDtype = "unknown";
  for (let rep = 0; rep < options.runs; rep++) {
    const contexts = options.contexts.filter((c) => c <= 1024 || rep < options.longRuns);
    for (const { model, type, file } of cases) {
      const key = `${model}/${type}`;
      const sides = [
        async () => {
          const sample = await retryOnce(`ctxr ${key}`, () => runCtxr(options, file, contexts));
          kvDtype = sample.kvDtype;
          (ours.get(key) ?? ours.set(key, []).get(key)!).push(sample);
          progress(`  ctxr      ${key} rep ${rep + 1}: ${describe(sample)}`);
        },
        async () => {
          const result = await retryOnce(`llama.cpp ${key}`, () => runLlamaNative(llama, file, { threads: options.threads, contexts, decodeAfter: options.decodeAfter, decodeSteps: options.decodeSteps, trials: 1, parallel: options.parallel }));
          variants.add(result.cpuVariant);
          const sample = { prefill: result.prefill, decode: result.decode, parallelDecode: result.parallelDecode, peakRssBytes: result.peakRssBytes, cpuVariant: result.cpuVariant };
          (theirs.get(key) ?? theirs.set(key, []).get(key)!).push(sample);
          progress(`  llama.cpp ${key} rep ${rep + 1}: ${describe(result)} (ggml CPU variant ${result.cpuVariant})`);
        },
      ];
      if (rep % 2 === 1) sides.reverse();
      for (const side of sides) await side();
    }
  }

  const summarize = (samples: Sample[]): Summary => {
    const prefill: Record<number, number> = {};
    for (const context of options.contexts) {
      const xs = samples.map((s) => s.prefill[context]).filter((x): x is number => x !== undefined);
      if (xs.length) prefill[context] = median(xs);
    }
    const parallel = samples.map((s) => s.parallelDecode).filter((x): x is number => x !== undefined);
    return {
      prefill, decode: median(samples.map((s) => s.decode)), parallel_decode: parallel.length ? median(parallel) : undefined,
      peak_rss_bytes: Math.max(...samples.map((s) => s.peakRssBytes)),
    };
  };
  const rows: Row[] = cases.map(({ model, type, file }) => {
    const key = `${model}/${type}`;
    const a = summarize(ours.get(key)!);
    const b = summarize(theirs.get(key)!);
    const prefillRatio: Record<number, number> = {};
    for (const context of options.contexts) if (a.prefill[context] && b.prefill[context]) prefillRatio[context] = a.prefill[context]! / b.prefill[context]!;
    return {
      model, type, file, file_bytes: statSync(file).size,
      ctxr: { ...a, samples: ours.get(key)! },
      llamacpp: { ...b, samples: theirs.get(key)!, cpu_variant: [...new Set(theirs.get(key)!.map((s) => s.cpuVariant))].join(",") },
      ratio: { prefill: prefillRatio, decode: a.decode / b.decode, parallel_decode: a.parallel_decode !== undefined && b.parallel_decode !== undefined ? a.parallel_decode / b.parallel_decode : undefined },
    };
  });

  const cpu = cpus()[0]?.model ?? "unknown CPU";
  const variant = [...variants].join(", ");
  console.log(`machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
  console.log(`command: ${options.command}`);
  console.log(`llama.cpp: node-llama-cpp ${llama.version} prebuilt libraries (llama.cpp ${llama.release}), llama_native loop, ggml CPU variant: ${variant}; KV f16, flash attention auto, batch 512`);
  console.log(`ctxr: ${options.executable} (KV ${kvDtype}); ${options.threads} threads both; ${options.runs} interleaved repetitions (contexts > 1024: ${Math.min(options.longRuns, options.runs)}), medians; decode ${options.decodeSteps} steps after ${options.decodeAfter} tokens`);
  console.log("");
  const prefillHeads = options.contexts.map((c) => `prefill ${c} ctxr / llama.cpp tok/s | ×`);
  const parallelHead = options.parallel > 1 ? ` ${options.parallel}-stream decode ctxr / llama.cpp tok/s | × |` : "";
  console.log(`| model | type | file MiB | ${prefillHeads.join(" | ")} | decode ctxr / llama.cpp tok/s | × |${parallelHead} peak RSS MiB ctxr / llama.cpp |`);
  console.log(`|---|---|---|${options.contexts.map(() => "---|---|").join("")}---|---|${options.parallel > 1 ? "---|---|" : ""}---|`);
  for (const r of rows) {
    const prefill = options.contexts.map((c) => `${fixed(r.ctxr.prefill[c], 0)} / ${fixed(r.llamacpp.prefill[c], 0)} | ${fixed(r.ratio.prefill[c], 2)}`);
    const parallel = options.parallel > 1 ? ` ${fixed(r.ctxr.parallel_decode)} / ${fixed(r.llamacpp.parallel_decode)} | ${fixed(r.ratio.parallel_decode, 2)} |` : "";
    console.log(`| ${r.model} | ${r.type.toUpperCase()} | ${mib(r.file_bytes)} | ${prefill.join(" | ")} | ${fixed(r.ctxr.decode)} / ${fixed(r.llamacpp.decode)} | ${fixed(r.ratio.decode, 2)} |${parallel} ${mib(r.ctxr.peak_rss_bytes)} / ${mib(r.llamacpp.peak_rss_bytes)} |`);
  }
  if (options.json) {
    writeFileSync(options.json, JSON.stringify({
      mode: "vs-llamacpp", command: options.command, cpu, threads: options.threads, runs: options.runs, long_runs: options.longRuns,
      decode_after: options.decodeAfter, decode_steps: options.decodeSteps, parallel: options.parallel, ctxr_kv_dtype: kvDtype,
      llamacpp: { node_llama_cpp: llama.version, release: llama.release, dir: llama.dir, cpu_variants: [...variants] }, rows,
    }, null, 2));
  }
}

function describe(sample: Sample): string {
  const prefill = Object.entries(sample.prefill).map(([c, v]) => `prefill ${c} ${v.toFixed(0)} tok/s`).join(", ");
  const parallel = sample.parallelDecode === undefined ? "" : `, parallel decode ${sample.parallelDecode.toFixed(1)} tok/s`;
  return `${prefill}, decode ${sample.decode.toFixed(1)} tok/s${parallel}, peak RSS ${mib(sample.peakRssBytes)} MiB`;
}
