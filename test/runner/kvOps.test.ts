/**
 * The runner's KV-reuse operations through the real CPU build: RELOCATE (K/V copied between
 * sequence entries, K re-rotated: a chunk relocated to new positions is the chunk computed
 * there), KEY_SUMMARY (per block mean K without RoPE), FORWARD's chunk-mass statistics (flags
 * bit 1) and Cache-Craft's focused-chunk early stop (flags bit 2: the focused set equals a
 * reference of Algorithm 1 on the returned chunk matrices, stopped tokens keep the cached K/V in
 * the later layers).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import {
  FrameReader,
  Op,
  ProtocolError,
  Status,
  encodeForward,
  encodeRelocate,
  encodeRequest,
  sequenceRange,
  type ForwardRequest,
  type ForwardSequence,
  type KvData,
} from "../../src/runner/runnerProtocol.ts";
import { argmax } from "../../src/engine/sampler.ts";
import { REPO_ROOT, runProgram } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

const TEXT = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.";
const TOKENS = Array.from(new TextEncoder().encode(TEXT));

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

/** Entries [from, from+count) of an EXPORT of `total` entries starting at 0. */
function entries(kv: KvData, from: number, count: number, width: number): KvData {
  return {
    positions: kv.positions.slice(from, from + count),
    layers: kv.layers.map((l) => ({ k: l.k.slice(from * width, (from + count) * width), v: l.v.slice(from * width, (from + count) * width) })),
  };
}

function range(start: number, count: number, step = 1): number[] {
  return Array.from({ length: count }, (_, i) => start + i * step);
}

let executable = "";
beforeAll(() => {
  executable = buildRunner();
}, 300_000);

describe("request encoding", () => {
  test("RELOCATE body layout", () => {
    const body = encodeRelocate({ srcTable: [4, 5], srcStart: 3, count: 2, dstTable: [7], dstStart: 1, positions: [-1, 9] });
    const view = new DataView(body.buffer);
    const words = Array.from({ length: body.length / 4 }, (_, i) => view.getInt32(i * 4, true));
    expect(words).toEqual([2, 4, 5, 3, 2, 1, 7, 1, -1, 9]);
    expect(() => encodeRelocate({ srcTable: [1], srcStart: 0, count: 2, dstTable: [2], dstStart: 0, positions: [0] })).toThrow(ProtocolError);
  });

  test("FORWARD flags and the early-stop fields", () => {
    const seq: ForwardSequence = { table: [0], tokens: [1], indices: [0], logitRows: [], queryRows: [], chunkBounds: [0, 1], earlyStop: { window: 3, questionChunk: 0 } };
    const words = (r: ForwardRequest) => {
      const body = encodeForward(r);
      const view = new DataView(body.buffer);
      return Array.from({ length: body.length / 4 }, (_, i) => view.getUint32(i * 4, true));
    };
    expect(words({ stats: true, chunkMass: true, earlyStop: true, sequences: [seq] })).toEqual([7, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 3, 0]);
    expect(words({ stats: true, chunkMass: true, sequences: [seq] })).toEqual([3, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1]);
    expect(() => encodeForward({ chunkMass: true, sequences: [seq] })).toThrow(/need stats/);
    expect(() => encodeForward({ stats: true, earlyStop: true, sequences: [{ ...seq, earlyStop: undefined }] })).toThrow(/needs earlyStop/);
  });
});

describe("RELOCATE, KEY_SUMMARY and chunk mass (2 layers)", () => {
  let model: { path: string; cleanup(): void };
  let runner: RunnerProcess;
  let width = 0;
  beforeAll(async () => {
    model = tinyModelFolder();
    runner = await RunnerProcess.start({ executable, model: model.path, blocks: 64, threads: 2 });
    width = runner.info.kv_heads * runner.info.head_dim;
  });
  afterAll(async () => {
    await runner?.shutdown();
    model?.cleanup();
  });

  const n = 20;
  const chunk = TOKENS.slice(0, n);
  const prefill = async (table: number[], position: number, indexStart = 0) =>
    runner.forward({ sequences: [{ table, tokens: chunk, positions: sequenceRange(position, n), indices: sequenceRange(indexStart, n), logitRows: [n - 1] }] });
  const nextLogits = async (table: number[], token: number, position: number) =>
    (await runner.forward({ sequences: [{ table, tokens: [token], positions: [position], indices: [n], logitRows: [0] }] })).logits[0]!;
  const kDiff = (a: KvData, b: KvData) => Math.max(...a.layers.map((l, i) => maxDiff(l.k, b.layers[i]!.k)));
  const sameV = (a: KvData, b: KvData) => a.layers.every((l, i) => Array.from(l.v).every((x, j) => x === b.layers[i]!.v[j]));

  test("a chunk relocated to new positions is the chunk prefilled there (K, V, the next token's logits)", async () => {
    const p = 3;
    const q = 700;
    const source = await runner.alloc(2);
    const there = await runner.alloc(2);
    const moved = await runner.alloc(2);
    await prefill(source, p);
    const reference = await prefill(there, q);
    const before = await runner.export({ table: source, start: 0, count: n });
    await runner.relocate({ srcTable: source, srcStart: 0, count: n, dstTable: moved, dstStart: 0, positions: sequenceRange(q, n) });
    const relocated = await runner.export({ table: moved, start: 0, count: n });
    const computed = await runner.export({ table: there, start: 0, count: n });
    expect(Array.from(relocated.positions)).toEqual(range(q, n));
    expect(maxAbs(relocated.layers[1]!.k)).toBeGreaterThan(0.1);
    expect(kDiff(relocated, before)).toBeLessThanOrEqual(1e-5); // RoPE undone and redone
    expect(kDiff(relocated, computed)).toBeLessThanOrEqual(1e-5);
    expect(sameV(relocated, before)).toBe(true);
    expect(Math.max(...relocated.layers.map((l, i) => maxDiff(l.v, computed.layers[i]!.v)))).toBeLessThanOrEqual(1e-5);
    // The source is unchanged.
    const after = await runner.export({ table: source, start: 0, count: n });
    expect(kDiff(after, before)).toBe(0);
    expect(Array.from(after.positions)).toEqual(range(p, n));

    const next = argmax(reference.logits[0]!);
    const expected = await nextLogits(there, next, q + n);
    expect(maxDiff(await nextLogits(moved, next, q + n), expected)).toBeLessThanOrEqual(1e-5);
    // Copied without re-rotation, the keys sit at the old positions: the logits differ.
    const stale = await runner.alloc(2);
    await runner.copy(source.map((src, i) => ({ src, dst: stale[i]! })));
    expect(maxDiff(await nextLogits(stale, next, q + n), expected)).toBeGreaterThan(1e-2);
    await runner.free([...source, ...there, ...moved, ...stale]);
  });

  test("in place: the same entries re-rotated", async () => {
    const table = await runner.alloc(2);
    const there = await runner.alloc(2);
    await prefill(table, 0);
    const reference = await prefill(there, 321);
    await runner.relocate({ srcTable: table, srcStart: 0, count: n, dstTable: table, dstStart: 0, positions: sequenceRange(321, n) });
    const relocated = await runner.export({ table, start: 0, count: n });
    expect(Array.from(relocated.positions)).toEqual(range(321, n));
    expect(kDiff(relocated, await runner.export({ table: there, start: 0, count: n }))).toBeLessThanOrEqual(1e-5);
    const next = argmax(reference.logits[0]!);
    expect(maxDiff(await nextLogits(table, next, 321 + n), await nextLogits(there, next, 321 + n))).toBeLessThanOrEqual(1e-5);
    await runner.free([...table, ...there]);
  });

  test("part of a sequence to another offset across blocks, any positions", async () => {
    const source = await runner.alloc(2);
    const target = await runner.alloc(2);
    await prefill(source, 0);
    const all = await runner.export({ table: source, start: 0, count: n });
    const positions = Int32Array.from(range(-40, 12, 7)); // negative and spread positions are fine
    await runner.relocate({ srcTable: source, srcStart: 3, count: 12, dstTable: target, dstStart: 9, positions });
    const moved = await runner.export({ table: target, start: 9, count: 12 });
    expect(Array.from(moved.positions)).toEqual(Array.from(positions));
    const expected = entries(all, 3, 12, width);
    expect(kDiff(moved, expected)).toBeLessThanOrEqual(1e-5);
    expect(sameV(moved, expected)).toBe(true);
    // Entries outside the destination range stay unwritten.
    await expect(runner.export({ table: target, start: 8, count: 1 })).rejects.toThrow(/has not been written/);
    await expect(runner.export({ table: target, start: 21, count: 1 })).rejects.toThrow(/has not been written/);
    // count 0 is a no-op.
    await runner.relocate({ srcTable: source, srcStart: 0, count: 0, dstTable: target, dstStart: 0, positions: [] });
    await runner.free([...source, ...target]);
  });

  test("refusals leave the cache as it was", async () => {
    const table = await runner.alloc(2);
    const other = await runner.alloc(2);
    await prefill(table, 0);
    const before = await runner.export({ table, start: 0, count: n });
    const refuse = (request: Parameters<RunnerProcess["relocate"]>[0], message: RegExp) =>
      expect(runner.relocate(request)).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(message) });
    await refuse({ srcTable: other, srcStart: 0, count: 2, dstTable: table, dstStart: 0, positions: [0, 1] }, /source index 0 has not been written/);
    await refuse({ srcTable: table, srcStart: 15, count: 6, dstTable: other, dstStart: 0, positions: range(0, 6) }, /source index 20 has not been written/);
    await refuse({ srcTable: table, srcStart: 0, count: 10, dstTable: table, dstStart: 2, positions: range(0, 10) }, /overlap only in place/);
    await refuse({ srcTable: table, srcStart: 0, count: 10, dstTable: [other[1]!, ...table], dstStart: 18, positions: range(0, 10) }, /overlap only in place/);
    await refuse({ srcTable: table, srcStart: 0, count: 10, dstTable: other, dstStart: 25, positions: range(0, 10) }, /RELOCATE destination: span 25\+10 exceeds the block table's 32 slots/);
    await refuse({ srcTable: table, srcStart: 30, count: 10, dstTable: other, dstStart: 0, positions: range(0, 10) }, /RELOCATE source: span/);
    await refuse({ srcTable: table, srcStart: 0, count: 4, dstTable: [63], dstStart: 0, positions: range(0, 4) }, /block 63 is not allocated/);
    await refuse({ srcTable: table, srcStart: 0, count: 20, dstTable: [other[0]!, other[0]!], dstStart: 0, positions: range(0, 20) }, /two destination indices are the same slot/);
    await refuse({ srcTable: [table[0]!, table[0]!], srcStart: 0, count: 20, dstTable: other, dstStart: 0, positions: range(0, 20) }, /two source indices are the same slot/);
    await refuse({ srcTable: table, srcStart: 0, count: 1, dstTable: other, dstStart: 0, positions: [-2147483648] }, /reserved/);
    const after = await runner.export({ table, start: 0, count: n });
    expect(Array.from(after.positions)).toEqual(Array.from(before.positions));
    expect(kDiff(after, before)).toBe(0);
    expect(sameV(after, before)).toBe(true);
    await expect(runner.export({ table: other, start: 0, count: 1 })).rejects.toThrow(/has not been written/);
    expect(runner.alive).toBe(true);
    await runner.free([...table, ...other]);
  });

  test("KEY_SUMMARY: per block the written slots and their mean K without RoPE, layer-major", async () => {
    const table = await runner.alloc(3);
    await prefill(table, 500); // 16 entries in the first block, 4 in the second, none in the third
    const kv = await runner.export({ table, start: 0, count: n });
    const { layers } = runner.info;
    const dim = layers * width;
    const summary = await runner.keySummary([table[1]!, table[0]!, table[2]!]);
    expect(Array.from(summary.counts)).toEqual([4, 16, 0]);
    expect(summary.summaries.length).toBe(3 * dim);
    const mean = (from: number, count: number) => {
      const out = new Float64Array(dim);
      for (let l = 0; l < layers; l++)
        for (let e = from; e < from + count; e++) for (let j = 0; j < width; j++) out[l * width + j]! += kv.layers[l]!.k[e * width + j]! / count;
      return out;
    };
    expect(maxDiff(summary.summaries.subarray(0, dim), mean(16, 4))).toBeLessThanOrEqual(1e-5);
    expect(maxDiff(summary.summaries.subarray(dim, 2 * dim), mean(0, 16))).toBeLessThanOrEqual(1e-5);
    expect(maxAbs(summary.summaries.subarray(dim, 2 * dim))).toBeGreaterThan(0.01);
    expect(maxAbs(summary.summaries.subarray(2 * dim))).toBe(0);
    // Without RoPE: the same chunk at other positions summarises (nearly) the same.
    const elsewhere = await runner.alloc(2);
    await prefill(elsewhere, 0);
    const again = await runner.keySummary([elsewhere[0]!]);
    expect(maxDiff(again.summaries, summary.summaries.subarray(dim, 2 * dim))).toBeLessThanOrEqual(1e-4);
    expect((await runner.keySummary([])).summaries.length).toBe(0);
    await expect(runner.keySummary([63])).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(/KEY_SUMMARY: block 63 is not allocated/) });
    await runner.free([...table, ...elsewhere]);
    await expect(runner.keySummary([table[0]!])).rejects.toThrow(/is not allocated/);
  });

  test("KEY_SCORES: each written slot's K without RoPE dotted with the anchor over all layers; -inf where unwritten", async () => {
    const table = await runner.alloc(3);
    await prefill(table, 0);
    await runner.forward({ sequences: [{ table, tokens: chunk.slice(0, 4), indices: sequenceRange(16, 4), logitRows: [] }] });
    const kv = await runner.export({ table, start: 0, count: n });
    const { layers, block_size } = runner.info;
    const dim = layers * width;
    const anchor = Float32Array.from({ length: dim }, (_, j) => Math.sin(j * 0.37) - 0.2);
    const scores = await runner.keyScores([table[1]!, table[0]!], anchor);
    expect(scores.length).toBe(2 * block_size);
    const expected = (entry: number) => {
      let dot = 0;
      for (let l = 0; l < layers; l++) for (let j = 0; j < width; j++) dot += kv.layers[l]!.k[entry * width + j]! * anchor[l * width + j]!;
      return dot;
    };
    for (let o = 0; o < block_size; o++) {
      if (o < 4) expect(Math.abs(scores[o]! - expected(16 + o))).toBeLessThanOrEqual(1e-3 * (1 + Math.abs(expected(16 + o))));
      else expect(scores[o]).toBe(-Infinity);
      expect(Math.abs(scores[block_size + o]! - expected(o))).toBeLessThanOrEqual(1e-3 * (1 + Math.abs(expected(o))));
    }
    expect(new Set(Array.from(scores.subarray(block_size))).size).toBeGreaterThan(8);
    await expect(runner.keyScores([table[0]!], anchor.subarray(1))).rejects.toThrow(/an anchor of/);
    await expect(runner.keyScores([63], anchor)).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(/KEY_SCORES: block 63 is not allocated/) });
    const bad = anchor.slice();
    bad[3] = Number.NaN;
    await expect(runner.keyScores([table[0]!], bad)).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(/KEY_SCORES: anchor value 3 is not finite/) });
    await runner.free(table);
  });

  test("chunk mass: each query's mass summed over each chunk; the rest unchanged", async () => {
    const table = await runner.alloc(2);
    const queryRows = [0, 7, 12, 19];
    const seq = (chunkBounds: number[]): ForwardSequence => ({ table, tokens: chunk, indices: sequenceRange(0, n), logitRows: [n - 1], queryRows, chunkBounds });
    for (const bounds of [
      [0, 5, 12, 20],
      [2, 9, 15], // entries outside every chunk count nowhere
    ]) {
      const perEntry = await runner.forward({ stats: true, sequences: [seq(bounds)] });
      const perChunk = await runner.forward({ stats: true, chunkMass: true, sequences: [seq(bounds)] });
      expect(Array.from(perChunk.logits[0]!)).toEqual(Array.from(perEntry.logits[0]!));
      const chunks = bounds.length - 1;
      perChunk.stats![0]!.forEach((layer, l) => {
        const plain = perEntry.stats![0]![l]!;
        expect(layer.perChunk).toBe(true);
        expect(plain.perChunk).toBe(false);
        expect(layer.mass.length).toBe(queryRows.length * chunks);
        // The CPU backend sums chunk-mode masses inside the attention kernel: same sums, another order.
        expect(layer.chunks.length).toBe(plain.chunks.length);
        expect(maxDiff(layer.chunks, plain.chunks)).toBeLessThanOrEqual(1e-5);
        const expected: number[] = [];
        for (let qi = 0; qi < queryRows.length; qi++)
          for (let c = 0; c < chunks; c++) {
            let sum = 0;
            for (let e = bounds[c]!; e < bounds[c + 1]!; e++) sum += plain.mass[qi * n + e]!;
            expected.push(sum);
          }
        expect(maxDiff(layer.mass, expected)).toBeLessThanOrEqual(1e-6);
        expect(maxAbs(layer.mass)).toBeGreaterThan(0.1);
      });
    }
    await runner.free(table);
  });
});

// ---------------------------------------------------------------------------
// Focused-chunk early stop

test("the C++ unit tests of the focused-chunk prediction (cuda/test/focus_test.cpp) pass", () => {
  const build = runProgram(["make", "-C", join(REPO_ROOT, "cuda"), "-j2", "tests"]);
  expect(build.code).toBe(0);
  const run = runProgram([join(REPO_ROOT, "cuda", "build", "runner-tests"), "focus."]);
  if (run.code !== 0) console.error(run.stdout, run.stderr);
  expect(run.stdout).not.toMatch(/^FAIL /m);
  const passed = run.stdout.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
  expect(passed).toEqual(["focus.degenerate_cases_focus_everything", "focus.split_of_sorted_scores", "focus.too_few_chunks_never_stop", "focus.window_fixes_the_set"]);
  expect(run.code).toBe(0);
}, 600_000);

/** Cache-Craft Algorithm 1, written from the paper: cumulative entropies h and their jumps. */
function referenceFocus(perLayer: Float32Array[], nChunks: number, question: number, window: number, layers: number): { cutoffLayer: number; focused: number[] } {
  const candidates = range(0, nChunks).filter((c) => c !== question);
  const k = candidates.length;
  const cinter = new Array<number>(k).fill(0);
  const history: string[] = [];
  for (let l = 0; l < perLayer.length; l++) {
    candidates.forEach((c, i) => (cinter[i]! += perLayer[l]![question * nChunks + c]!));
    let split: number[] = candidates;
    if (k >= 3) {
      const order = range(0, k).sort((a, b) => cinter[b]! - cinter[a]! || a - b);
      const sorted = order.map((i) => cinter[i]!);
      const diff = range(1, k - 1).map((i) => sorted[i - 1]! - sorted[i]!); // diff_1 .. diff_{k-1}
      const total = diff.reduce((a, b) => a + b, 0);
      if (total > 0) {
        const p = diff.map((d) => d / total);
        const h = [0]; // h_0 = 0, h_i = h_{i-1} - p_i ln p_i
        p.forEach((pi, i) => h.push(h[i]! - (pi > 0 ? pi * Math.log(pi) : 0)));
        let iStar = 1;
        for (let i = 2; i <= k - 2; i++) if (h[i + 1]! - h[i]! > h[iStar + 1]! - h[iStar]!) iStar = i;
        split = order.slice(0, iStar).map((i) => candidates[i]!).sort((a, b) => a - b);
      }
    }
    history.push(split.join(","));
    const last = history.slice(-window);
    if (split.length < k && history.length >= window && last.every((f) => f === last[0])) return { cutoffLayer: l + 1, focused: split };
  }
  return { cutoffLayer: layers, focused: candidates };
}

describe("focused-chunk early stop (6 layers)", () => {
  const LAYERS = 6;
  let model: { path: string; cleanup(): void };
  let runner: RunnerProcess;
  beforeAll(async () => {
    model = tinyModelFolder({ layers: LAYERS });
    runner = await RunnerProcess.start({ executable, model: model.path, blocks: 64, threads: 2 });
  });
  afterAll(async () => {
    await runner?.shutdown();
    model?.cleanup();
  });

  // Context pieces 0..5, 6..12, 13..17, 18..23, then the question 24..28 (indices = positions).
  const PIECES = [0, 6, 13, 18, 24, 29];
  // Chunk bounds of the requests: the four pieces as four chunks, or the last two as one chunk
  // (which the seeded model's question then attends to most in every layer); the question last.
  const FOUR = PIECES;
  const THREE = [0, 6, 13, 24, 29];
  const CONTEXT = 24;
  const total = PIECES.at(-1)!;
  const tokens = TOKENS.slice(30, 30 + total);
  // Recomputed: two tokens of every context piece, and the whole question (new).
  const recompute = [1, 5, 7, 12, 14, 17, 19, 23];
  const question = range(CONTEXT, 5);
  const questionChunk = (bounds: number[]) => bounds.length - 2;
  const chunkOf = (bounds: number[], index: number) => bounds.findIndex((b, c) => c + 1 < bounds.length && index >= b && index < bounds[c + 1]!);

  /** Every context piece prefilled alone and relocated into one table: a stale cache (no cross-piece attention). */
  let pristine: number[] = [];
  beforeAll(async () => {
    pristine = await runner.alloc(2);
    for (let c = 0; c + 2 < PIECES.length; c++) {
      const len = PIECES[c + 1]! - PIECES[c]!;
      const alone = await runner.alloc(1);
      await runner.forward({ sequences: [{ table: alone, tokens: tokens.slice(PIECES[c]!, PIECES[c + 1]!), indices: sequenceRange(0, len), logitRows: [] }] });
      await runner.relocate({ srcTable: alone, srcStart: 0, count: len, dstTable: pristine, dstStart: PIECES[c]!, positions: sequenceRange(PIECES[c]!, len) });
      await runner.free(alone);
    }
  });

  const fresh = async () => {
    const table = await runner.alloc(2);
    await runner.copy(pristine.map((src, i) => ({ src, dst: table[i]! })));
    return table;
  };

  const sequence = (bounds: number[], table: number[], window: number | null, indices = [...recompute, ...question]): ForwardSequence => ({
    table,
    tokens: indices.map((i) => tokens[i]!),
    indices,
    logitRows: [indices.length - 1],
    queryRows: range(0, indices.length),
    chunkBounds: bounds,
    ...(window === null ? {} : { earlyStop: { window, questionChunk: questionChunk(bounds) } }),
  });
  const request = (bounds: number[], table: number[], window: number | null, indices?: number[]): ForwardRequest => ({
    stats: true,
    chunkMass: true,
    earlyStop: window !== null,
    sequences: [sequence(bounds, table, window, indices)],
  });

  /** One FORWARD on a fresh copy of the stale cache; its context K/V afterwards. */
  const run = async (bounds: number[], window: number | null) => {
    const table = await fresh();
    const result = await runner.forward(request(bounds, table, window));
    const kv = await runner.export({ table, start: 0, count: CONTEXT });
    await runner.free(table);
    return { result, kv };
  };

  test("a window longer than the model: nothing stops, the results are those without early stop", async () => {
    const plain = await run(FOUR, null);
    const never = await run(FOUR, LAYERS + 1);
    expect(never.result.earlyStop).toEqual([{ cutoffLayer: LAYERS, focused: [0, 1, 2, 3] }]);
    expect(Array.from(never.result.logits[0]!)).toEqual(Array.from(plain.result.logits[0]!));
    never.result.stats![0]!.forEach((layer, l) => {
      expect(Array.from(layer.mass)).toEqual(Array.from(plain.result.stats![0]![l]!.mass));
      expect(Array.from(layer.chunks)).toEqual(Array.from(plain.result.stats![0]![l]!.chunks));
    });
    expect(plain.result.earlyStop).toBeUndefined();
    expect(never.kv).toEqual(plain.kv);
  });

  for (const [name, bounds, window] of [
    ["four chunks, window 1", FOUR, 1],
    ["three chunks, window 2", THREE, 2],
    ["three chunks, window 3", THREE, 3],
  ] as const) {
    test(`${name}: the focused set of Algorithm 1; stopped tokens keep the cached K/V after the cutoff`, async () => {
      const chunks = bounds.length - 1;
      const stale = await runner.export({ table: pristine, start: 0, count: CONTEXT });
      const plain = await run([...bounds], null);
      const first = await run([...bounds], window);
      const second = await run([...bounds], window);
      // Deterministic.
      expect(second.result.earlyStop).toEqual(first.result.earlyStop!);
      expect(Array.from(second.result.logits[0]!)).toEqual(Array.from(first.result.logits[0]!));
      expect(second.kv).toEqual(first.kv);

      const { cutoffLayer, focused } = first.result.earlyStop![0]!;
      const layers = first.result.stats![0]!;
      expect({ cutoffLayer, focused }).toEqual(referenceFocus(layers.map((s) => s.chunks), chunks, questionChunk([...bounds]), window, LAYERS));
      expect(cutoffLayer).toBe(window); // the seeded model's question settles at once on these chunks
      // Up to the cutoff the statistics are those of the run without early stop.
      for (let l = 0; l < cutoffLayer; l++) expect(Array.from(layers[l]!.chunks)).toEqual(Array.from(plain.result.stats![0]![l]!.chunks));

      const indices = [...recompute, ...question];
      const stopped = recompute.filter((i) => !focused.includes(chunkOf([...bounds], i)));
      const going = recompute.filter((i) => focused.includes(chunkOf([...bounds], i)));
      expect(stopped.length).toBeGreaterThan(0);
      expect(going.length).toBeGreaterThan(0);
      const width = runner.info.kv_heads * runner.info.head_dim;
      const at = (kv: KvData, l: number, i: number) => [...kv.layers[l]!.k.subarray(i * width, (i + 1) * width), ...kv.layers[l]!.v.subarray(i * width, (i + 1) * width)];
      // Layer 0's K/V depend on the token and position only; the first piece sees only itself.
      const contextual = (i: number) => i >= PIECES[1]!;
      for (const i of stopped) {
        for (let l = cutoffLayer; l < LAYERS; l++) expect(at(first.kv, l, i)).toEqual(at(stale, l, i));
        if (contextual(i)) for (let l = 1; l < cutoffLayer; l++) expect(maxDiff(at(first.kv, l, i), at(stale, l, i))).toBeGreaterThan(1e-4);
        // Its statistics rows are zeros from the cutoff on.
        const row = indices.indexOf(i);
        layers.forEach((layer, l) => {
          const mass = layer.mass.subarray(row * chunks, (row + 1) * chunks);
          if (l < cutoffLayer) expect(maxAbs(mass)).toBeGreaterThan(0.1);
          else expect(maxAbs(mass)).toBe(0);
        });
      }
      for (const i of going) if (contextual(i)) for (let l = 1; l < LAYERS; l++) expect(maxDiff(at(first.kv, l, i), at(stale, l, i))).toBeGreaterThan(1e-4);
      // The question reads the stopped tokens' stale K/V in the later layers: other logits.
      expect(maxDiff(first.result.logits[0]!, plain.result.logits[0]!)).toBeGreaterThan(1e-5);
      // What the tokens that went on computed after the cutoff is what they compute over the
      // cache the pass leaves: run again without early stop there, they give the same logits.
      const table = await fresh();
      const stoppedPass = await runner.forward(request([...bounds], table, window));
      expect(Array.from(stoppedPass.logits[0]!)).toEqual(Array.from(first.result.logits[0]!));
      const replayed = [...going, ...question];
      const replay = await runner.forward({ sequences: [{ table, tokens: replayed.map((i) => tokens[i]!), indices: replayed, logitRows: [replayed.length - 1] }] });
      expect(maxDiff(replay.logits[0]!, first.result.logits[0]!)).toBeLessThanOrEqual(1e-5);
      expect(maxDiff(replay.logits[0]!, plain.result.logits[0]!)).toBeGreaterThan(1e-5);
      await runner.free(table);
    });
  }

  test("tokens on unwritten slots run every layer, even in unfocused chunks", async () => {
    // THREE with window 2 focuses on chunk 2; leave piece 6..12 (chunk 1) out of the cache and
    // compute it whole in the call.
    const table = await runner.alloc(2);
    for (const [from, to] of [
      [0, 6],
      [13, 24],
    ] as const) {
      await runner.relocate({ srcTable: pristine, srcStart: from, count: to - from, dstTable: table, dstStart: from, positions: sequenceRange(from, to - from) });
    }
    const piece = range(6, 7);
    const indices = [...new Set([...recompute, ...piece])].sort((a, b) => a - b).concat(question);
    const result = await runner.forward(request(THREE, table, 2, indices));
    const { cutoffLayer, focused } = result.earlyStop![0]!;
    expect(cutoffLayer).toBeLessThan(LAYERS);
    expect(focused).toEqual([2]);
    const massOf = (l: number, i: number) => result.stats![0]![l]!.mass.subarray(indices.indexOf(i) * 4, indices.indexOf(i) * 4 + 4);
    for (const i of piece) for (let l = 0; l < LAYERS; l++) expect(maxAbs(massOf(l, i))).toBeGreaterThan(0.2);
    // Chunk 0's recomputed tokens (written before) did stop.
    for (const i of [1, 5]) expect(maxAbs(massOf(LAYERS - 1, i))).toBe(0);
    await runner.free(table);
  });

  test("two sequences: each stops on its own; the one that never stops matches running it alone", async () => {
    const a = await fresh();
    const b = await fresh();
    const alone = await fresh();
    const both = await runner.forward({ stats: true, chunkMass: true, earlyStop: true, sequences: [sequence(FOUR, a, 1), sequence(FOUR, b, LAYERS + 1)] });
    const single = await runner.forward(request(FOUR, alone, null));
    const oneAlone = await run(FOUR, 1);
    expect(both.earlyStop![0]).toEqual(oneAlone.result.earlyStop![0]!);
    expect(both.earlyStop![1]).toEqual({ cutoffLayer: LAYERS, focused: [0, 1, 2, 3] });
    expect(maxDiff(both.logits[0]!, oneAlone.result.logits[0]!)).toBeLessThanOrEqual(1e-5);
    expect(maxDiff(both.logits[1]!, single.logits[0]!)).toBeLessThanOrEqual(1e-5);
    both.stats![1]!.forEach((layer, l) => expect(maxDiff(layer.mass, single.stats![0]![l]!.mass)).toBeLessThanOrEqual(1e-5));
    both.stats![0]!.forEach((layer, l) => expect(maxDiff(layer.chunks, oneAlone.result.stats![0]![l]!.chunks)).toBeLessThanOrEqual(1e-5));
    await runner.free([...a, ...b, ...alone]);
  });

  test("refusals: logit rows that may stop, a zero window, a bad question chunk, a slot at another position", async () => {
    const table = await fresh();
    const before = await runner.export({ table, start: 0, count: CONTEXT });
    const refuse = (r: ForwardRequest, message: RegExp) =>
      expect(runner.forward(r)).rejects.toMatchObject({ status: Status.BAD_REQUEST, runnerMessage: expect.stringMatching(message) });
    const base = request(FOUR, table, 1);
    const seq = base.sequences[0]!;
    const indices = Array.from(seq.indices);
    await refuse({ ...base, sequences: [{ ...seq, logitRows: [0] }] }, /logit row 0 \(index 1\) lies in chunk 0, which may stop early/);
    await refuse({ ...base, sequences: [{ ...seq, earlyStop: { window: 0, questionChunk: 4 } }] }, /window must be at least 1/);
    await refuse({ ...base, sequences: [{ ...seq, earlyStop: { window: 1, questionChunk: 5 } }] }, /question chunk 5 is not one of its 5 chunks/);
    const shifted = indices.map((i) => (i === 7 ? 8 : i));
    await refuse({ ...base, sequences: [{ ...seq, indices: shifted, positions: indices.map((i) => (i === 7 ? 99 : i)) }] }, /token 2 may stop early but index 8 holds position 8, not its position 99/);
    expect(await runner.export({ table, start: 0, count: CONTEXT })).toEqual(before);
    await runner.free(table);
  });

  test("flags: unknown bits and bits 1-2 without bit 0 are refused; bit 3 (greedy rows) alone is fine; bit 4 (expert routes) needs experts, bit 5 (sliding indices) two KV groups", async () => {
    const proc = Bun.spawn([executable, "--model", model.path, "--blocks", "4", "--threads", "1"], { stdin: "pipe", stdout: "pipe", stderr: "ignore" });
    const reader = new FrameReader();
    const frames: { id: number; status: number; body: Uint8Array }[] = [];
    const pump = (async () => {
      for await (const chunk of proc.stdout) frames.push(...reader.push(chunk));
    })();
    const body = (flags: number) => new Uint8Array(new Uint32Array([flags, 0]).buffer);
    proc.stdin.write(encodeRequest(Op.FORWARD, 1, body(64)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 8, body(32)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 7, body(16)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 2, body(2)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 3, body(4)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 4, body(7)));
    proc.stdin.write(encodeRequest(Op.FORWARD, 6, body(8)));
    proc.stdin.write(encodeRequest(Op.SHUTDOWN, 5));
    await proc.stdin.flush();
    await proc.exited;
    await pump;
    const frame = (id: number) => frames.find((f) => f.id === id)!;
    const text = (id: number) => new TextDecoder().decode(frame(id).body);
    expect(frame(1).status).toBe(Status.BAD_REQUEST);
    expect(text(1)).toMatch(/unknown flags 64/);
    expect(frame(8).status).toBe(Status.BAD_REQUEST);
    expect(text(8)).toMatch(/bit 5 \(sliding indices\) needs a model with two KV groups/);
    expect(frame(7).status).toBe(Status.BAD_REQUEST);
    expect(text(7)).toMatch(/bit 4 \(expert routes\) needs a mixture-of-experts model/);
    expect(frame(2).status).toBe(Status.BAD_REQUEST);
    expect(text(2)).toMatch(/need bit 0/);
    expect(text(3)).toMatch(/need bit 0/);
    expect(frame(4).status).toBe(Status.OK); // no sequences: an empty answer
    expect(frame(4).body.length).toBe(0);
    expect(frame(6).status).toBe(Status.OK);
  });
});
