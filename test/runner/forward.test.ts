/**
 * The runner's forward pass and KV operations, through the real CPU build: logits equal the
 * independent PyTorch references (f32 tiny Llama; bf16 Qwen2 with QKV bias, tied embeddings,
 * llama3 rope scaling) to <= 1e-4; a chunk's K/V exported without RoPE and imported at other
 * positions behaves like the chunk computed there; recomputing a token in the middle of a
 * cached sequence reproduces it; attention statistics are distributions with causal chunk sums.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tinyModelOptionsFromFlags } from "../../src/cli/commands/model.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { Status, sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { referenceLlama, referenceLogits } from "../../src/model/referenceLlama.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";
import { argmax } from "../../src/engine/sampler.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

interface LogitsFixture {
  model_args: string[];
  sequence_ids: number[];
  positions: number[];
  prompt_ids: number[];
  generated_ids: number[];
  logits: number[][];
}

const fixture = (name: string) => JSON.parse(readFileSync(join(REPO_ROOT, "test/fixtures/engine", name), "utf8")) as LogitsFixture;

function maxAbsDifference(actual: Float32Array, expected: readonly number[], offset = 0): number {
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[offset + i]! - expected[i]!));
  return worst;
}

function modelFor(f: LogitsFixture) {
  const parsed = tinyModelOptionsFromFlags([...f.model_args.slice(2), "--out", "unused"]);
  if (parsed === "help") throw new Error("fixture model_args ask for help");
  return tinyModelFolder(parsed.options);
}

let executable = "";
beforeAll(() => {
  executable = buildRunner();
}, 300_000);

for (const name of ["tiny-reference.json", "tiny-variant-reference.json"]) {
  describe(`against ${name}`, () => {
    const f = fixture(name);
    let model: { path: string; cleanup(): void };
    let runner: RunnerProcess;
    beforeAll(async () => {
      model = modelFor(f);
      runner = await RunnerProcess.start({ executable, model: model.path, blocks: 16, threads: 2 });
    });
    afterAll(async () => {
      await runner?.shutdown();
      model?.cleanup();
    });

    test("one prefill: every row's logits within 1e-4 of PyTorch", async () => {
      const n = f.sequence_ids.length;
      const table = await runner.alloc(Math.ceil(n / 16));
      const result = await runner.forward({ sequences: [{ table, tokens: f.sequence_ids, positions: f.positions, indices: sequenceRange(0, n), logitRows: sequenceRange(0, n) }] });
      const vocab = f.logits[0]!.length;
      let worst = 0;
      for (let t = 0; t < n; t++) worst = Math.max(worst, maxAbsDifference(result.logits[0]!, f.logits[t]!, t * vocab));
      expect(worst).toBeLessThanOrEqual(1e-4);
      expect(worst).toBeGreaterThan(0); // float32 against float64: a zero would mean the comparison is vacuous
      await runner.free(table);
    });

    test("attention statistics: every row's per-layer mass equals the reference's head-averaged softmax weights", async () => {
      const ids = f.prompt_ids;
      const n = ids.length;
      const reference = referenceLlama(JSON.parse(readFileSync(join(model.path, "config.json"), "utf8")), readSafetensors(new Uint8Array(readFileSync(join(model.path, "model.safetensors")))));
      const expected: Float64Array[] = [];
      referenceLogits(reference, ids, undefined, expected);
      const table = await runner.alloc(Math.ceil(n / 16));
      const rows = sequenceRange(0, n);
      const result = await runner.forward({ stats: true, sequences: [{ table, tokens: ids, indices: rows, logitRows: [n - 1], queryRows: Array.from(rows), chunkBounds: [0, n] }] });
      const layers = result.stats![0]!;
      expect(layers.length).toBe(expected.length);
      let worst = 0;
      layers.forEach((layer, l) => {
        expect(layer.len).toBe(n);
        for (let i = 0; i < n * n; i++) worst = Math.max(worst, Math.abs(layer.mass[i]! - expected[l]![i]!));
      });
      expect(worst).toBeLessThanOrEqual(1e-5);
      // The weights are not uniform (a uniform answer would hide a mis-aggregation).
      expect(Math.max(...expected.map((m) => Math.max(...m.subarray((n - 1) * n))))).toBeGreaterThan(1.5 / n);
      await runner.free(table);
    });

    test("prompt then one token a step: the same logits and the same greedy tokens", async () => {
      const p = f.prompt_ids.length;
      const table = await runner.alloc(Math.ceil(f.sequence_ids.length / 16));
      const first = await runner.forward({ sequences: [{ table, tokens: f.prompt_ids, indices: sequenceRange(0, p), logitRows: [p - 1] }] });
      expect(maxAbsDifference(first.logits[0]!, f.logits[p - 1]!)).toBeLessThanOrEqual(1e-4);
      const greedy = [argmax(first.logits[0]!)];
      for (let k = 1; k < f.generated_ids.length; k++) {
        const step = await runner.forward({ sequences: [{ table, tokens: [greedy[k - 1]!], indices: [p + k - 1], logitRows: [0] }] });
        expect(maxAbsDifference(step.logits[0]!, f.logits[p + k - 1]!)).toBeLessThanOrEqual(1e-4);
        greedy.push(argmax(step.logits[0]!));
      }
      expect(greedy).toEqual(f.generated_ids);
      await runner.free(table);
    });
  });
}

describe("KV reuse operations", () => {
  const f = fixture("tiny-reference.json");
  let model: { path: string; cleanup(): void };
  let runner: RunnerProcess;
  beforeAll(async () => {
    model = modelFor(f);
    runner = await RunnerProcess.start({ executable, model: model.path, blocks: 32, threads: 2 });
  });
  afterAll(async () => {
    await runner?.shutdown();
    model?.cleanup();
  });

  const chunk = fixture("tiny-reference.json").prompt_ids;
  const n = chunk.length;
  const prefill = async (table: number[], start: number) =>
    runner.forward({ sequences: [{ table, tokens: chunk, positions: sequenceRange(start, n), indices: sequenceRange(0, n), logitRows: [n - 1] }] });

  test("K without RoPE does not depend on where the chunk was computed", async () => {
    const atZero = await runner.alloc(1);
    const atShift = await runner.alloc(1);
    await prefill(atZero, 0);
    await prefill(atShift, 1000);
    const a = await runner.export({ table: atZero, start: 0, count: n });
    const b = await runner.export({ table: atShift, start: 0, count: n });
    expect(Array.from(b.positions)).toEqual(Array.from(sequenceRange(1000, n)));
    let worst = 0;
    let largest = 0;
    for (let l = 0; l < a.layers.length; l++) {
      for (let i = 0; i < a.layers[l]!.k.length; i++) {
        worst = Math.max(worst, Math.abs(a.layers[l]!.k[i]! - b.layers[l]!.k[i]!), Math.abs(a.layers[l]!.v[i]! - b.layers[l]!.v[i]!));
        largest = Math.max(largest, Math.abs(a.layers[l]!.k[i]!));
      }
    }
    expect(largest).toBeGreaterThan(0.1);
    expect(worst).toBeLessThan(1e-4);
    await runner.free([...atZero, ...atShift]);
  });

  test("a chunk imported at new positions decodes like the chunk computed there", async () => {
    const computed = await runner.alloc(2);
    const logitsThere = await prefill(computed, 500);
    const next = argmax(logitsThere.logits[0]!);
    const decode = async (table: number[]) =>
      (await runner.forward({ sequences: [{ table, tokens: [next], positions: [500 + n], indices: [n], logitRows: [0] }] })).logits[0]!;
    const expected = await decode(computed);

    const source = await runner.alloc(1);
    await prefill(source, 0);
    const kv = await runner.export({ table: source, start: 0, count: n });
    kv.positions = Int32Array.from(sequenceRange(500, n));
    const moved = await runner.alloc(2);
    await runner.import({ table: moved, start: 0, count: n }, kv);
    const actual = await decode(moved);
    let worst = 0;
    for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!));
    expect(worst).toBeLessThan(1e-4);

    // Imported at the wrong positions (not re-rotated), the next token sees different keys.
    kv.positions = Int32Array.from(sequenceRange(0, n));
    const stale = await runner.alloc(2);
    await runner.import({ table: stale, start: 0, count: n }, kv);
    const wrong = await decode(stale);
    let difference = 0;
    for (let i = 0; i < expected.length; i++) difference = Math.max(difference, Math.abs(wrong[i]! - expected[i]!));
    expect(difference).toBeGreaterThan(1e-2);
    await runner.free([...computed, ...source, ...moved, ...stale]);
  });

  test("recomputing tokens in the middle of a cached sequence reproduces their logits", async () => {
    const table = await runner.alloc(1);
    const all = await runner.forward({ sequences: [{ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: sequenceRange(0, n) }] });
    const vocab = all.logits[0]!.length / n;
    const rows = [3, 7];
    const again = await runner.forward({ sequences: [{ table, tokens: rows.map((r) => chunk[r]!), indices: rows, logitRows: [0, 1] }] });
    for (let k = 0; k < rows.length; k++) {
      for (let v = 0; v < vocab; v++) expect(Math.abs(again.logits[0]![k * vocab + v]! - all.logits[0]![rows[k]! * vocab + v]!)).toBeLessThan(1e-5);
    }
    await runner.free(table);
  });

  test("greedy rows: each logit row as its argmax token and logit, for every sequence of the batch", async () => {
    const a = await runner.alloc(1);
    const b = await runner.alloc(1);
    const sequences = (table: number[]) => [
      { table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [1, n - 1] },
      { table: b, tokens: chunk.slice(0, 5), indices: sequenceRange(0, 5), logitRows: [4] },
    ];
    const full = await runner.forward({ sequences: sequences(a) });
    const greedy = await runner.forward({ sequences: sequences(a), greedyRows: true });
    const vocab = full.logits[1]!.length;
    expect(greedy.logits.every((rows) => rows.length === 0)).toBe(true);
    expect(greedy.greedy!.map((g) => Array.from(g.tokens))).toEqual([
      [argmax(full.logits[0]!.subarray(0, vocab)), argmax(full.logits[0]!.subarray(vocab))],
      [argmax(full.logits[1]!)],
    ]);
    expect(greedy.greedy![1]!.logits[0]).toBe(Math.max(...full.logits[1]!));
    await runner.free(a);
    await runner.free(b);
  });

  test("attention statistics: each query's mass is a distribution; chunk sums are causal and add up", async () => {
    const table = await runner.alloc(1);
    const bounds = [0, 4, 9, n];
    const result = await runner.forward({
      stats: true,
      sequences: [{ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [n - 1], queryRows: [0, 5, n - 1], chunkBounds: bounds }],
    });
    const layers = result.stats![0]!;
    expect(layers.length).toBe(2);
    for (const s of layers) {
      expect(s.queries).toBe(3);
      expect(s.len).toBe(n);
      expect(s.mass[0]).toBeCloseTo(1, 5); // the first token sees only itself
      for (let q = 0; q < 3; q++) {
        const row = s.mass.subarray(q * n, (q + 1) * n);
        const visible = [0, 5, n - 1][q]! + 1;
        expect(row.slice(0, visible).reduce((x, y) => x + y, 0)).toBeCloseTo(1, 5);
        for (let e = visible; e < n; e++) expect(row[e]).toBe(0);
      }
      expect(s.nChunks).toBe(3);
      for (let a = 0; a < 3; a++) {
        let total = 0;
        for (let b = 0; b < 3; b++) {
          total += s.chunks[a * 3 + b]!;
          if (b > a) expect(s.chunks[a * 3 + b]).toBe(0);
        }
        expect(total).toBeCloseTo(bounds[a + 1]! - bounds[a]!, 4);
      }
    }
    // Statistics do not change the logits.
    const plain = await runner.forward({ sequences: [{ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [n - 1] }] });
    expect(Array.from(plain.logits[0]!)).toEqual(Array.from(result.logits[0]!));
    await runner.free(table);
  });

  test("PROFILE counts the FLOPs of the GEMMs and attention of the FORWARDs since the last call", async () => {
    const table = await runner.alloc(1);
    await runner.profile(true);
    await runner.forward({ sequences: [{ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [n - 1] }] });
    const profile = await runner.profile(false);
    expect(profile.calls).toBe(1);
    expect(profile.tokens).toBe(n);
    // Tiny model: hidden 64, q 64, k/v 32 each, intermediate 128, 2 layers, vocab 259.
    const perToken = 2 * (64 * 128 + 64 * 64 + 64 * 256 + 128 * 64) * 2;
    expect(profile.linear_flops).toBe(n * perToken + 2 * 64 * 259);
    expect(profile.attention_flops).toBe(/* layers */ 2 * /* QKᵀ and PV */ 4 * /* heads */ 4 * /* head_dim */ 16 * ((n * (n + 1)) / 2));
    expect(profile.linear_seconds).toBeGreaterThan(0);
    expect(profile.total_seconds).toBeGreaterThanOrEqual(profile.linear_seconds + profile.attention_seconds);
    await runner.forward({ sequences: [{ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [n - 1] }] });
    expect((await runner.profile(false)).calls).toBe(0);
    await runner.free(table);
  });

  test("refuses to attend to entries never written, and two tokens on one index", async () => {
    const table = await runner.alloc(1);
    await expect(runner.forward({ sequences: [{ table, tokens: [65], indices: [4], logitRows: [0] }] })).rejects.toThrow(/index 0 is attended to but has not been written/);
    await expect(runner.forward({ sequences: [{ table, tokens: [65, 66], indices: [0, 0], logitRows: [] }] })).rejects.toThrow(/two tokens write the same index/);
    await expect(runner.forward({ sequences: [{ table, tokens: [65], indices: [16], logitRows: [0] }] })).rejects.toMatchObject({ status: Status.BAD_REQUEST });
    await expect(runner.export({ table, start: 0, count: 1 })).rejects.toThrow(/has not been written/);
    expect(runner.alive).toBe(true);
    await runner.free(table);
  });
});
