/**
 * The runner's --kv-dtype (issue 14): an f16 KV cache on the CPU. INFO's kv_dtype says which
 * cache the runner keeps (auto: f16 for a GGUF file, f32 for safetensors); greedy decode over
 * Q8_0 and Q4_K files picks the same tokens with the f16 cache as with the f32 one; EXPORT of an
 * f16 cache hands out V rounded to halves, still as f32 on the wire.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { RunnerLoadError, RunnerProcess, runnerArgs, type KvDtypeChoice } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

const TYPES = ["q8_0", "q4_k"] as const;
let executable = "";
let model: { path: string; cleanup(): void };
const scratch = tempFolder("ctxr-kv-dtype-");
const files = {} as Record<(typeof TYPES)[number], string>;

beforeAll(async () => {
  executable = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  // hidden 256: Q4_K's 256-element blocks fit every projection's rows.
  model = tinyModelFolder({ layers: 3, seed: 21, hidden: 256, heads: 4, kvHeads: 2, intermediate: 512 }, "tiny-kv-dtype");
  for (const type of TYPES) {
    files[type] = join(scratch.path, `tiny-${type}.gguf`);
    await quantizeModel({ input: model.path, output: files[type], type });
  }
}, 300_000);

afterAll(() => {
  model?.cleanup();
  scratch.cleanup();
});

async function withRunner<T>(file: string, kvDtype: KvDtypeChoice | undefined, use: (runner: RunnerProcess) => Promise<T>): Promise<T> {
  const runner = await RunnerProcess.start({ executable, model: file, blocks: 16, threads: 2, ...(kvDtype ? { kvDtype } : {}) });
  try {
    return await use(runner);
  } finally {
    await runner.shutdown();
  }
}

const argmax = (xs: Float32Array) => xs.reduce((best, x, i) => (x > xs[best]! ? i : best), 0);

/** A prompt's prefill, then `steps` greedy tokens; returns the tokens and every step's logits. */
async function greedy(runner: RunnerProcess, prompt: number[], steps: number): Promise<{ tokens: number[]; logits: Float32Array[] }> {
  const table = await runner.alloc(8);
  let result = await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, prompt.length), logitRows: [prompt.length - 1] }] });
  const tokens: number[] = [];
  const logits: Float32Array[] = [];
  for (let step = 0; step < steps; step++) {
    const row = result.logits[0]!;
    logits.push(row);
    tokens.push(argmax(row));
    result = await runner.forward({ sequences: [{ table, tokens: [tokens.at(-1)!], indices: [prompt.length + step], logitRows: [0] }] });
  }
  await runner.free(table);
  return { tokens, logits };
}

test("--kv-dtype is passed to the runner only when given", () => {
  expect(runnerArgs({ executable: "x", model: "/m", kvDtype: "f16" })).toEqual(["--model", "/m", "--kv-dtype", "f16"]);
  expect(runnerArgs({ executable: "x", model: "/m" })).toEqual(["--model", "/m"]);
});

test("INFO's kv_dtype: auto is f16 for GGUF and f32 for safetensors; f32 and f16 as asked", async () => {
  expect(await withRunner(files.q8_0, undefined, async (r) => r.info.kv_dtype)).toBe("f16");
  expect(await withRunner(files.q8_0, "auto", async (r) => r.info.kv_dtype)).toBe("f16");
  expect(await withRunner(files.q8_0, "f32", async (r) => r.info.kv_dtype)).toBe("f32");
  expect(await withRunner(model.path, undefined, async (r) => r.info.kv_dtype)).toBe("f32");
  expect(await withRunner(model.path, "f16", async (r) => r.info.kv_dtype)).toBe("f16");
});

test("an unknown --kv-dtype is a usage error naming the choices", async () => {
  const error = await RunnerProcess.start({ executable, model: files.q8_0, extraArgs: ["--kv-dtype", "bf16"] }).then(
    () => null,
    (e: unknown) => e as Error,
  );
  expect(error).not.toBeNull();
  expect(error instanceof RunnerLoadError || error!.name === "RunnerCrashedError").toBe(true);
  expect(String(error!.message) + JSON.stringify((error as { stderrTail?: string[] }).stderrTail ?? [])).toContain("--kv-dtype must be f32, f16 or auto");
});

describe.each(TYPES)("greedy decode over a %s GGUF", (type) => {
  test("the f16 cache picks the same tokens as the f32 cache, logits close", async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 250);
    const exact = await withRunner(files[type], "f32", (r) => greedy(r, prompt, 8));
    const half = await withRunner(files[type], "f16", async (r) => {
      expect(r.info.kv_dtype).toBe("f16");
      return greedy(r, prompt, 8);
    });
    expect(half.tokens).toEqual(exact.tokens);
    let worst = 0;
    let scale = 0;
    exact.logits.forEach((row, step) => {
      row.forEach((x, i) => {
        worst = Math.max(worst, Math.abs(x - half.logits[step]![i]!));
        scale = Math.max(scale, Math.abs(x));
      });
    });
    // Not identical (K/V were rounded), yet close. The rounding alone moves a safetensors model's
    // logits by ~1e-3; here the quantized linear layers round their activations to 8-bit blocks
    // too, which turns it into a few percent of the largest logit.
    expect(worst).toBeGreaterThan(0);
    expect(worst).toBeLessThanOrEqual(5e-2 * scale);
  });
});

test("EXPORT of an f16 cache: f32 on the wire, V rounded to halves; IMPORT then EXPORT gives it back", async () => {
  await withRunner(files.q4_k, "f16", async (runner) => {
    const prompt = Array.from({ length: 20 }, (_, i) => (i * 11 + 3) % 250);
    const table = await runner.alloc(2);
    await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, 20), logitRows: [] }] });
    const exported = await runner.export({ table, start: 0, count: 20 });
    const asHalf = (x: number) => {
      const h = new Float16Array([x]);
      return h[0]!;
    };
    for (const layer of exported.layers) for (const x of layer.v) expect(asHalf(x)).toBe(x);
    const other = await runner.alloc(2);
    await runner.import({ table: other, start: 0, count: 20 }, exported);
    const again = await runner.export({ table: other, start: 0, count: 20 });
    expect(Array.from(again.positions)).toEqual(Array.from(exported.positions));
    again.layers.forEach((layer, l) => {
      expect(Array.from(layer.v)).toEqual(Array.from(exported.layers[l]!.v));
      // K goes through RoPE and back around the half rounding: close, not bitwise.
      layer.k.forEach((x, i) => expect(Math.abs(x - exported.layers[l]!.k[i]!)).toBeLessThanOrEqual(4e-3 * (1 + Math.abs(x))));
    });
  });
});

test("the engine (ctxr serve --kv-dtype) passes its choice to the runner", async () => {
  for (const kvDtype of ["f32", "auto"] as const) {
    const engine = await GenerationEngine.open({ model: files.q8_0, runner: executable, kvBlocks: 32, threads: 2, kvDtype });
    try {
      expect(engine.runner.info.kv_dtype).toBe(kvDtype === "auto" ? "f16" : kvDtype);
    } finally {
      await engine.close();
    }
  }
});
