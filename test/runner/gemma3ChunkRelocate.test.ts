/**
 * Chunk reuse on a model with two KV cache groups (a Gemma 3-shaped random file from llama.cpp's
 * gguf-py: sliding layers turn at RoPE base 1e4, the global one at 1e6 with linear scaling ×8).
 * A chunk computed at positions 0.. and moved to positions d.. by RELOCATE (or by EXPORT then
 * IMPORT) must be the chunk computed at d..: the same relative positions give the same un-rotated
 * K, so every layer's K/V of the moved copy, read back by EXPORT, equals a fresh prefill's at d..
 * in both groups, and a question after it gets the fresh prefill's logits. The check is sensitive
 * to the base: re-rotating a sliding layer with the global layers' base would be off by far more
 * than the tolerance (measured here on the fresh prefill's K).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { layerErrors, maxAbs, maxAbsDiff, range, tokens } from "../helpers/kvExportCompare.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

setDefaultTimeout(180_000);

const BLOCK = 16;
const WINDOW = 32;
// 6 layers: llama.cpp's default pattern makes layers 0-4 sliding, layer 5 global.
const SHAPE = { layers: 6, hidden: 128, heads: 2, kvHeads: 1, headDim: 64, ffn: 256 };
const GLOBAL_BASE = 1e6; // rope.freq_base of arch_gemma3.py
const GLOBAL_SCALE = 8; // its linear rope scaling factor
const LOCAL_BASE = 1e4; // llama.cpp's default freq_base_swa
const CHUNK = 48; // longer than the window
const QUESTION = 7;
const DELTA = 101; // where the chunk is moved to

/**
 * Un-rotated K as an EXPORT would read it back had a RELOCATE by `delta` turned a sliding layer
 * with the global layers' frequencies: each pair (j, j + d/2) is off by delta·(ω_global − ω_local).
 */
function oneBaseK(k: Float32Array, headDim: number, delta: number): Float32Array {
  const out = new Float32Array(k.length);
  const half = headDim / 2;
  for (let head = 0; head < k.length / headDim; head++) {
    const o = head * headDim;
    for (let j = 0; j < half; j++) {
      const global = Math.pow(GLOBAL_BASE, (-2 * j) / headDim) / GLOBAL_SCALE;
      const local = Math.pow(LOCAL_BASE, (-2 * j) / headDim);
      const angle = delta * (global - local);
      const [c, s] = [Math.cos(angle), Math.sin(angle)];
      const [x, y] = [k[o + j]!, k[o + j + half]!];
      out[o + j] = x * c - y * s;
      out[o + j + half] = x * s + y * c;
    }
  }
  return out;
}

describe("chunk reuse on a model with sliding-window layers (two KV groups)", () => {
  let dir = "";
  let model = "";
  let runner: RunnerProcess;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-relocate-"));
    model = writeRandomGguf("gemma3", join(dir, "gemma3.gguf"), { ...SHAPE, extraArgs: ["--sliding-window", String(WINDOW)] });
    runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: 64, blockSize: BLOCK, threads: 2, kvDtype: "f32" });
  });
  afterAll(async () => {
    await runner?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A sequence's two tables, `entries` long. */
  async function sequence(entries: number): Promise<{ table: number[]; slidingTable: number[] }> {
    const blocks = Math.ceil(entries / BLOCK);
    return { table: await runner.alloc(blocks), slidingTable: await runner.alloc(blocks, 1) };
  }

  test("the model has both groups: sliding layers 0-4, global layer 5", () => {
    expect(runner.info.layer_windows).toEqual([WINDOW, WINDOW, WINDOW, WINDOW, WINDOW, 0]);
    expect(runner.info.kv_groups?.map((g) => g.layers)).toEqual([[5], [0, 1, 2, 3, 4]]);
  });

  test("RELOCATE and EXPORT+IMPORT by a position delta re-rotate each layer with its own base: the moved chunk is the chunk computed there", async () => {
    const chunk = tokens(2, CHUNK, runner.info.vocab);
    const question = tokens(3, QUESTION, runner.info.vocab);
    const entries = CHUNK + QUESTION;

    const computed = await sequence(entries);
    await runner.forward({ sequences: [{ ...computed, tokens: chunk, indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const fresh = await sequence(entries);
    await runner.forward({ sequences: [{ ...fresh, tokens: chunk, positions: range(DELTA, CHUNK), indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const want = await runner.export({ ...fresh, start: 0, count: CHUNK });
    expect(Array.from(want.positions)).toEqual(Array.from(range(DELTA, CHUNK)));

    const relocated = await sequence(entries);
    await runner.relocate({ srcTable: computed.table, srcSlidingTable: computed.slidingTable, srcStart: 0, count: CHUNK, dstTable: relocated.table, dstSlidingTable: relocated.slidingTable, dstStart: 0, positions: range(DELTA, CHUNK) });
    const imported = await sequence(entries);
    const exported = await runner.export({ ...computed, start: 0, count: CHUNK });
    await runner.import({ ...imported, start: 0, count: CHUNK }, { positions: range(DELTA, CHUNK), layers: exported.layers });

    for (const [name, moved] of [["RELOCATE", relocated], ["IMPORT", imported]] as const) {
      const errors = layerErrors(await runner.export({ ...moved, start: 0, count: CHUNK }), want);
      console.log(`${name} by ${DELTA}: per layer (K, V) max error / max value: ${errors.map((e) => `${e.k.toExponential(1)},${e.v.toExponential(1)}`).join("  ")}`);
      for (const e of errors) {
        expect(e.k).toBeLessThan(1e-4);
        expect(e.v).toBeLessThan(1e-4);
      }
      // The whole model: the question over the moved chunk answers as over the fresh one.
      const ask = (tables: typeof moved) =>
        runner.forward({ sequences: [{ ...tables, tokens: question, positions: range(DELTA + CHUNK, QUESTION), indices: sequenceRange(CHUNK, QUESTION), logitRows: [QUESTION - 1] }] });
      const logits = (await ask(moved)).logits[0]!;
      const reference = (await ask(fresh)).logits[0]!;
      const error = maxAbsDiff(logits, reference);
      console.log(`${name}: question logits max |difference| ${error.toExponential(2)} (max |logit| ${maxAbs(reference).toFixed(2)})`);
      expect(error).toBeLessThan(1e-4);
      // The question wrote index CHUNK.. at positions DELTA+CHUNK..; rewrite them for the next round.
      if (name === "RELOCATE") await runner.forward({ sequences: [{ ...fresh, tokens: chunk, positions: range(DELTA, CHUNK), indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    }

    // Sensitivity: one RoPE base for every layer would put a sliding layer's K far off.
    const sliding = want.layers[0]!.k;
    const wrong = maxAbsDiff(oneBaseK(sliding, SHAPE.headDim, DELTA), sliding) / maxAbs(sliding);
    console.log(`a sliding layer re-rotated with the global base instead: K max error / max value ${wrong.toFixed(3)}`);
    expect(wrong).toBeGreaterThan(0.05);
  });

  test("a span op needs every block of the span in the sliding group, and the sliding tables", async () => {
    const chunk = tokens(4, CHUNK, runner.info.vocab);
    const s = await sequence(CHUNK);
    await runner.forward({ sequences: [{ ...s, tokens: chunk, indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const left = { table: s.table, slidingTable: [NO_BLOCK, ...s.slidingTable.slice(1)] };
    await expect(runner.export({ ...left, start: 0, count: CHUNK })).rejects.toThrow(/sequence index 0 lies in a sliding block that has left the window/);
    expect((await runner.export({ ...left, start: BLOCK, count: CHUNK - BLOCK })).positions[0]).toBe(BLOCK);
    await expect(runner.export({ table: s.table, start: 0, count: 4 })).rejects.toThrow(/two KV cache groups .* give the sequence's sliding table too/);
    const unwritten = await sequence(CHUNK);
    await expect(runner.export({ ...unwritten, start: 0, count: 4 })).rejects.toThrow(/has not been written/);
    // A sliding table whose blocks were written at other positions than the global table's.
    const other = await sequence(CHUNK);
    await runner.forward({ sequences: [{ ...other, tokens: chunk, positions: range(5, CHUNK), indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    await expect(runner.export({ table: s.table, slidingTable: other.slidingTable, start: 0, count: 4 })).rejects.toThrow(/holds position 5 in the sliding group but 0 in the global one/);
  });

  test("EXPORT and IMPORT of one KV group: the other group's layers are zeros / untouched and its table need not hold the span", async () => {
    const chunk = tokens(5, CHUNK, runner.info.vocab);
    const s = await sequence(CHUNK);
    await runner.forward({ sequences: [{ ...s, tokens: chunk, indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const both = await runner.export({ ...s, start: 0, count: CHUNK });
    const noSliding = s.slidingTable.map(() => NO_BLOCK);
    const global = await runner.export({ table: s.table, slidingTable: noSliding, start: 0, count: CHUNK, groups: 1 });
    const sliding = await runner.export({ ...s, start: 0, count: CHUNK, groups: 2 });
    const isSliding = (l: number) => runner.info.layer_windows![l]! > 0;
    both.layers.forEach((layer, l) => {
      expect(Array.from(global.layers[l]!.k)).toEqual(isSliding(l) ? Array.from(new Float32Array(layer.k.length)) : Array.from(layer.k));
      expect(Array.from(sliding.layers[l]!.v)).toEqual(isSliding(l) ? Array.from(layer.v) : Array.from(new Float32Array(layer.v.length)));
    });
    // The sliding layers alone into a fresh sequence, then the global ones: together the K/V of both.
    const copy = await sequence(CHUNK);
    await expect(runner.export({ ...copy, start: 0, count: 4, groups: 2 })).rejects.toThrow(/has not been written in the sliding group/);
    await runner.import({ table: copy.table, slidingTable: copy.slidingTable, start: 0, count: CHUNK, groups: 2 }, both);
    await expect(runner.export({ ...copy, start: 0, count: 4 })).rejects.toThrow(/has not been written/);
    await runner.import({ table: copy.table, slidingTable: noSliding, start: 0, count: CHUNK, groups: 1 }, both);
    const back = await runner.export({ ...copy, start: 0, count: CHUNK });
    back.layers.forEach((layer, l) => expect(maxAbsDiff(layer.k, both.layers[l]!.k)).toBeLessThan(1e-5 * maxAbs(both.layers[l]!.k)));
    await expect(runner.export({ ...s, start: 0, count: 4, groups: 4 as 1 })).rejects.toThrow(/KV groups must be 1 \(global layers\), 2 \(sliding-window layers\) or 3 \(both\), got 4/);
    await expect(runner.export({ table: s.table, slidingTable: noSliding, start: 0, count: 4, groups: 3 })).rejects.toThrow(/left the window/);
  });
});
