/**
 * qwen3 against llama.cpp as the oracle (issue 29, item 5): random-weight qwen3 files written by
 * llama.cpp's own gguf-py (scripts/oracle/arch_qwen3.py, head_dim ≠ hidden / heads) and quantized
 * by llama.cpp's own quantizer (`llama_ref quantize`), run by ctxr's CPU runner and by llama.cpp
 * (`llama_ref logprobs`, f32 KV on both sides) over 300 positions: the log-probability of each
 * next token must agree.
 *
 * Cells, named "ARCH × TYPE" so that the shared oracle matrix (test/helpers/llamaOracle.ts) can
 * take them over:
 *   qwen3 × F32     hidden 256, 4 heads of 96, 2 kv heads: |Δ logprob| ≤ 5e-3 (float rounding).
 *   qwen3 × Q8_0    the same file in Q8_0.
 *   qwen3 × Q4_K_M  4 heads of 128 (llama.cpp writes a 384-column attn_output of the 96-wide file
 *                   in Q5_0, which ctxr does not read yet): Q4_K and Q6_K tensors.
 * A quantized cell passes when ours-vs-llama.cpp on the quantized file stays within llama.cpp's
 * own quantized-vs-F32 error on the same model, worst case and mean (the issue's criterion). The
 * two engines quantize activations differently, so on Q8_0 they differ by about half that error
 * (measured: 0.052–0.067 of 0.10–0.12, the same on a llama file of this shape): a looser check
 * than F32's, which is where a wrong q/k norm or head layout would show.
 *
 * Needs /work/llama (llama_ref, llama.cpp's gguf-py) and /usr/bin/python3 with numpy; skipped
 * where they are absent.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

setDefaultTimeout(300_000);

const LLAMA = process.env.CTXR_LLAMA_DIR ?? "/work/llama";
const LLAMA_REF = join(LLAMA, "llama_ref");
const GGUF_PY = join(LLAMA, "llama.cpp-src", "gguf-py");
const LLAMA_LIB_DIR = process.env.LLAMA_LIB_DIR ?? join(LLAMA, "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64");
const PYTHON = "/usr/bin/python3";
const available = existsSync(LLAMA_REF) && existsSync(GGUF_PY) && existsSync(PYTHON);

const POSITIONS = 300;
// The random file's byte-level vocabulary: 256 byte tokens and 10 merges are ordinary text tokens.
const TEXT_TOKENS = 266;

function run(argv: string[]): string {
  const result = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, GGUF_PY, LLAMA_LIB_DIR }, encoding: "utf8", maxBuffer: 64 << 20 });
  if (result.status !== 0) throw new Error(`${argv.slice(0, 3).join(" ")} failed (exit ${result.status}):\n${result.stderr}`);
  return result.stdout;
}

function randomQwen3(out: string, headDim: number): void {
  run([PYTHON, join(REPO_ROOT, "scripts/oracle/random_gguf.py"), "--arch", "qwen3", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", String(headDim), "--seed", "7", "--out", out]);
}

function llamaQuantize(input: string, output: string, ftype: number): void {
  run([LLAMA_REF, "quantize", input, output, String(ftype)]);
}

function llamaLogprobs(model: string, ids: readonly number[]): number[] {
  const line = run([LLAMA_REF, "logprobs", model, ids.join(",")]).trim().split("\n").at(-1)!;
  const parsed = JSON.parse(line) as { arch_ok: boolean; logprobs: number[] };
  if (!parsed.arch_ok) throw new Error(`llama.cpp did not load ${model}`);
  return parsed.logprobs;
}

/** ctxr's log-probability of ids[t + 1] after ids[0..t], for t < n − 1, from one prefill (f32 KV). */
async function ctxrLogprobs(executable: string, model: string, ids: readonly number[]): Promise<number[]> {
  const runner = await RunnerProcess.start({ executable, model, threads: 2, kvDtype: "f32", blocks: Math.ceil(ids.length / 16) + 4 });
  try {
    const n = ids.length;
    const table = await runner.alloc(Math.ceil(n / 16));
    const result = await runner.forward({ sequences: [{ table, tokens: [...ids], indices: sequenceRange(0, n), logitRows: sequenceRange(0, n - 1) }] });
    const logits = result.logits[0]!;
    const vocab = logits.length / (n - 1);
    const out: number[] = [];
    for (let t = 0; t < n - 1; t++) {
      const row = logits.subarray(t * vocab, (t + 1) * vocab);
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v);
      let sum = 0;
      for (const v of row) sum += Math.exp(v - max);
      out.push(row[ids[t + 1]!]! - max - Math.log(sum));
    }
    return out;
  } finally {
    await runner.shutdown();
  }
}

interface Agreement {
  max: number;
  mean: number;
}

function agreement(a: readonly number[], b: readonly number[]): Agreement {
  expect(a.length).toBe(b.length);
  let max = 0;
  let sum = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    expect(Number.isFinite(d)).toBe(true);
    max = Math.max(max, d);
    sum += d;
  }
  return { max, mean: sum / a.length };
}

function tokenIds(seed: number): number[] {
  let state = seed >>> 0;
  return Array.from({ length: POSITIONS + 1 }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % TEXT_TOKENS;
  });
}

describe.skipIf(!available)("qwen3 against llama.cpp (llama_ref)", () => {
  let folder: { path: string; cleanup(): void };
  let executable = "";
  const ids = tokenIds(29);
  const file = (name: string) => join(folder.path, name);
  beforeAll(() => {
    executable = buildRunner();
    folder = tempFolder("ctxr-qwen3-oracle-");
    randomQwen3(file("hd96-f32.gguf"), 96);
    llamaQuantize(file("hd96-f32.gguf"), file("hd96-q8_0.gguf"), 7);
    randomQwen3(file("hd128-f32.gguf"), 128);
    llamaQuantize(file("hd128-f32.gguf"), file("hd128-q4_k_m.gguf"), 15);
  }, 300_000);
  afterAll(() => folder?.cleanup());

  test("qwen3 × F32: ctxr's log-probabilities equal llama.cpp's to float rounding", async () => {
    const ours = await ctxrLogprobs(executable, file("hd96-f32.gguf"), ids);
    const theirs = llamaLogprobs(file("hd96-f32.gguf"), ids);
    const a = agreement(ours, theirs);
    console.log(`qwen3 × F32 (${ours.length} positions): max |Δ logprob| ${a.max.toExponential(2)}, mean ${a.mean.toExponential(2)}`);
    expect(a.max).toBeLessThanOrEqual(5e-3);
    expect(a.max).toBeGreaterThan(0); // two engines' float sums differ somewhere: a zero means one ran twice
  });

  for (const [cell, f32, quantized] of [
    ["qwen3 × Q8_0", "hd96-f32.gguf", "hd96-q8_0.gguf"],
    ["qwen3 × Q4_K_M", "hd128-f32.gguf", "hd128-q4_k_m.gguf"],
  ] as const) {
    test(`${cell}: ctxr agrees with llama.cpp on the file within llama.cpp's own quantization error`, async () => {
      const ours = await ctxrLogprobs(executable, file(quantized), ids);
      const theirs = llamaLogprobs(file(quantized), ids);
      const theirsF32 = llamaLogprobs(file(f32), ids);
      const engines = agreement(ours, theirs);
      const quantization = agreement(theirs, theirsF32);
      console.log(
        `${cell} (${ours.length} positions): ctxr vs llama.cpp max ${engines.max.toExponential(2)} mean ${engines.mean.toExponential(2)}; ` +
          `llama.cpp ${cell.split(" × ")[1]} vs F32 max ${quantization.max.toExponential(2)} mean ${quantization.mean.toExponential(2)}`,
      );
      expect(engines.max).toBeLessThanOrEqual(quantization.max);
      expect(engines.mean).toBeLessThanOrEqual(quantization.mean);
    });
  }
});
