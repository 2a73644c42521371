import { describe, expect, test } from "bun:test";
import { SparseDecodePlanner, type SparseDecodePlannerOptions } from "../../src/kv/sparseDecodePlanner.ts";
import { Random } from "../kernels/helpers.ts";

const B = 4;
const DIM = 32;

/** Page vectors: noise, with `planted` pages and the last `onTopic` pages along one direction. */
function pageVectors(rng: Random, count: number, planted: number[], onTopic: number[]): { vectors: Float32Array; topic: Float32Array } {
  const topic = Float32Array.from({ length: DIM }, () => (rng.next() < 0.5 ? -1 : 1));
  const vectors = Float32Array.from({ length: count * DIM }, () => (rng.next() * 2 - 1) * 0.3);
  for (const p of [...planted, ...onTopic]) for (let i = 0; i < DIM; i++) vectors[p * DIM + i]! += topic[i]!;
  return { vectors, topic };
}

/** Distinct, scrambled block ids, `extra` blocks more than the pages. */
const blockTable = (pages: number, extra = 1) => Array.from({ length: pages + extra }, (_, i) => 10_000 + ((i * 7919) % 100_003));

/**
 * The original sequence indices the new token attends to through the compacted table: compacted
 * entry i is entry i % B of block table[floor(i / B)].
 */
function attended(table: number[], index: number, full: readonly number[]): number[] {
  const pageOf = new Map(full.map((block, page) => [block, page]));
  const out: number[] = [];
  for (let i = 0; i <= index; i++) out.push(pageOf.get(table[Math.floor(i / B)]!)! * B + (i % B));
  return out;
}

function planner(options: SparseDecodePlannerOptions = {}): SparseDecodePlanner {
  return new SparseDecodePlanner({ blockSize: B, budgetFraction: 0.05, ...options });
}

describe("SparseDecodePlanner: dense decode", () => {
  test("returns the full table unchanged when the budget covers the context", () => {
    const rng = new Random(1);
    const { vectors } = pageVectors(rng, 50, [], []);
    const full = blockTable(51, 2);
    const p = planner({ budgetFraction: 1 });
    p.setPages(vectors, 50);
    const step = p.tableFor(full, 50 * B + 1);
    expect(step).toEqual({ table: full, index: 50 * B + 1, pagesSelected: 51, reconstructed: false });
    expect(step.table).not.toBe(full);
    // A short context: 1 sink + 2 window pages are all its pages.
    const small = planner({ budgetFraction: 0.01 });
    small.setPages(vectors.subarray(0, 2 * DIM), 2);
    expect(small.tableFor(full, 2 * B + 2)).toEqual({ table: full, index: 2 * B + 2, pagesSelected: 3, reconstructed: false });
    expect(small.selection).toBeUndefined();
    // The same 5% budget over 51 pages is sparse: 10 tokens = 2 pages < 1 sink + 2 window.
    const exact = planner({ budgetFraction: 0.05 });
    exact.setPages(vectors.subarray(0, 50 * DIM), 50);
    expect(exact.tableFor(full, 50 * B + 1).reconstructed).toBe(true);
    // Sinks and window alone cover the 5 pages.
    const edge = planner({ budgetFraction: 0, sinkPages: 1, windowPages: 4 });
    edge.setPages(vectors.subarray(0, 4 * DIM), 4);
    expect(edge.tableFor(full, 4 * B + 3).table).toEqual(full);
    // One page more and it is sparse: pages 0 and 2..5.
    edge.appendPage(vectors.subarray(4 * DIM, 5 * DIM));
    const sparse = edge.tableFor(full, 5 * B);
    expect(sparse.table).toEqual([0, 2, 3, 4, 5].map((page) => full[page]!));
    expect(sparse.index).toBe(4 * B);
  });
});

describe("SparseDecodePlanner: table compaction", () => {
  const rng = new Random(2);
  const count = 200;
  const planted = [40, 41, 130];
  const { vectors } = pageVectors(rng, count, planted, [count - 1]);
  const full = blockTable(count + 1);
  // 5% of ~800 tokens = 41 tokens = 10 pages: 1 sink + 2 window + 7 semantic.

  for (const [name, offset] of [
    ["last page partial", 2],
    ["the new token starts a fresh page (previous pages exactly full)", 0],
    ["the new token fills the last page exactly", B - 1],
  ] as const) {
    test(`${name}: selected full pages in order, then the last page; the new token's index`, () => {
      const p = planner();
      p.setPages(vectors, count);
      const length = count * B + offset;
      const step = p.tableFor(full, length);
      expect(step.reconstructed).toBe(true);
      expect(p.selection!.length).toBe(7);
      for (const page of planted) expect(p.selection).toContain(page);
      const pages = [0, ...p.selection!, count - 1, count];
      expect(step.pagesSelected).toBe(pages.length);
      expect(step.table).toEqual(pages.map((page) => full[page]!));
      expect(step.table.at(-1)).toBe(full[count]!);
      expect(step.index).toBe((pages.length - 1) * B + offset);
      // Attends to every entry of the kept full pages and the last page up to the new token.
      const expected = pages.flatMap((page) => Array.from({ length: B }, (_, i) => page * B + i)).filter((s) => s <= length);
      expect(attended(step.table, step.index, full)).toEqual(expected);
      expect(attended(step.table, step.index, full).at(-1)).toBe(length);
    });
  }

  test("full pages without a vector yet are kept", () => {
    const p = planner();
    p.setPages(vectors.subarray(0, 195 * DIM), 195);
    const step = p.tableFor(full, count * B + 1);
    const pages = step.table.map((block) => full.indexOf(block));
    for (const page of [195, 196, 197, 198, 199, 200]) expect(pages).toContain(page);
    expect(pages).toEqual([...new Set(pages)].sort((a, b) => a - b));
    // Reused while their vectors arrive: still kept until the next reconstruction.
    for (let page = 195; page < 200; page++) p.appendPage(vectors.subarray(page * DIM, (page + 1) * DIM));
    const next = p.tableFor(full, count * B + 2);
    expect(next.reconstructed).toBe(false);
    expect(next.table).toEqual(step.table);
  });

  test("no vectors at all: every page is kept", () => {
    const p = planner();
    p.setPages(new Float32Array(0), 0);
    const step = p.tableFor(full, count * B + 1);
    expect(step.table).toEqual(full.slice(0, count + 1));
    expect(step.index).toBe(count * B + 1);
  });
});

describe("SparseDecodePlanner: when the selection is recomputed", () => {
  /** A planner after a 120-page prefill, plus the vectors of pages generated later. */
  function setup(options: SparseDecodePlannerOptions = {}) {
    const rng = new Random(3);
    const total = 160;
    const { vectors } = pageVectors(rng, total, [30, 77], [119]);
    const p = planner(options);
    p.setPages(vectors.subarray(0, 120 * DIM), 120);
    const append = (page: number) => p.appendPage(vectors.subarray(page * DIM, (page + 1) * DIM));
    return { p, full: blockTable(total + 1), append };
  }
  const pagesOf = (table: number[], full: number[]) => table.map((block) => full.indexOf(block));

  test("first call reconstructs; steady decoding reuses the selection as the window slides", () => {
    const { p, full, append } = setup();
    let length = 120 * B;
    const first = p.tableFor(full, length);
    expect(first.reconstructed).toBe(true);
    const semantic = [...p.selection!];
    expect(semantic).toContain(30);
    expect(semantic).toContain(77);
    for (let step = 1; step < 12 * B; step++) {
      length++;
      if (length % B === 0) append(length / B - 1); // the page before the new token's just filled
      const next = p.tableFor(full, length);
      expect(next.reconstructed).toBe(false);
      const lastPage = Math.floor(length / B);
      const expected = [...new Set([0, ...semantic, lastPage - 1, lastPage])].sort((a, b) => a - b);
      expect(pagesOf(next.table, full)).toEqual(expected);
      expect(next.index).toBe((expected.length - 1) * B + (length % B));
    }
    expect(p.reconstructions).toBe(1);
    expect(p.selection).toEqual(semantic);
  });

  test("a jump of several pages (window slid onto pages the last table lacked) reconstructs", () => {
    const { p, full, append } = setup();
    p.tableFor(full, 120 * B + 1);
    for (let page = 120; page < 124; page++) append(page);
    const jumped = p.tableFor(full, 124 * B + 1);
    expect(jumped.reconstructed).toBe(true);
    expect(p.tableFor(full, 124 * B + 2).reconstructed).toBe(false);
    // Shorter than before (the sequence was cut back): reconstructs too.
    expect(p.tableFor(full, 124 * B).reconstructed).toBe(true);
  });

  test("the uncertainty trigger reconstructs once, then needs fresh evidence", () => {
    const { p, full } = setup({ trigger: { windowSteps: 4 } });
    let length = 120 * B;
    expect(p.tableFor(full, length).reconstructed).toBe(true);
    const confident = new Float32Array(1000);
    confident[0] = 40;
    const uncertain = new Float32Array(1000);
    for (let i = 0; i < 4; i++) {
      p.observeLogits(confident);
      expect(p.tableFor(full, ++length).reconstructed).toBe(false);
    }
    for (let i = 0; i < 3; i++) {
      p.observeLogits(uncertain);
      expect(p.tableFor(full, ++length).reconstructed).toBe(i === 1); // mean of 4 steps > 3 nats from the 2nd
    }
    expect(p.reconstructions).toBe(2);
    expect(p.trigger.steps).toBe(1);
  });

  test("setPages starts over", () => {
    const { p, full } = setup();
    p.tableFor(full, 120 * B + 1);
    p.setPages(new Float32Array(10 * DIM).fill(1), 10);
    expect(p.selection).toBeUndefined();
    expect(p.pageCount).toBe(10);
  });
});

describe("SparseDecodePlanner: arguments", () => {
  test("rejects bad options and tables too short for the index", () => {
    expect(() => new SparseDecodePlanner({ windowPages: 0 })).toThrow(RangeError);
    expect(() => new SparseDecodePlanner({ blockSize: 0 })).toThrow(RangeError);
    expect(() => new SparseDecodePlanner({ budgetFraction: -1 })).toThrow(RangeError);
    expect(() => new SparseDecodePlanner({ ratios: { grid: 2, chunk: 0.5 } })).toThrow(RangeError);
    expect(() => new SparseDecodePlanner({ chunkPages: 0 })).toThrow(RangeError);
    const p = planner();
    expect(() => p.tableFor([1, 2], 2 * B)).toThrow(RangeError);
    expect(() => p.tableFor([1, 2], -1)).toThrow(RangeError);
    expect(() => p.setPages(new Float32Array(7), 2)).toThrow(RangeError);
  });

  test("appendPage without setPages starts the hierarchy", () => {
    const p = planner();
    p.appendPage(new Float32Array(DIM).fill(0.5));
    expect(p.pageCount).toBe(1);
  });
});
