import { describe, expect, test } from "bun:test";
import { type IndexKernels, tsKernels, wasmKernels } from "../../src/kernels/index.ts";
import { PageHierarchy } from "../../src/kv/pageHierarchy.ts";
import {
  AGGRESSIVE_RATIOS,
  centeredAnchor,
  budgetToPages,
  retainedCount,
  selectPages,
  type SelectionRatios,
  windowAnchor,
  withKeptPages,
} from "../../src/kv/sparsePageSelection.ts";
import { Random } from "../kernels/helpers.ts";

const both: IndexKernels[] = [tsKernels, wasmKernels()];

function noise(rng: Random, count: number, dim: number, scale: number): Float32Array {
  const v = new Float32Array(count * dim);
  for (let i = 0; i < v.length; i++) v[i] = (rng.next() * 2 - 1) * scale;
  return v;
}

/** Independent reference of the cascade: scores by plain dot products, ranks by sort. */
function referenceCascade(
  h: PageHierarchy,
  anchor: Float32Array,
  budget: number,
  ratios: SelectionRatios,
  sinkPages: number,
  windowPages: number,
  totalPages: number,
): { grids: number[]; chunks: number[]; semantic: number[] } {
  const dot = (v: Float32Array) => Math.fround(v.reduce((s, x, i) => s + x * anchor[i]!, 0));
  const top = (items: number[], score: (i: number) => number, k: number) =>
    items
      .map((i) => [i, score(i)] as const)
      .sort((a, b) => b[1] - a[1] || a[0] - b[0])
      .slice(0, k)
      .map(([i]) => i)
      .sort((a, b) => a - b);
  const candidates: number[] = [];
  for (let p = Math.min(sinkPages, totalPages); p < Math.min(h.pageCount, totalPages - windowPages); p++) candidates.push(p);
  const gridsWith = [...new Set(candidates.map((p) => h.gridOf(h.chunkOf(p))))];
  const grids = top(gridsWith, (g) => dot(h.gridVector(g)), retainedCount(ratios.grid, gridsWith.length));
  const chunksWith = [...new Set(candidates.map((p) => h.chunkOf(p)))].filter((c) => grids.includes(h.gridOf(c)));
  const chunks = top(chunksWith, (c) => dot(h.chunkVector(c)), retainedCount(ratios.chunk, chunksWith.length));
  const pages = candidates.filter((p) => chunks.includes(h.chunkOf(p)));
  return { grids, chunks, semantic: top(pages, (p) => dot(h.pageVector(p)), budget) };
}

describe("budgetToPages", () => {
  test("1% of a 32K context: 328 tokens = 20 pages = 1 sink + 2 window + 17 semantic", () => {
    expect(budgetToPages(32768, 0.01, 16, 1, 2)).toBe(17);
    expect(budgetToPages(32768, 0.01)).toBe(17);
    expect(budgetToPages(32768, 0.01, 16, 0, 0)).toBe(20);
    expect(budgetToPages(32768, 0.01, 32, 1, 2)).toBe(7);
  });
  test("small budgets give 0 semantic pages; >= 100% gives every page", () => {
    expect(budgetToPages(1000, 0.01)).toBe(0);
    expect(budgetToPages(0, 0.5)).toBe(0);
    expect(budgetToPages(33, 1)).toBe(3);
    expect(budgetToPages(33, 2)).toBe(3);
    expect(budgetToPages(1600, 0.07, 16, 0, 0)).toBe(7);
    expect(() => budgetToPages(100, -0.1)).toThrow(RangeError);
    expect(() => budgetToPages(100, 0.1, 0)).toThrow(RangeError);
  });
});

describe("retainedCount", () => {
  test("ceil of the ratio, at least one when the ratio is positive", () => {
    expect(retainedCount(0.5, 10)).toBe(5);
    expect(retainedCount(0.2, 26)).toBe(6);
    expect(retainedCount(0.01, 3)).toBe(1);
    expect(retainedCount(0, 3)).toBe(0);
    expect(retainedCount(1, 3)).toBe(3);
    expect(retainedCount(0.5, 0)).toBe(0);
  });
});

describe("windowAnchor", () => {
  test("eq. 3: mean of the window's full pages; the last page when the window is only the partial page", () => {
    const h = PageHierarchy.fromPages(2, [1, 0, 0, 1, 2, 2, 4, 0], 4);
    expect(Array.from(windowAnchor(h, 3)!)).toEqual([3, 1]); // pages 2, 3 (+ partial page 4)
    expect(Array.from(windowAnchor(h, 2)!)).toEqual([4, 0]);
    expect(Array.from(windowAnchor(h, 1)!)).toEqual([4, 0]);
    expect(Array.from(windowAnchor(h, 3, 4)!)).toEqual([2, 1]); // no partial page: pages 1..3
    expect(windowAnchor(new PageHierarchy(2), 2)).toBeUndefined();
  });
});

describe("selectPages", () => {
  for (const kernels of both) {
    test(`${kernels.name}: picks the planted pages that align with the anchor`, () => {
      const rng = new Random(1);
      const dim = 64;
      const count = 200;
      const topic = new Float32Array(dim);
      for (let i = 0; i < dim; i++) topic[i] = rng.next() < 0.5 ? -1 : 1;
      const vectors = noise(rng, count, dim, 0.3);
      const planted = [50, 51, 120];
      for (const p of [...planted, count - 1]) for (let i = 0; i < dim; i++) vectors[p * dim + i]! += topic[i]!;
      const h = PageHierarchy.fromPages(dim, vectors, count); // N_c = 4, N_g = 4
      // The window is the last full page (199) and the partial page (200): the anchor is on topic.
      const selection = selectPages(h, { pageBudget: 3, kernels });
      expect(selection.semantic).toEqual(planted);
      expect(selection.pages).toEqual([0, ...planted, 199, 200]);
      expect(selection.grids).toContain(h.gridOf(h.chunkOf(50)));
      expect(selection.grids).toContain(h.gridOf(h.chunkOf(120)));
      expect(selection.chunks).toContain(12);
      expect(selection.chunks).toContain(30);
      // A larger budget still ranks the planted pages first and stays within the active chunks.
      const wider = selectPages(h, { pageBudget: 8, kernels });
      for (const p of planted) expect(wider.semantic).toContain(p);
      for (const p of wider.semantic) expect(wider.chunks).toContain(h.chunkOf(p));
      // An explicit anchor off topic finds other pages.
      const other = selectPages(h, { pageBudget: 3, kernels, anchor: h.pageVector(10) });
      expect(other.semantic).toContain(10);
    });

    test(`${kernels.name}: the cascade keeps ceil(rho) grids and chunks and at most the budget, as the reference`, () => {
      const rng = new Random(42);
      for (let trial = 0; trial < 60; trial++) {
        const dim = rng.int(1, 24);
        const count = rng.int(0, 150);
        const chunkPages = rng.int(1, 5);
        const gridChunks = rng.int(1, 5);
        const h = PageHierarchy.fromPages(dim, noise(rng, count, dim, 1), count, { chunkPages, gridChunks });
        const ratios = { grid: rng.pick([0, 0.1, 0.25, 0.5, 1]), chunk: rng.pick([0, 0.2, 0.5, 0.9, 1]) };
        const pageBudget = rng.int(0, 20);
        const sinkPages = rng.int(0, 3);
        const windowPages = rng.int(0, 4);
        const totalPages = count + rng.int(0, 2);
        const anchor = noise(rng, 1, dim, 1);
        const got = selectPages(h, { pageBudget, ratios, sinkPages, windowPages, totalPages, anchor, kernels });
        const ref = referenceCascade(h, anchor, pageBudget, ratios, sinkPages, windowPages, totalPages);
        if (pageBudget === 0) {
          expect(got.semantic).toEqual([]);
        } else {
          expect(got.grids).toEqual(ref.grids);
          expect(got.chunks).toEqual(ref.chunks);
          expect(got.semantic).toEqual(ref.semantic);
        }
        expect(got.semantic.length).toBeLessThanOrEqual(pageBudget);
        for (const c of got.chunks) expect(got.grids).toContain(h.gridOf(c));
        for (const p of got.semantic) {
          expect(got.chunks).toContain(h.chunkOf(p));
          expect(p).toBeGreaterThanOrEqual(sinkPages);
          expect(p).toBeLessThan(totalPages - windowPages);
        }
      }
    });

    test(`${kernels.name}: sinks and window always present; output sorted, without duplicates`, () => {
      const rng = new Random(5);
      for (let trial = 0; trial < 60; trial++) {
        const dim = rng.int(1, 8);
        const count = rng.int(0, 80);
        const h = PageHierarchy.fromPages(dim, noise(rng, count, dim, 1), count, { chunkPages: rng.int(1, 4), gridChunks: rng.int(1, 4) });
        const sinkPages = rng.int(0, 3);
        const windowPages = rng.int(0, 4);
        // Up to 3 full pages without a vector yet between the hierarchy and the partial page.
        const totalPages = count + 1 + rng.int(0, 3);
        const pageBudget = rng.int(0, 30);
        const { pages, semantic } = selectPages(h, { pageBudget, sinkPages, windowPages, totalPages, kernels });
        for (let p = 0; p < Math.min(sinkPages, totalPages); p++) expect(pages).toContain(p);
        for (let p = Math.max(0, totalPages - windowPages); p < totalPages; p++) expect(pages).toContain(p);
        for (let p = count; p < totalPages; p++) expect(pages).toContain(p); // unscored pages kept
        for (let i = 1; i < pages.length; i++) expect(pages[i]!).toBeGreaterThan(pages[i - 1]!);
        for (const p of semantic) expect(pages).toContain(p);
        expect(pages.every((p) => p >= 0 && p < totalPages)).toBe(true);
        const kept = new Set([...Array(Math.min(sinkPages, totalPages)).keys()]);
        for (let p = Math.max(0, totalPages - windowPages); p < totalPages; p++) kept.add(p);
        for (let p = count; p < totalPages; p++) kept.add(p);
        expect(pages.length).toBe(kept.size + semantic.filter((p) => !kept.has(p)).length);
      }
    });
  }

  test("ratio 0 or budget 0 leaves only the always-kept pages; ratios 1 with a big budget keep every page", () => {
    const rng = new Random(9);
    const h = PageHierarchy.fromPages(4, noise(rng, 40, 4, 1), 40);
    expect(selectPages(h, { pageBudget: 10, ratios: { grid: 0, chunk: 1 } }).pages).toEqual([0, 39, 40]);
    expect(selectPages(h, { pageBudget: 10, ratios: { grid: 1, chunk: 0 } }).pages).toEqual([0, 39, 40]);
    expect(selectPages(h, { pageBudget: 0, ratios: { grid: 1, chunk: 1 } }).pages).toEqual([0, 39, 40]);
    const all = selectPages(h, { pageBudget: 100, ratios: { grid: 1, chunk: 1 } });
    expect(all.pages).toEqual([...Array(41).keys()]);
    expect(all.semantic.length).toBe(38); // pages 1..38
    expect(() => selectPages(h, { pageBudget: 1, ratios: { grid: 1.5, chunk: 1 } })).toThrow(RangeError);
    expect(() => selectPages(h, { pageBudget: -1 })).toThrow(RangeError);
  });
});

describe("centered anchor", () => {
  // dim 3: every page shares a large common component on axis 0; page p's own content is on axis 1
  // (p 4 only) or axis 2 (the others, weakly). Page 7 carries a larger common component.
  function pages(): PageHierarchy {
    const rows: number[] = [];
    for (let p = 0; p < 12; p++) rows.push(p === 7 ? 12 : 10, p === 4 ? 1 : 0, p === 4 ? 0 : 0.2);
    return PageHierarchy.fromPages(3, Float32Array.from(rows), 12);
  }

  test("the anchor minus the mean page vector", () => {
    const h = pages();
    const a = centeredAnchor(h, [10, 1, 0]);
    expect(a[0]).toBeCloseTo(10 - 122 / 12, 5);
    expect(a[1]).toBeCloseTo(1 - 1 / 12, 5);
    expect(a[2]).toBeCloseTo(0 - 2.2 / 12, 5);
  });

  test("uncentered, the page with the biggest common component wins; centered, the one that shares the anchor's content", () => {
    const h = pages();
    const options = { anchor: [10, 1, 0], pageBudget: 1, ratios: { grid: 1, chunk: 1 }, sinkPages: 1, windowPages: 1, totalPages: 12 };
    expect(selectPages(h, options).semantic).toEqual([7]);
    expect(selectPages(h, { ...options, centered: true }).semantic).toEqual([4]);
  });
});

describe("default ratios: no cascade", () => {
  test("the best page is kept even when its chunk's mean scores low; the paper's aggressive ratios drop it", () => {
    // 32 pages in 8 chunks of 4. Page 5 is the one the anchor wants; its chunk-mates point away.
    const rows: number[] = [];
    for (let p = 0; p < 32; p++) rows.push(1, p === 5 ? 5 : p >= 4 && p < 8 ? -3 : 1);
    const h = PageHierarchy.fromPages(2, Float32Array.from(rows), 32);
    const options = { anchor: [0, 1], pageBudget: 1, sinkPages: 1, windowPages: 1, totalPages: 32 };
    expect(selectPages(h, options).semantic).toEqual([5]);
    expect(selectPages(h, { ...options, ratios: AGGRESSIVE_RATIOS }).semantic).not.toContain(5);
  });
});

describe("withKeptPages", () => {
  test("union with sinks, unscored pages and window", () => {
    expect(withKeptPages([7, 3, 3], 12, 9, 1, 2)).toEqual([0, 3, 7, 9, 10, 11]);
    expect(withKeptPages([], 2, 1, 1, 2)).toEqual([0, 1]);
    expect(() => withKeptPages([12], 12, 12)).toThrow(RangeError);
  });
});
