/**
 * llama.cpp for side-by-side benchmarks, in its own loop: `llama_native` (the llama-bench-like
 * driver of ../shared/tools/llama-native) linked against the prebuilt CPU libraries of the npm
 * package node-llama-cpp@3.22.1. Never a dependency of ctxr: the package is installed into a
 * scratch folder (.bench/llamacpp by default) the first time, and llama_native is compiled there.
 *
 * A scratch folder is usable when it holds node-llama-cpp 3.22.1 and its linux-x64 binaries;
 * folders earlier sessions left (/tmp/er, /tmp/lcpp) are reused when they do. Each run reports
 * which ggml CPU variant llama.cpp loaded (read from the process's memory map while it runs:
 * ggml loads exactly one libggml-cpu-<variant>.so, the best its CPU-feature score picks) and its
 * peak RSS (getrusage of the finished child).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { REPO, progress } from "./benchKit.ts";

export const NODE_LLAMA_CPP_VERSION = "3.22.1";
const LIB_SUBDIR = join("node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
const LIBLLAMA = "libllama.v0.5.0.so";
const DEFAULT_SCRATCH = join(REPO, ".bench", "llamacpp");
/** Folders earlier sessions installed node-llama-cpp into; reused when complete. */
const KNOWN_SCRATCH = ["/tmp/er", "/tmp/lcpp"];

export class LlamaCppUnavailable extends Error {
  override name = "LlamaCppUnavailable";
}

export interface LlamaCpp {
  /** The scratch folder. */
  dir: string;
  /** The llama_native executable. */
  binary: string;
  /** The prebuilt libraries (LLAMA_LIB_DIR). */
  libDir: string;
  /** node-llama-cpp's version and the llama.cpp release it bundles. */
  version: string;
  release: string;
}

/** Where llama_native.cpp and its build script live (LLAMA_NATIVE_SRC overrides). */
function nativeSourceDir(): string {
  return resolve(process.env.LLAMA_NATIVE_SRC ?? join(REPO, "..", "shared", "tools", "llama-native"));
}

function installedVersion(dir: string): string | null {
  try {
    return (JSON.parse(readFileSync(join(dir, "node_modules", "node-llama-cpp", "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return null;
  }
}

function isComplete(dir: string): boolean {
  return installedVersion(dir) === NODE_LLAMA_CPP_VERSION && existsSync(join(dir, LIB_SUBDIR, LIBLLAMA)) &&
    existsSync(join(dir, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle"));
}

function install(dir: string): void {
  mkdirSync(dir, { recursive: true });
  if (!existsSync(join(dir, "package.json"))) writeFileSync(join(dir, "package.json"), '{ "name": "ctxr-bench-llamacpp", "private": true }\n');
  // --omit=optional skips the CUDA and Vulkan builds (~640 MB); the linux-x64 CPU build is named
  // explicitly. --ignore-scripts: the postinstall would try to download or build binaries.
  const args = ["i", "--no-audit", "--no-fund", "--ignore-scripts", "--omit=optional", `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`, `@node-llama-cpp/linux-x64@${NODE_LLAMA_CPP_VERSION}`];
  progress(`installing node-llama-cpp@${NODE_LLAMA_CPP_VERSION} into ${dir} (npm ${args.join(" ")}) ...`);
  const run = spawnSync("npm", args, { cwd: dir, encoding: "utf8" });
  if (run.error || run.status !== 0 || !isComplete(dir)) {
    const why = run.error ? run.error.message : (run.stderr || run.stdout || "").trim().split("\n").slice(-8).join("\n");
    throw new LlamaCppUnavailable(
      `cannot install node-llama-cpp@${NODE_LLAMA_CPP_VERSION} (linux-x64 CPU binaries) into ${dir}:\n${why}\n` +
        `Install it by hand (cd ${dir} && npm ${args.join(" ")}) or pass --llamacpp-dir DIR of such an install.`,
    );
  }
}

function build(dir: string): void {
  const source = nativeSourceDir();
  const script = join(source, "build_llama_native.sh");
  if (!existsSync(script)) {
    throw new LlamaCppUnavailable(`llama_native's source is not at ${source} (set LLAMA_NATIVE_SRC to the folder holding llama_native.cpp and build_llama_native.sh)`);
  }
  progress(`building llama_native in ${dir} ...`);
  const run = spawnSync("bash", [script], { env: { ...process.env, LLAMACPP_DIR: dir }, encoding: "utf8" });
  if (run.error || run.status !== 0 || !existsSync(join(dir, "llama_native"))) {
    const why = run.error ? run.error.message : `${run.stdout}\n${run.stderr}`.trim().split("\n").slice(-8).join("\n");
    throw new LlamaCppUnavailable(`cannot build llama_native in ${dir} (needs g++ and git):\n${why}`);
  }
}

function needsBuild(dir: string): boolean {
  const binary = join(dir, "llama_native");
  if (!existsSync(binary)) return true;
  const source = join(nativeSourceDir(), "llama_native.cpp");
  return existsSync(source) && statSync(source).mtimeMs > statSync(binary).mtimeMs;
}

/**
 * A ready llama.cpp: `dir` when given (installed there when incomplete), otherwise the first
 * complete scratch folder (.bench/llamacpp, then folders earlier sessions left), otherwise a
 * fresh install into .bench/llamacpp. Throws LlamaCppUnavailable with the reason and what to do.
 */
export function prepareLlamaCpp(dir?: string): LlamaCpp {
  let chosen = dir ? resolve(dir) : [DEFAULT_SCRATCH, ...KNOWN_SCRATCH].find((d) => isComplete(d) && !needsBuild(d)) ??
    [DEFAULT_SCRATCH, ...KNOWN_SCRATCH].find(isComplete);
  if (!chosen) chosen = DEFAULT_SCRATCH;
  if (!isComplete(chosen)) install(chosen);
  if (needsBuild(chosen)) build(chosen);
  let release = "unknown";
  try {
    release = (JSON.parse(readFileSync(join(chosen, "node_modules", "node-llama-cpp", "llama", "llama.cpp.info.json"), "utf8")) as { tag?: string }).tag ?? release;
  } catch {
    // the tag is informational only
  }
  return { dir: chosen, binary: join(chosen, "llama_native"), libDir: join(chosen, LIB_SUBDIR), version: NODE_LLAMA_CPP_VERSION, release };
}

export interface LlamaNativeOptions {
  threads: number;
  contexts: readonly number[];
  decodeAfter: number;
  decodeSteps: number;
  trials: number;
  /** > 1: also N sequences of decodeAfter tokens decoded together, one token each per llama_decode. */
  parallel?: number;
}

export interface LlamaNativeResult {
  /** Prefill tokens/s by context length (median of the trials). */
  prefill: Record<number, number>;
  /** Decode tokens/s (median of the trials). */
  decode: number;
  /** With options.parallel > 1: the N sequences' total decode tokens/s (median of the trials). */
  parallelDecode?: number;
  /** The ggml CPU variant loaded (libggml-cpu-<variant>.so), "unknown" if never seen. */
  cpuVariant: string;
  /** Peak RSS of the process in bytes. */
  peakRssBytes: number;
  /** The driver's JSON line. */
  raw: Record<string, unknown>;
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

function loadedCpuVariant(pid: number): string | null {
  try {
    const match = /libggml-cpu-([A-Za-z0-9_]+)\.so/.exec(readFileSync(`/proc/${pid}/maps`, "utf8"));
    return match ? match[1]! : null;
  } catch {
    return null;
  }
}

/** Runs llama_native once on `model` (a GGUF file). */
export async function runLlamaNative(llama: LlamaCpp, model: string, options: LlamaNativeOptions): Promise<LlamaNativeResult> {
  const argv = [
    llama.binary, model, "--threads", String(options.threads), "--contexts", options.contexts.join(","),
    "--decode-after", String(options.decodeAfter), "--decode-steps", String(options.decodeSteps), "--trials", String(options.trials),
    ...(options.parallel !== undefined && options.parallel > 1 ? ["--parallel", String(options.parallel)] : []),
  ];
  const child = Bun.spawn(argv, { stdout: "pipe", stderr: "pipe", env: { ...process.env, LLAMA_LIB_DIR: llama.libDir } });
  let variant: string | null = null;
  const watch = setInterval(() => {
    // the last one seen: while choosing, ggml loads every variant to score it, then unloads the losers
    variant = loadedCpuVariant(child.pid) ?? variant;
  }, 50);
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearInterval(watch);
  if (code !== 0) throw new Error(`llama_native exited with ${code} on ${model}: ${stderr.trim().split("\n").slice(-5).join(" | ")}`);
  const line = stdout.trim().split("\n").at(-1)!;
  const raw = JSON.parse(line) as Record<string, unknown>;
  const prefill: Record<number, number> = {};
  for (const context of options.contexts) prefill[context] = median(raw[`prefill_${context}_tok_s`] as number[]);
  const parallel = raw.parallel_decode_tok_s as number[] | undefined;
  if (options.parallel !== undefined && options.parallel > 1 && !parallel?.length) {
    throw new Error(`llama_native printed no parallel_decode_tok_s for --parallel ${options.parallel} (an older build? rebuild it from ../shared/tools/llama-native)`);
  }
  return {
    prefill,
    decode: median(raw.decode_tok_s as number[]),
    parallelDecode: parallel?.length ? median(parallel) : undefined,
    cpuVariant: variant ?? "unknown",
    peakRssBytes: child.resourceUsage()?.maxRSS ?? NaN,
    raw,
  };
}
