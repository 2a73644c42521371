/**
 * The runner's MLP row tiles (issue 14, prefill activation memory): Model::forward runs the MLP
 * (norm, gate|up, silu·up, down, residual add) over at most 256 rows at a time, so its widest
 * activations are [256][2·intermediate] rather than [n][2·intermediate]. Every op of the MLP
 * computes each row on its own, so the logits of every row are the same, bit for bit, as the
 * whole batch at once (CTXR_MLP_ROWS=0) — for f32 weights and for Q8_0 / Q4_K files (the int8
 * GEMM). A forward larger than the scratch the runner keeps (512 tokens' worth) releases its
 * buffers afterwards; the next forward gives the same logits as a fresh runner's.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(180_000);

const TYPES = ["q8_0", "q4_k"] as const;
let executable = "";
let model: { path: string; cleanup(): void };
const scratch = tempFolder("ctxr-mlp-tiles-");
const files: Record<string, string> = {};

beforeAll(async () => {
  // CTXR_TEST_RUNNER: a runner built elsewhere (while developing), instead of cuda/build's.
  executable = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  // hidden 256: Q4_K's 256-element blocks fit every projection's rows.
  model = tinyModelFolder({ layers: 2, seed: 14, hidden: 256, heads: 4, kvHeads: 2, intermediate: 512 }, "tiny-mlp-tiles");
  files.f32 = model.path;
  for (const type of TYPES) {
    files[type] = join(scratch.path, `tiny-${type}.gguf`);
    await quantizeModel({ input: model.path, output: files[type]!, type });
  }
}, 300_000);

afterAll(() => {
  model?.cleanup();
  scratch.cleanup();
});

const prompt = (length: number, salt: number) => Array.from({ length }, (_, i) => (i * 7919 + 13 + salt) % 256);

async function withRunner<T>(file: string, mlpRows: string | undefined, use: (runner: RunnerProcess) => Promise<T>): Promise<T> {
  const env: Record<string, string | undefined> = { ...process.env };
  if (mlpRows === undefined) delete env.CTXR_MLP_ROWS;
  else env.CTXR_MLP_ROWS = mlpRows;
  const runner = await RunnerProcess.start({ executable, model: file, blocks: 80, threads: 2, env });
  try {
    return await use(runner);
  } finally {
    await runner.shutdown();
  }
}

/** Logits of every row of a prompt, in one FORWARD: [rows][vocab] flat. */
async function allLogits(runner: RunnerProcess, tokens: number[]): Promise<Float32Array> {
  const table = await runner.alloc(Math.ceil(tokens.length / 16));
  try {
    const result = await runner.forward({ sequences: [{ table, tokens, indices: sequenceRange(0, tokens.length), logitRows: sequenceRange(0, tokens.length) }] });
    return result.logits[0]!;
  } finally {
    await runner.free(table);
  }
}

describe("MLP row tiles give the whole batch's logits, bit for bit", () => {
  for (const type of ["f32", ...TYPES]) {
    test(type, async () => {
      const tokens = prompt(300, 1);
      const whole = await withRunner(files[type]!, "0", (r) => allLogits(r, tokens));
      // 300 rows in tiles of at most 40: eight tiles of 37–38 rows (more than 16: no decode kernels).
      const tiled = await withRunner(files[type]!, "40", (r) => allLogits(r, tokens));
      // The default (256): two tiles of 150.
      const byDefault = await withRunner(files[type]!, undefined, (r) => allLogits(r, tokens));
      const vocab = whole.length / tokens.length;
      expect(Number.isInteger(vocab) && vocab >= 259).toBe(true);
      expect(tiled).toEqual(whole);
      expect(byDefault).toEqual(whole);
      // Not vacuous: rows differ from one another and from zero.
      const last = whole.subarray(299 * vocab), before = whole.subarray(298 * vocab, 299 * vocab);
      expect(Math.max(...last.map(Math.abs))).toBeGreaterThan(0.01);
      expect(last).not.toEqual(before);
    });
  }
});

test("after a forward larger than the kept scratch, the next one matches a fresh runner's", async () => {
  const small = prompt(100, 2);
  const expected = await withRunner(files.q4_k!, undefined, (r) => allLogits(r, small));
  const actual = await withRunner(files.q4_k!, undefined, async (r) => {
    // 1100 tokens: the q|k|v rows (512 floats each) outgrow 1.5 × 512 tokens' worth and are released.
    await allLogits(r, prompt(1100, 3));
    return allLogits(r, small);
  });
  expect(actual).toEqual(expected);
});
