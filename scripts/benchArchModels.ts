/**
 * The ~1B-parameter random-weight GGUF files of `bench-engine.ts --vs-llamacpp --arch A` (issue 29,
 * item 6): written by llama.cpp's own gguf-py (scripts/oracle/random_gguf.py, F16), quantized by
 * llama.cpp's own quantizer (tools/llama-oracle's driver, its per-tensor Q4_K_M mix), cached as
 * .bench/arch-models/<arch>-1b-<type>.gguf. The same file goes to ctxr and to llama.cpp.
 *
 * Each shape has its family's real vocabulary size: at 1B parameters the output matrix (and the
 * embedding) is a large share of the weights and of decode time.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { REPO, progress } from "./benchKit.ts";

interface ArchShape {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  vocab: number;
  /** Environment knobs of the architecture's module (scripts/oracle/arch_<arch>.py). */
  /** More random_gguf.py arguments (an architecture's own). */
  extraArgs?: string[];
  /** The one type of a shape written directly by random_gguf.py (no llama.cpp quantizer pass), and its file's name. */
  direct?: { type: string; name: string };
  /** random_gguf.py's architecture when the shape's name is not it. */
  arch?: string;
  /** The files' name before "-<type>.gguf" (default "<name>-1b"). */
  stem?: string;
}

export const ARCH_SHAPES: Record<string, ArchShape> = {
  /** Qwen3-1.7B-like (its vocabulary; 16 layers instead of 28): 1.43B parameters. */
  qwen3: { hidden: 2048, layers: 16, heads: 16, kvHeads: 8, headDim: 128, ffn: 6144, vocab: 151936 },
  /** Gemma 3 1B: 26 layers, 1 KV head, head_dim 256, window 512, tied 262144-token output: 1.0B. */
  gemma3: { hidden: 1152, layers: 26, heads: 4, kvHeads: 1, headDim: 256, ffn: 6912, vocab: 262144, extraArgs: ["--sliding-window", "512"] },
  /** Phi-4-mini's vocabulary on the 1B shape (fused QKV and gate/up): 1.76B. */
  phi3: { hidden: 2048, layers: 16, heads: 16, kvHeads: 8, headDim: 128, ffn: 6144, vocab: 200064 },
  /**
   * Qwen3-MoE, small (issue 32): Qwen3-30B-A3B's vocabulary, top-8 routing and head layout scaled
   * down to 8 layers of 64 experts of 512 rows at hidden 1024: 1.12B parameters, 0.42B active a token.
   */
  qwen3moe: {
    hidden: 1024, layers: 8, heads: 16, kvHeads: 4, headDim: 64, ffn: 4096, vocab: 151936,
    extraArgs: ["--arch-option", "experts=64", "--arch-option", "experts_used=8", "--arch-option", "expert_ffn=512"],
  },
  /**
   * gpt-oss-20b's real shapes (issue 32 item 6): 24 layers at hidden 2880, 64 heads of 64 on 8 KV
   * heads, window 128, 32 experts of 2880 rows, top-4, o200k's 201,088-token vocabulary; experts in
   * MXFP4 drawn as random blocks (scripts/oracle/arch_gptoss.py expert_type=mxfp4-random), the
   * rest F16, as llama.cpp's converter leaves a gpt-oss checkpoint (BF16 there): about 13 GB.
   */
  "gptoss-20b": {
    arch: "gptoss", hidden: 2880, layers: 24, heads: 64, kvHeads: 8, headDim: 64, ffn: 2880, vocab: 201088,
    extraArgs: ["--sliding-window", "128", "--arch-option", "experts=32", "--arch-option", "experts_used=4", "--arch-option", "expert_ffn=2880", "--arch-option", "expert_type=mxfp4-random"],
    direct: { type: "mxfp4", name: "gptoss-20b-mxfp4.gguf" },
  },
  /**
   * Qwen3-30B-A3B's real layer shapes (hidden 2048, 32 heads of 128 on 4 KV heads, 128 experts of
   * 768 rows, top-8, its vocabulary) with 8 of its 48 layers, so that the F16 source (9.7 GB) and
   * the quantized files fit this machine: 5.3B parameters, 0.75B active a token.
   */
  "qwen3moe-30b-a3b": {
    arch: "qwen3moe", stem: "qwen3moe-30b-a3b-8l", hidden: 2048, layers: 8, heads: 32, kvHeads: 4, headDim: 128, ffn: 6144, vocab: 151936,
    extraArgs: ["--arch-option", "experts=128", "--arch-option", "experts_used=8", "--arch-option", "expert_ffn=768"],
  },
  /** Llama 3.2 1B: 1.50B (untied output). */
  llama: { hidden: 2048, layers: 16, heads: 32, kvHeads: 8, headDim: 64, ffn: 8192, vocab: 128256 },
};

/** llama.cpp's llama_ftype numbers (include/llama.h) of the types the comparison uses. */
const LLAMA_FTYPE: Record<string, number> = { q8_0: 7, q4_k_m: 15, q5_k_m: 17, q6_k: 18, iq4_xs: 30 };
export const ARCH_TYPES = [...Object.keys(LLAMA_FTYPE), "mxfp4"];
export const DEFAULT_ARCH_TYPES = ["q4_k_m", "q8_0"];

const DIR = join(REPO, ".bench", "arch-models");
const ORACLE_SETUP = join(REPO, "tools", "llama-oracle", "setup.sh");
const RANDOM_GGUF = join(REPO, "scripts", "oracle", "random_gguf.py");

function run(command: string[], what: string, env: Record<string, string> = {}): string {
  const result = spawnSync(command[0]!, command.slice(1), { encoding: "utf8", env: { ...process.env, ...env }, maxBuffer: 1 << 26 });
  if (result.error || result.status !== 0) throw new Error(`${what} failed (exit ${result.status}): ${(result.error?.message ?? result.stderr).trim().split("\n").slice(-5).join(" | ")}`);
  return result.stdout;
}

/** The llama.cpp oracle driver (tools/llama-oracle/setup.sh sets it up; a no-op when it is). */
function oracleDriver(): string {
  return run(["bash", ORACLE_SETUP], "tools/llama-oracle/setup.sh").trim().split("\n").at(-1)!;
}

/** Writes `shape` with llama.cpp's gguf-py (matrices F16) to `path` (through a .part file). */
function writeRandomGguf(shape: ArchShape, name: string, path: string): void {
  mkdirSync(DIR, { recursive: true });
  oracleDriver(); // sets up the llama.cpp bundle that holds gguf-py
  progress(`writing ${path} with llama.cpp's gguf-py ...`);
  const args = [
    "--hidden", shape.hidden, "--layers", shape.layers, "--heads", shape.heads, "--kv-heads", shape.kvHeads,
    "--head-dim", shape.headDim, "--ffn", shape.ffn, "--vocab", shape.vocab, "--context", 8192,
  ].map(String).concat(shape.extraArgs ?? []);
  const ggufPy = join(REPO, "tools", "llama-oracle", "build", "llama.cpp", "gguf-py");
  const arch = shape.arch ?? name;
  run(["/usr/bin/python3", RANDOM_GGUF, "--arch", arch, "--out", `${path}.part`, "--dtype", "f16", ...args], `random_gguf.py --arch ${arch}`, { GGUF_PY: ggufPy });
  renameSync(`${path}.part`, path);
}

/** The path of `arch`'s bench file of `type` ("q4_k_m", "q8_0", ...), written when missing. */
export function archModelFile(arch: string, type: string): string {
  const shape = ARCH_SHAPES[arch];
  if (!shape) throw new Error(`unknown --arch '${arch}' (${Object.keys(ARCH_SHAPES).join(", ")})`);
  if (shape.direct !== undefined) {
    if (type !== shape.direct.type) throw new Error(`--arch ${arch} comes in ${shape.direct.type} only (its experts drawn as such), not '${type}'`);
    const path = join(DIR, shape.direct.name);
    if (!existsSync(path)) writeRandomGguf(shape, arch, path);
    return path;
  }
  const ftype = LLAMA_FTYPE[type];
  if (ftype === undefined) throw new Error(`--types for --arch: ${ARCH_TYPES.join(", ")} (llama.cpp's quantizer makes them), not '${type}'`);
  const stem = shape.stem ?? `${arch}-1b`;
  const path = join(DIR, `${stem}-${type}.gguf`);
  if (existsSync(path)) return path;
  const driver = oracleDriver();
  const source = join(DIR, `${stem}-f16.gguf`);
  if (!existsSync(source)) writeRandomGguf(shape, arch, source);
  progress(`llama.cpp quantize ${source} -> ${type} ...`);
  run([driver, "quantize", source, `${path}.part`, String(ftype)], `llama.cpp quantize ${arch} to ${type}`);
  renameSync(`${path}.part`, path);
  // The F16 source (~3 GB) is kept only until both default types exist.
  if (DEFAULT_ARCH_TYPES.every((t) => existsSync(join(DIR, `${stem}-${t}.gguf`)))) rmSync(source, { force: true });
  return path;
}
