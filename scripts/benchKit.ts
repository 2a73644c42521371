/**
 * What the engine benchmarks share: the random-weight Llama checkpoints (written by
 * the same code as `ctxr model tiny` into .bench/engine-models/ when missing), the
 * runner build, medians and progress lines on stderr.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { cpus } from "node:os";
import { join, resolve } from "node:path";
import { TINY_MODEL_DEFAULTS, type TinyModelOptions, tinyModelFiles } from "../src/model/tinyModel.ts";
import { writeModelFolder } from "../src/model/writeModelFolder.ts";

export const REPO = resolve(import.meta.dir, "..");
const MODELS_DIR = join(REPO, ".bench", "engine-models");

export const BENCH_MODELS: Record<string, TinyModelOptions> = {
  tiny: { ...TINY_MODEL_DEFAULTS },
  /** 8 layers, hidden 512, 8 heads (4 KV), intermediate 1536, vocab 8192: 33.6M parameters, f32. */
  kv: { ...TINY_MODEL_DEFAULTS, layers: 8, hidden: 512, heads: 8, kvHeads: 4, intermediate: 1536, vocab: 8192, maxPositions: 65536 },
  /**
   * The `kv` model with q/k projections at twice the std (attention logits ~4x, concentrated on
   * few entries): a check that sharper attention alone does not make random weights a stand-in
   * for a trained model in bench-kv's agreement figures (it makes every policy agree less).
   */
  "kv-sharp": { ...TINY_MODEL_DEFAULTS, layers: 8, hidden: 512, heads: 8, kvHeads: 4, intermediate: 1536, vocab: 8192, maxPositions: 65536, attentionGain: 2 },
  "100m": { ...TINY_MODEL_DEFAULTS, layers: 12, hidden: 768, heads: 12, kvHeads: 4, intermediate: 2048, vocab: 16384 },
  "1b": { ...TINY_MODEL_DEFAULTS, layers: 16, hidden: 2048, heads: 32, kvHeads: 8, intermediate: 8192, vocab: 32000, dtype: "bf16" },
};

export const progress = (line: string) => process.stderr.write(`${line}\n`);

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The q-quantile by nearest rank (q = 0.99 of 100 values is the 99th smallest). */
export function percentile(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

/** How many leading elements two sequences share. */
export function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Builds the runner for `device` with make; returns its path. */
export function buildBenchRunner(device: string): string {
  const target = device === "cpu" ? "cpu" : "cuda";
  const made = spawnSync("make", ["-C", join(REPO, "cuda"), "-j", String(cpus().length), target], { stdio: ["ignore", "ignore", "inherit"] });
  if (made.status !== 0) throw new Error(`make -C cuda ${target} failed`);
  return join(REPO, "cuda", "build", `ctxr-runner-${target}`);
}

/** The model's folder, written when missing. */
export function benchModelFolder(name: string): string {
  const options = BENCH_MODELS[name];
  if (options === undefined) throw new Error(`unknown model '${name}' (${Object.keys(BENCH_MODELS).join(", ")})`);
  const path = join(MODELS_DIR, name);
  if (!existsSync(join(path, "model.safetensors"))) {
    progress(`writing the ${name} model to ${path} ...`);
    writeModelFolder(path, tinyModelFiles(options), { overwrite: true });
  }
  return path;
}
