/**
 * Cold start to the first token (issue 32 item 6): a fresh process that opens a GGUF file and
 * computes the logits of a 2-token prompt, ctxr's runner against llama.cpp (its own driver,
 * llama_ref logprobs: load, one llama_decode of the 2 ids, print), 2 threads each, in
 * interleaved order. The file is in the page cache for both (this machine refuses
 * /proc/sys/vm/drop_caches; a first repetition after writing the file reads it from the cache
 * too), so this is the start-up work: mapping, reading the header and tensors the model needs at
 * load, and the first forward pass. Also each process's peak RSS.
 *
 *   npx bun scripts/bench-cold-start.ts --model FILE.gguf [--runs 3] [--runner cuda/build/ctxr-runner-cpu] [--llamacpp-dir DIR]
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { median } from "./benchKit.ts";
import { prepareLlamaCpp } from "./benchLlamaCpp.ts";

const { values } = parseArgs({
  options: {
    model: { type: "string" },
    runs: { type: "string", default: "3" },
    runner: { type: "string", default: "cuda/build/ctxr-runner-cpu" },
    "llamacpp-dir": { type: "string" },
  },
});
if (values.model === undefined) throw new Error("--model FILE.gguf is required");
const model = values.model;
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got '${values.runs}'`);
const llama = prepareLlamaCpp(values["llamacpp-dir"]);
const llamaRef = llama.binary.replace(/llama_native$/, "llama_ref");

function vmHwm(pid: number): number {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return match ? Number(match[1]) * 1024 : NaN;
}

async function ctxrStart(): Promise<{ seconds: number; rss: number }> {
  const began = performance.now();
  const runner = await RunnerProcess.start({ executable: values.runner!, model, blocks: 4, blockSize: 16, threads: 2, kvGroups: 1, log: () => {} });
  try {
    const table = await runner.alloc(1);
    await runner.forward({ sequences: [{ table, tokens: [1, 2], indices: [0, 1], logitRows: [1] }] });
    return { seconds: (performance.now() - began) / 1000, rss: vmHwm(runner.pid!) };
  } finally {
    await runner.shutdown();
  }
}

async function llamaStart(): Promise<{ seconds: number; rss: number }> {
  const began = performance.now();
  const child = Bun.spawn(["/usr/bin/time", "-f", "%M", llamaRef, "logprobs", model, "1,2"], { stdout: "pipe", stderr: "pipe", env: { ...process.env, LLAMA_LIB_DIR: llama.libDir } });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  const seconds = (performance.now() - began) / 1000;
  if (code !== 0 || !stdout.includes("logprobs")) throw new Error(`llama_ref failed (exit ${code}): ${stderr.trim().split("\n").slice(-3).join(" | ")}`);
  const kib = Number(stderr.trim().split("\n").at(-1));
  return { seconds, rss: kib * 1024 };
}

const samples = { ctxr: [] as { seconds: number; rss: number }[], llama: [] as { seconds: number; rss: number }[] };
for (let run = 0; run < runs; run++) {
  const order = run % 2 === 0 ? (["ctxr", "llama"] as const) : (["llama", "ctxr"] as const);
  for (const side of order) {
    const sample = side === "ctxr" ? await ctxrStart() : await llamaStart();
    samples[side].push(sample);
    console.error(`run ${run + 1} ${side}: ${sample.seconds.toFixed(2)} s, peak RSS ${(sample.rss / 2 ** 20).toFixed(0)} MiB`);
  }
}
const mid = (side: "ctxr" | "llama") => ({ seconds: median(samples[side].map((s) => s.seconds)), rss: Math.max(...samples[side].map((s) => s.rss)) });
const c = mid("ctxr");
const l = mid("llama");
console.log(`| file | start to first token, s: ctxr / llama.cpp | × | peak RSS MiB: ctxr / llama.cpp |`);
console.log(`|---|---|---|---|`);
console.log(`| ${model} | ${c.seconds.toFixed(2)} / ${l.seconds.toFixed(2)} | ${(c.seconds / l.seconds).toFixed(2)} | ${(c.rss / 2 ** 20).toFixed(0)} / ${(l.rss / 2 ** 20).toFixed(0)} |`);
