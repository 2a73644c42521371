/**
 * llama.cpp as the oracle for the runner's Q2_K, Q3_K, Q5_K and IQ4_XS kernels: a random-weight
 * llama (256 wide, ffn 512: every row a whole number of 256-blocks) written by llama.cpp's gguf-py
 * (scripts/oracle/random_gguf.py), quantized by llama.cpp's own quantizer (`llama_ref quantize`)
 * to Q5_K_S, Q5_K_M, Q3_K_S, Q3_K_M, Q2_K and IQ4_XS. On each file, the log-probability of each
 * next id of a fixed 300-id sequence from the runner (f32 KV; the first 280 ids as one prefill
 * through the int8 GEMM, the last 20 decoded one at a time through the row dot products) must be
 * within llama.cpp's own quantization error of llama.cpp's on the same file: max |ours − llama_q|
 * ≤ max |llama_q − llama_f32| over the same positions.
 *
 * Needs /work/llama (llama_ref, its libllama, and the llama.cpp source's gguf-py, as set up on
 * the development machines); skipped, saying so, where it is absent. One file a ftype, so the
 * matrix of architectures × types (test/helpers/llamaOracle.ts, when it lands) can take it over.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

setDefaultTimeout(300_000);

const LLAMA = "/work/llama";
const LLAMA_REF = join(LLAMA, "llama_ref");
const LLAMA_LIB_DIR = join(LLAMA, "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64");
const GGUF_PY = join(LLAMA, "llama.cpp-src/gguf-py");
const PYTHON = "/usr/bin/python3";
const available = [LLAMA_REF, LLAMA_LIB_DIR, GGUF_PY, PYTHON].every((p) => existsSync(p));
if (!available) console.warn(`llamaOracleQuantK: skipped (needs ${LLAMA_REF}, ${LLAMA_LIB_DIR}, ${GGUF_PY} and ${PYTHON})`);

/** llama.cpp's ftype number, and the types its mix must hold on this shape (checked first). */
const FTYPES = [
  { name: "Q5_K_S", ftype: 16, holds: ["Q5_K"] },
  { name: "Q5_K_M", ftype: 17, holds: ["Q5_K", "Q6_K"] },
  { name: "Q3_K_S", ftype: 11, holds: ["Q3_K"] },
  { name: "Q3_K_M", ftype: 12, holds: ["Q3_K", "Q4_K", "Q5_K"] },
  { name: "Q2_K", ftype: 10, holds: ["Q2_K", "Q3_K"] },
  { name: "IQ4_XS", ftype: 30, holds: ["IQ4_XS"] },
] as const;

const TOKENS = 300;
const PREFILL = 280;
/** A fixed pseudo-random sequence of byte-token ids (the file's vocabulary starts with the 256 bytes). */
const IDS = Array.from({ length: TOKENS }, (_, i) => 1 + ((i * 2_654_435_761 + 12_345) >>> 0) % 250);

function run(argv: string[]): string {
  const result = Bun.spawnSync(argv, { env: { ...process.env, LLAMA_LIB_DIR }, stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`${argv.join(" ")} failed (exit ${result.exitCode}):\n${result.stderr.toString().slice(-2000)}`);
  return result.stdout.toString();
}

function llamaLogprobs(model: string): number[] {
  const line = run([LLAMA_REF, "logprobs", model, IDS.join(",")]).trim().split("\n").at(-1)!;
  const parsed = JSON.parse(line) as { logprobs: number[] };
  expect(parsed.logprobs.length).toBe(TOKENS - 1);
  return parsed.logprobs;
}

/** log p(ids[i + 1] | ids[..i]) from one position's logits. */
function logprobOf(logits: Float32Array, vocab: number, next: number): number {
  let max = -Infinity;
  for (let v = 0; v < vocab; v++) max = Math.max(max, logits[v]!);
  let sum = 0;
  for (let v = 0; v < vocab; v++) sum += Math.exp(logits[v]! - max);
  return logits[next]! - max - Math.log(sum);
}

async function ourLogprobs(runnerPath: string, model: string): Promise<{ logprobs: number[]; weights: string }> {
  const runner = await RunnerProcess.start({ executable: runnerPath, model, blocks: Math.ceil(TOKENS / 16) + 2, blockSize: 16, threads: 2, kvDtype: "f32" });
  try {
    const vocab = runner.info.vocab;
    const table = await runner.alloc(Math.ceil(TOKENS / 16));
    const logprobs: number[] = [];
    const prefillRows = Array.from({ length: PREFILL }, (_, i) => i);
    const prefill = await runner.forward({ sequences: [{ table, tokens: IDS.slice(0, PREFILL), indices: prefillRows, logitRows: prefillRows }] });
    const flat = prefill.logits[0]!;
    const stride = flat.length / PREFILL;
    for (let i = 0; i < PREFILL; i++) logprobs.push(logprobOf(flat.subarray(i * stride, i * stride + vocab), vocab, IDS[i + 1]!));
    for (let i = PREFILL; i < TOKENS - 1; i++) {
      const step = await runner.forward({ sequences: [{ table, tokens: [IDS[i]!], indices: [i], logitRows: [0] }] });
      logprobs.push(logprobOf(step.logits[0]!, vocab, IDS[i + 1]!));
    }
    await runner.free(table);
    return { logprobs, weights: runner.info.weight_dtype };
  } finally {
    await runner.shutdown();
  }
}

function maxAbsDiff(a: readonly number[], b: readonly number[]): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

describe.skipIf(!available)("Q2_K/Q3_K/Q5_K/IQ4_XS logprobs against llama.cpp on its own quantized files", () => {
  let dir = "";
  let runnerPath = "";
  let f32File = "";
  let llamaF32: number[] = [];

  beforeAll(() => {
    runnerPath = buildRunner();
    dir = mkdtempSync(join(tmpdir(), "ctxr-oracle-quantk-"));
    f32File = join(dir, "llama-f32.gguf");
    run([PYTHON, join(REPO_ROOT, "scripts/oracle/random_gguf.py"), "--gguf-py", GGUF_PY, "--arch", "llama", "--hidden", "256", "--ffn", "512", "--out", f32File]);
    llamaF32 = llamaLogprobs(f32File);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const { name, ftype, holds } of FTYPES) {
    test(`llama ${name}: ours within llama.cpp's quantized-vs-f32 error`, async () => {
      const file = join(dir, `llama-${name}.gguf`);
      run([LLAMA_REF, "quantize", f32File, file, String(ftype)]);
      const types = new Set(readGgufFile(file).tensors.map((t) => t.typeInfo.name));
      for (const t of holds) expect(types).toContain(t);
      const llamaQ = llamaLogprobs(file);
      const ours = await ourLogprobs(runnerPath, file);
      const quantError = maxAbsDiff(llamaQ, llamaF32);
      const ourError = maxAbsDiff(ours.logprobs, llamaQ);
      const decodeError = maxAbsDiff(ours.logprobs.slice(PREFILL), llamaQ.slice(PREFILL));
      console.log(`${name} (${[...types].sort().join("+")}): max |ours - llama_q| ${ourError.toFixed(4)} (decode steps ${decodeError.toFixed(4)}), max |llama_q - llama_f32| ${quantError.toFixed(4)}`);
      expect(ours.logprobs.length).toBe(TOKENS - 1);
      expect(ourError).toBeLessThanOrEqual(quantError);
      // Measured: 0.03–0.16 of it on these types (Q4_K_M 0.12, Q6_K 0.50, Q8_0 0.46 on the same
      // harness; what remains is our per-32 int8 activations against llama.cpp's Q8_K). IQ4_XS
      // with its top level off by 7% gave 0.29 of it: such a kernel error fails here.
      expect(ourError).toBeLessThanOrEqual(0.25 * quantError);
    });
  }
});
