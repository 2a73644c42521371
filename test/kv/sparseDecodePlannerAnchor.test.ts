/**
 * SparseDecodePlanner with anchor "newest": pages are ranked against the keys given to
 * setNewestKeys, which needsNewestKeys asks for exactly before a step that selects pages.
 */
import { describe, expect, test } from "bun:test";
import { SparseDecodePlanner } from "../../src/kv/sparseDecodePlanner.ts";
import { SparseDecode } from "../../src/kv/sparseDecode.ts";
import { KvBlockTable, NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import type { KvRange, RunnerInfo } from "../../src/runner/runnerProtocol.ts";
import { Random } from "../kernels/helpers.ts";

const B = 4;
const DIM = 32;
const PAGES = 60;
const ANSWER_PAGE = 17;

/** Noise pages; the answer's page along `question`, the window's pages along `filler`. */
function scene(seed: number): { vectors: Float32Array; question: Float32Array } {
  const rng = new Random(seed);
  const direction = () => Float32Array.from({ length: DIM }, () => (rng.next() < 0.5 ? -1 : 1));
  const question = direction();
  const filler = direction();
  const vectors = Float32Array.from({ length: PAGES * DIM }, () => (rng.next() * 2 - 1) * 0.3);
  for (let i = 0; i < DIM; i++) vectors[ANSWER_PAGE * DIM + i]! += question[i]!;
  // The window (the last two pages) and a few pages elsewhere share the filler's direction.
  for (const p of [5, 30, 41, PAGES - 2, PAGES - 1]) for (let i = 0; i < DIM; i++) vectors[p * DIM + i]! += 2 * filler[i]!;
  return { vectors, question };
}

const full = Array.from({ length: PAGES + 2 }, (_, i) => 1000 + i);
const LENGTH = PAGES * B + 1;

function planner(anchor: "window" | "newest"): SparseDecodePlanner {
  // Uncentered: what the newest anchor is measured best with; 10% of 241 tokens = 3 semantic pages.
  return new SparseDecodePlanner({ blockSize: B, budgetFraction: 0.1, anchor, centered: false, trigger: { entropyThreshold: 1e9, varentropyThreshold: 1e9 } });
}

describe("SparseDecodePlanner: the newest tokens' keys as the anchor", () => {
  test("finds the page the question's keys point at, where the window's mean key does not", () => {
    const { vectors, question } = scene(3);
    const newest = planner("newest");
    newest.setPages(vectors, PAGES);
    expect(newest.needsNewestKeys(LENGTH)).toBe(true);
    newest.setNewestKeys(question);
    newest.tableFor(full, LENGTH);
    expect(newest.selection).toContain(ANSWER_PAGE);

    const window = planner("window");
    window.setPages(vectors, PAGES);
    expect(window.needsNewestKeys(LENGTH)).toBe(false);
    window.tableFor(full, LENGTH);
    expect(window.selection).not.toContain(ANSWER_PAGE);
    expect(window.selection!.length).toBe(newest.selection!.length);
  });

  test("asks for the keys only before a selection; before any it falls back to the window anchor", () => {
    const { vectors } = scene(4);
    const newest = planner("newest");
    newest.setPages(vectors, PAGES);
    newest.tableFor(full, LENGTH);
    const window = planner("window");
    window.setPages(vectors, PAGES);
    window.tableFor(full, LENGTH);
    expect(newest.selection).toEqual(window.selection!);
    // The next step reuses the selection: no keys wanted.
    expect(newest.needsNewestKeys(LENGTH + 1)).toBe(false);
    expect(newest.tableFor(full, LENGTH + 1).reconstructed).toBe(false);
    // A dense step wants none either.
    const dense = new SparseDecodePlanner({ blockSize: B, budgetFraction: 1, anchor: "newest" });
    dense.setPages(vectors, PAGES);
    expect(dense.needsNewestKeys(LENGTH)).toBe(false);
  });

  test("a selection without fresh keys uses the last ones given; setPages forgets them", () => {
    const { vectors, question } = scene(3);
    const newest = planner("newest");
    newest.setPages(vectors, PAGES);
    newest.setNewestKeys(question);
    newest.tableFor(full, LENGTH + 1);
    // A shorter sequence selects again: with the question's keys still.
    expect(newest.needsNewestKeys(LENGTH)).toBe(true);
    expect(newest.tableFor(full, LENGTH).reconstructed).toBe(true);
    expect(newest.selection).toContain(ANSWER_PAGE);
    newest.setPages(vectors, PAGES);
    newest.tableFor(full, LENGTH);
    expect(newest.selection).not.toContain(ANSWER_PAGE);
  });

  test("refuses keys of another width than the page vectors, and an unknown anchor", () => {
    const p = planner("newest");
    p.setPages(scene(5).vectors, PAGES);
    expect(() => p.setNewestKeys(new Float32Array(DIM + 1))).toThrow(`an anchor of ${DIM + 1} floats for page vectors of ${DIM}`);
    expect(() => new SparseDecodePlanner({ anchor: "middle" as "window" })).toThrow("anchor must be window or newest (got middle)");
  });
});

describe("SparseDecode: exports the newest tokens' keys when it selects", () => {
  const info = { layers: 2, kv_heads: 1, head_dim: 16, block_size: B } as RunnerInfo;
  const width = info.kv_heads * info.head_dim;

  function fakeRunner(vectors: Float32Array, question: Float32Array) {
    const exports: { start: number; count: number; groups?: number; slidingTable?: readonly number[] }[] = [];
    const scored: number[][] = [];
    return {
      exports,
      scored,
      async keySummary(blocks: readonly number[]) {
        const summaries = new Float32Array(blocks.length * DIM);
        blocks.forEach((block, i) => summaries.set(vectors.subarray((block - 1000) * DIM, (block - 1000 + 1) * DIM), i * DIM));
        return { counts: new Uint32Array(blocks.length).fill(B), summaries };
      },
      // Every token of a page has the page's mean key.
      async keyScores(blocks: readonly number[], anchor: Float32Array) {
        scored.push([...blocks]);
        const scores = new Float32Array(blocks.length * B);
        blocks.forEach((block, i) => {
          let dot = 0;
          for (let j = 0; j < DIM; j++) dot += anchor[j]! * vectors[(block - 1000) * DIM + j]!;
          scores.fill(dot, i * B, (i + 1) * B);
        });
        return scores;
      },
      async export(range: KvRange) {
        exports.push({ start: range.start, count: range.count, ...(range.groups !== undefined ? { groups: range.groups, slidingTable: range.slidingTable } : {}) });
        // Every token's keys are the question's (layer-major halves of the page vector).
        const layers = [0, 1].map((l) => ({ k: Float32Array.from({ length: range.count * width }, (_, j) => question[l * width + (j % width)]!), v: new Float32Array(range.count * width) }));
        return { positions: new Int32Array(range.count), layers };
      },
    };
  }

  test("the newest 3 entries at the first selection, none while the selection holds", async () => {
    const { vectors, question } = scene(6);
    const runner = fakeRunner(vectors, question);
    const sparse = new SparseDecode(info, 0.1, { entropyThreshold: 1e9, varentropyThreshold: 1e9 }, { kind: "newest", tokens: 3 });
    const table = new KvBlockTable(B);
    table.blocks.push(...full);
    table.length = PAGES * B + 1;
    await sparse.sync(runner, table);
    expect(runner.exports).toEqual([{ start: PAGES * B - 2, count: 3 }]);
    // The fine stage scored the tokens of the coarse candidates (the answer's page among them) once.
    expect(runner.scored.length).toBe(1);
    expect(runner.scored[0]).toContain(1000 + ANSWER_PAGE);
    const entry = sparse.decodeEntry(full, table.length);
    expect(entry.table).toContain(1000 + ANSWER_PAGE);
    table.length++;
    await sparse.sync(runner, table);
    expect(runner.exports.length).toBe(1);
    expect(runner.scored.length).toBe(1);
    // The window anchor never exports.
    const window = new SparseDecode(info, 0.1, undefined, { kind: "window", tokens: 1 });
    const other = fakeRunner(vectors, question);
    await window.sync(other, table);
    window.decodeEntry(full, table.length);
    expect(other.exports).toEqual([]);
  });

  test("two KV groups: the anchor's EXPORT reads the full group only (groups 1, no sliding block needed)", async () => {
    const { vectors, question } = scene(7);
    const runner = fakeRunner(vectors, question);
    const twoGroups = { ...info, kv_groups: [{ kind: "full_attention", layers: [1] }, { kind: "sliding_window", layers: [0], sliding_window: 8 }] } as RunnerInfo;
    const sparse = new SparseDecode(twoGroups, 0.1, { entropyThreshold: 1e9, varentropyThreshold: 1e9 }, { kind: "newest", tokens: 2 });
    const table = new KvBlockTable(B);
    table.blocks.push(...full);
    table.length = PAGES * B + 1;
    await sparse.sync(runner, table);
    expect(runner.exports).toEqual([{ start: PAGES * B - 1, count: 2, groups: 1, slidingTable: full.map(() => NO_BLOCK) }]);
    expect(sparse.decodeEntry(full, table.length).table).toContain(1000 + ANSWER_PAGE);
  });
});
