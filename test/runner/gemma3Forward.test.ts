/**
 * Gemma 3 through the real CPU runner, without llama.cpp (test/model/oracle/gemma3LlamaOracle
 * checks the numbers against llama.cpp): the same random weights as a GGUF file (norms stored as
 * 1 + w) and as a Hugging Face folder (norms w) give the same logits; the runner reports each
 * layer's window; the window's boundary is exact (a model of sliding-window layers only sees a
 * change at position 0 up to position layers·(window − 1), and not one position further); decoding
 * token by token past the window gives the prefill's logits; bad Gemma 3 metadata is refused
 * naming the key.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { writeTinyGemma3, type TinyGemma3 } from "../helpers/gemma3TinyModel.ts";

setDefaultTimeout(120_000);

const BLOCK = 16;

async function withRunner<T>(model: string, positions: number, use: (runner: RunnerProcess) => Promise<T>): Promise<T> {
  const runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: Math.ceil(positions / BLOCK) + 2, blockSize: BLOCK, threads: 2, kvDtype: "f32" });
  try {
    return await use(runner);
  } finally {
    await runner.shutdown();
  }
}

/** Block tables for `blocks` blocks: with two KV groups (kv_groups in INFO) the sliding group's too, no block left out. */
async function allocTables(runner: RunnerProcess, blocks: number): Promise<{ table: number[]; slidingTable?: number[] }> {
  const table = await runner.alloc(blocks);
  return runner.info.kv_groups === undefined ? { table } : { table, slidingTable: await runner.alloc(blocks, 1) };
}

/** Every position's logits of one prefill. */
async function prefillLogits(model: string, ids: readonly number[]): Promise<{ logits: Float32Array; vocab: number; windows: number[] }> {
  return withRunner(model, ids.length, async (runner) => {
    const tables = await allocTables(runner, Math.ceil(ids.length / BLOCK));
    const all = sequenceRange(0, ids.length);
    const result = await runner.forward({ sequences: [{ ...tables, tokens: [...ids], indices: all, logitRows: all }] });
    return { logits: result.logits[0]!, vocab: runner.info.vocab, windows: runner.info.layer_windows ?? [] };
  });
}

function maxAbsDifference(a: Float32Array, b: Float32Array, from = 0, to = a.length): number {
  let worst = 0;
  for (let i = from; i < to; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

function ids(count: number, vocab: number, seed: number): number[] {
  return Array.from({ length: count }, (_, i) => 6 + ((i * 7919 + seed * 104729) % (vocab - 6)));
}

describe("gemma3 forward", () => {
  let dir = "";
  let model: TinyGemma3;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-"));
    model = writeTinyGemma3(join(dir, "mixed"));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("the GGUF file (norms 1 + w) and the Hugging Face folder (norms w) give the same logits past the window", async () => {
    const sequence = ids(60, model.vocab, 1);
    const gguf = await prefillLogits(model.gguf, sequence);
    const folder = await prefillLogits(model.folder, sequence);
    expect(gguf.windows).toEqual([8, 8, 8, 8, 8, 0, 8]);
    expect(folder.windows).toEqual(gguf.windows);
    expect(maxAbsDifference(gguf.logits, folder.logits)).toBeLessThan(1e-4);
    // Not a degenerate model: positions differ.
    expect(maxAbsDifference(gguf.logits.subarray(0, gguf.vocab), gguf.logits.subarray(gguf.vocab, 2 * gguf.vocab))).toBeGreaterThan(1e-2);
  });

  test("decoding token by token past the window gives the prefill's logits", async () => {
    const sequence = ids(40, model.vocab, 2);
    const prefill = await prefillLogits(model.gguf, sequence);
    const decoded = await withRunner(model.gguf, sequence.length, async (runner) => {
      const tables = await allocTables(runner, Math.ceil(sequence.length / BLOCK));
      const first = 20;
      const rows: Float32Array[] = [];
      const head = await runner.forward({ sequences: [{ ...tables, tokens: sequence.slice(0, first), indices: sequenceRange(0, first), logitRows: [first - 1] }] });
      rows.push(head.logits[0]!);
      for (let i = first; i < sequence.length; i++) {
        const step = await runner.forward({ sequences: [{ ...tables, tokens: [sequence[i]!], indices: [i], logitRows: [0] }] });
        rows.push(step.logits[0]!);
      }
      return rows;
    });
    const vocab = prefill.vocab;
    decoded.forEach((row, k) => {
      const position = 19 + k;
      expect(maxAbsDifference(row, prefill.logits.subarray(position * vocab, (position + 1) * vocab))).toBeLessThan(1e-4);
    });
  });

  test("the window's boundary: with only sliding-window layers, token 0 reaches position layers·(window − 1) and no further", async () => {
    const layers = 3, window = 4;
    const local = writeTinyGemma3(join(dir, "local"), { layers, window, pattern: [true, true, true], seed: 5 });
    const sequence = ids(24, local.vocab, 3);
    const changed = [sequence[0] === 10 ? 11 : 10, ...sequence.slice(1)];
    const a = await prefillLogits(local.gguf, sequence);
    const b = await prefillLogits(local.gguf, changed);
    expect(a.windows).toEqual([4, 4, 4]);
    const reach = layers * (window - 1);
    const vocab = a.vocab;
    const at = (p: number) => maxAbsDifference(a.logits, b.logits, p * vocab, (p + 1) * vocab);
    expect(at(reach)).toBeGreaterThan(1e-5);
    for (let p = reach + 1; p < sequence.length; p++) expect(at(p)).toBe(0);
  });

  test("bad Gemma 3 metadata is refused naming the key or field", async () => {
    const bad = writeTinyGemma3(join(dir, "bad-pattern"), { layers: 3, pattern: [true, false] });
    await expect(prefillLogits(bad.gguf, [6, 7])).rejects.toThrow(/gemma3\.attention\.sliding_window_pattern must be an integer or one bool per layer \(3\)/);
    const config = JSON.parse(await Bun.file(join(model.folder, "config.json")).text()) as Record<string, unknown>;
    writeFileSync(join(model.folder, "config.json"), JSON.stringify({ ...config, hidden_activation: "relu" }));
    try {
      await expect(prefillLogits(model.folder, [6, 7])).rejects.toThrow(/config\.json: hidden_activation must be gelu_pytorch_tanh/);
      writeFileSync(join(model.folder, "config.json"), JSON.stringify({ ...config, layer_types: ["sliding_attention"] }));
      await expect(prefillLogits(model.folder, [6, 7])).rejects.toThrow(/config\.json: layer_types must list one type per layer/);
    } finally {
      writeFileSync(join(model.folder, "config.json"), JSON.stringify(config));
    }
  });
});
