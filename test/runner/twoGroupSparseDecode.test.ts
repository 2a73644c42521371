/**
 * Sparse decode's runner ops on a model with two KV cache groups (a Gemma 3-shaped random file from
 * llama.cpp's gguf-py: layers 0-4 slide over 32 entries, layer 5 is global). KEY_SUMMARY and
 * KEY_SCORES address the full group's blocks: they summarise and score the global layer's keys
 * only, checked against EXPORT's keys of that group. A sparse step's FORWARD (flags bit 5) gives
 * the global layer a compacted table of selected pages and the sliding layers their true window
 * (the sliding table and each token's true index there): its logits are those of a one-group
 * runner (`--kv-groups 1`) over the same compacted table when that table's tail holds the window,
 * and the new token's K/V lands at its true index in both groups.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { ProtocolError, sequenceRange, Status } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { maxAbs, maxAbsDiff, tokens } from "../helpers/kvExportCompare.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

setDefaultTimeout(180_000);

const BLOCK = 16;
const WINDOW = 32;
const SHAPE = { layers: 6, hidden: 128, heads: 2, kvHeads: 1, headDim: 64, ffn: 256 };
const GLOBAL_LAYER = 5;
/** 6 full pages and 4 entries of a 7th: the next token has index 100, its window 69..100 (pages 4-6). */
const PROMPT = 100;

describe("sparse decode's ops on a model with sliding-window layers (two KV groups)", () => {
  let dir = "";
  let twoGroups: RunnerProcess;
  let oneGroup: RunnerProcess;
  let prompt: number[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-two-group-sparse-"));
    const model = writeRandomGguf("gemma3", join(dir, "gemma3.gguf"), { ...SHAPE, extraArgs: ["--sliding-window", String(WINDOW)] });
    const options = { executable: buildRunner(), model, blocks: 64, blockSize: BLOCK, threads: 2, kvDtype: "f32" as const };
    twoGroups = await RunnerProcess.start(options);
    oneGroup = await RunnerProcess.start({ ...options, kvGroups: 1 });
    prompt = tokens(11, PROMPT + 1, twoGroups.info.vocab);
  });
  afterAll(async () => {
    await twoGroups?.shutdown();
    await oneGroup?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A two-group sequence of `entries` capacity with the prompt prefilled. */
  async function prefilled(entries = PROMPT + 1): Promise<{ table: number[]; slidingTable: number[] }> {
    const blocks = Math.ceil(entries / BLOCK);
    const s = { table: await twoGroups.alloc(blocks), slidingTable: await twoGroups.alloc(blocks, 1) };
    await twoGroups.forward({ sequences: [{ ...s, tokens: prompt.slice(0, PROMPT), indices: sequenceRange(0, PROMPT), logitRows: [] }] });
    return s;
  }

  async function release(s: { table: number[]; slidingTable: number[] }): Promise<void> {
    await twoGroups.free(s.table);
    await twoGroups.free(s.slidingTable.filter((b) => b !== NO_BLOCK), 1);
  }

  test("the model has both groups: sliding layers 0-4, global layer 5", () => {
    expect(twoGroups.info.kv_groups?.map((g) => g.layers)).toEqual([[GLOBAL_LAYER], [0, 1, 2, 3, 4]]);
    expect(oneGroup.info.kv_groups).toBeUndefined();
  });

  test("KEY_SUMMARY: per full-group block the mean global-layer K without RoPE (EXPORT's); zeros for the sliding layers", async () => {
    const s = await prefilled();
    const width = twoGroups.info.kv_heads * twoGroups.info.head_dim;
    const dim = SHAPE.layers * width;
    const kv = await twoGroups.export({ ...s, start: 0, count: PROMPT });
    const summary = await twoGroups.keySummary([s.table[1]!, s.table[6]!, s.table[0]!]);
    expect(Array.from(summary.counts)).toEqual([16, 4, 16]);
    expect(summary.summaries.length).toBe(3 * dim);
    const mean = (from: number, count: number) => {
      const out = new Float32Array(dim);
      const k = kv.layers[GLOBAL_LAYER]!.k;
      for (let e = from; e < from + count; e++) for (let j = 0; j < width; j++) out[GLOBAL_LAYER * width + j]! += k[e * width + j]! / count;
      return out;
    };
    [mean(16, 16), mean(96, 4), mean(0, 16)].forEach((want, b) => {
      const got = summary.summaries.subarray(b * dim, (b + 1) * dim);
      expect(maxAbsDiff(got, want)).toBeLessThanOrEqual(1e-5);
      expect(maxAbs(got.subarray(0, GLOBAL_LAYER * width))).toBe(0);
      expect(maxAbs(got)).toBeGreaterThan(0.01);
    });
    await expect(twoGroups.keySummary([63])).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(/KEY_SUMMARY: block 63 is not allocated/) });
    await release(s);
  });

  test("KEY_SCORES: each written slot's global-layer K without RoPE dotted with the anchor; the sliding layers' part of the anchor counts for nothing", async () => {
    const s = await prefilled();
    const width = twoGroups.info.kv_heads * twoGroups.info.head_dim;
    const dim = SHAPE.layers * width;
    const kv = await twoGroups.export({ ...s, start: 0, count: PROMPT });
    const anchor = Float32Array.from({ length: dim }, (_, j) => Math.sin(j * 0.37) - 0.2);
    const scores = await twoGroups.keyScores([s.table[6]!, s.table[2]!], anchor);
    expect(scores.length).toBe(2 * BLOCK);
    const expected = (entry: number) => {
      let dot = 0;
      for (let j = 0; j < width; j++) dot += kv.layers[GLOBAL_LAYER]!.k[entry * width + j]! * anchor[GLOBAL_LAYER * width + j]!;
      return dot;
    };
    for (let o = 0; o < BLOCK; o++) {
      if (o < 4) expect(Math.abs(scores[o]! - expected(96 + o))).toBeLessThanOrEqual(1e-3 * (1 + Math.abs(expected(96 + o))));
      else expect(scores[o]).toBe(-Infinity);
      expect(Math.abs(scores[BLOCK + o]! - expected(32 + o))).toBeLessThanOrEqual(1e-3 * (1 + Math.abs(expected(32 + o))));
    }
    expect(new Set(Array.from(scores.subarray(BLOCK))).size).toBeGreaterThan(8);
    const otherSliding = anchor.slice();
    for (let j = 0; j < GLOBAL_LAYER * width; j++) otherSliding[j] = 5 * Math.cos(j);
    expect(Array.from(await twoGroups.keyScores([s.table[6]!, s.table[2]!], otherSliding))).toEqual(Array.from(scores));
    await release(s);
  });

  test("a sparse step: the global layer reads the selected pages, the sliding layers their true window (= one group over the compacted table)", async () => {
    const s = await prefilled();
    // Pages 0, 4, 5 and 6 (the window's): the new token is compacted index 3 * 16 + 4.
    const kept = [0, 4, 5, 6];
    const compacted = kept.map((p) => s.table[p]!);
    const index = 3 * BLOCK + (PROMPT % BLOCK);
    const next = [prompt[PROMPT]!];
    const sparse = await twoGroups.forward({ sequences: [{ table: compacted, slidingTable: s.slidingTable, tokens: next, positions: [PROMPT], indices: [index], slidingIndices: [PROMPT], logitRows: [0] }] });

    const single = await oneGroup.alloc(Math.ceil((PROMPT + 1) / BLOCK));
    await oneGroup.forward({ sequences: [{ table: single, tokens: prompt.slice(0, PROMPT), indices: sequenceRange(0, PROMPT), logitRows: [] }] });
    const want = await oneGroup.forward({ sequences: [{ table: kept.map((p) => single[p]!), tokens: next, positions: [PROMPT], indices: [index], logitRows: [0] }] });
    const got = sparse.logits[0]!;
    expect(maxAbsDiff(got, want.logits[0]!)).toBeLessThanOrEqual(1e-4 * maxAbs(want.logits[0]!));

    // The new token's K/V is at its true index in both groups (the one-group runner wrote its slot in page 6 too).
    const written = await twoGroups.export({ ...s, start: PROMPT, count: 1 });
    const reference = await oneGroup.export({ table: single, start: PROMPT, count: 1 });
    expect(Array.from(written.positions)).toEqual([PROMPT]);
    written.layers.forEach((layer, l) => expect(maxAbsDiff(layer.v, reference.layers[l]!.v)).toBeLessThanOrEqual(1e-5 * (1 + maxAbs(reference.layers[l]!.v))));

    // The dropped pages mattered: a dense step's logits differ.
    const dense = await oneGroup.forward({ sequences: [{ table: single, tokens: next, positions: [PROMPT], indices: [PROMPT], logitRows: [0] }] });
    expect(maxAbsDiff(got, dense.logits[0]!)).toBeGreaterThan(1e-3 * maxAbs(got));
    await oneGroup.free(single);
    await release(s);
  });

  test("sliding indices: refused on a one-group runner, beyond the sliding table, or with statistics", async () => {
    const s = await prefilled();
    const step = { table: s.table, slidingTable: s.slidingTable, tokens: [prompt[PROMPT]!], positions: [PROMPT], indices: [PROMPT], logitRows: [0] };
    await expect(twoGroups.forward({ sequences: [{ ...step, slidingIndices: [7 * BLOCK] }] })).rejects.toMatchObject({
      status: Status.BAD_REQUEST,
      runnerMessage: expect.stringMatching(/index 112 is beyond the sliding table's 112 slots/),
    });
    await expect((async () => twoGroups.forward({ sequences: [{ ...step, slidingIndices: [PROMPT], queryRows: [0] }], stats: true }))()).rejects.toThrow(ProtocolError);
    const single = await oneGroup.alloc(1);
    await expect(oneGroup.forward({ sequences: [{ table: single, tokens: [5], indices: [0], slidingIndices: [0], logitRows: [0] }] })).rejects.toMatchObject({
      status: Status.BAD_REQUEST,
      runnerMessage: expect.stringMatching(/flags bit 5 \(sliding indices\) needs a model with two KV groups/),
    });
    await oneGroup.free(single);
    // Nothing was written by the refused steps: the step runs afterwards.
    expect((await twoGroups.forward({ sequences: [{ ...step, slidingIndices: [PROMPT] }] })).logits[0]!.length).toBe(twoGroups.info.vocab);
    await release(s);
  });
});
