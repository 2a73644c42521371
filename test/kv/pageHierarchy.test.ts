import { describe, expect, test } from "bun:test";
import { PageHierarchy } from "../../src/kv/pageHierarchy.ts";
import { Random } from "../kernels/helpers.ts";

function randomVectors(rng: Random, count: number, dim: number): Float32Array {
  const v = new Float32Array(count * dim);
  for (let i = 0; i < v.length; i++) v[i] = rng.next() * 2 - 1;
  return v;
}

/** Every node vector, by level, as plain arrays. */
function snapshot(h: PageHierarchy): { pages: number[][]; chunks: number[][]; grids: number[][] } {
  return {
    pages: Array.from({ length: h.pageCount }, (_, i) => Array.from(h.pageVector(i))),
    chunks: Array.from({ length: h.chunkCount }, (_, i) => Array.from(h.chunkVector(i))),
    grids: Array.from({ length: h.gridCount }, (_, i) => Array.from(h.gridVector(i))),
  };
}

describe("PageHierarchy", () => {
  test("chunk and grid vectors are centroids (eq. 2), incomplete last chunk/grid included", () => {
    // dim 2, N_c = 2, N_g = 2; 5 pages -> chunks {0,1} {2,3} {4}; grids {c0,c1} {c2}.
    const pages = [
      [1, 0],
      [3, 0],
      [0, 2],
      [0, 6],
      [5, 5],
    ];
    const h = PageHierarchy.fromPages(2, pages.flat(), 5, { chunkPages: 2, gridChunks: 2 });
    expect(h.pageCount).toBe(5);
    expect(h.chunkCount).toBe(3);
    expect(h.gridCount).toBe(2);
    expect(h.nodeCount).toBe(10);
    const s = snapshot(h);
    expect(s.pages).toEqual(pages);
    expect(s.chunks).toEqual([
      [2, 0],
      [0, 4],
      [5, 5],
    ]);
    expect(s.grids).toEqual([
      [1, 2],
      [5, 5],
    ]);
    expect(h.chunkOf(3)).toBe(1);
    expect(h.gridOf(2)).toBe(1);
    expect(h.pagesOfChunk(2)).toEqual([4, 5]);
    expect(h.chunksOfGrid(0)).toEqual([0, 2]);
    expect(h.chunksOfGrid(1)).toEqual([2, 3]);
  });

  test("grown page by page equals rebuilt from all pages (bitwise), through reallocations", () => {
    const rng = new Random(7);
    for (const [dim, chunkPages, gridChunks] of [
      [5, 4, 3],
      [16, 1, 1],
      [3, 3, 4],
      [33, 4, 4],
    ] as const) {
      const count = 61;
      const vectors = randomVectors(rng, count, dim);
      const grown = new PageHierarchy(dim, { chunkPages, gridChunks, pageCapacity: 1 });
      for (let p = 0; p < count; p++) {
        grown.appendPage(vectors.subarray(p * dim, (p + 1) * dim));
        if (p % 7 === 0 || p === count - 1) {
          const rebuilt = PageHierarchy.fromPages(dim, vectors.subarray(0, (p + 1) * dim), p + 1, { chunkPages, gridChunks });
          expect(snapshot(grown)).toEqual(snapshot(rebuilt));
        }
      }
      // appendPages in uneven batches gives the same again.
      const batched = new PageHierarchy(dim, { chunkPages, gridChunks, pageCapacity: 2 });
      let at = 0;
      for (const n of [0, 3, 1, 10, 47]) {
        batched.appendPages(vectors.subarray(at * dim, (at + n) * dim), n);
        at += n;
      }
      expect(snapshot(batched)).toEqual(snapshot(grown));
    }
  });

  test("centroids match an f64 reference", () => {
    const rng = new Random(11);
    const dim = 8;
    const count = 45;
    const v = randomVectors(rng, count, dim);
    const h = PageHierarchy.fromPages(dim, v, count, { chunkPages: 4, gridChunks: 3 });
    const chunkRef: number[][] = [];
    for (let c = 0; c < h.chunkCount; c++) {
      const members: number[] = [];
      for (let p = c * 4; p < Math.min(count, c * 4 + 4); p++) members.push(p);
      chunkRef.push(Array.from({ length: dim }, (_, i) => members.reduce((s, p) => s + v[p * dim + i]!, 0) / members.length));
    }
    for (let c = 0; c < h.chunkCount; c++) {
      for (let i = 0; i < dim; i++) expect(h.chunkVector(c)[i]!).toBeCloseTo(chunkRef[c]![i]!, 6);
    }
    for (let g = 0; g < h.gridCount; g++) {
      const members: number[] = [];
      for (let c = g * 3; c < Math.min(h.chunkCount, g * 3 + 3); c++) members.push(c);
      for (let i = 0; i < dim; i++) {
        const ref = members.reduce((s, c) => s + chunkRef[c]![i]!, 0) / members.length;
        expect(h.gridVector(g)[i]!).toBeCloseTo(ref, 6);
      }
    }
  });

  test("score: one pass over the coalesced matrix, laid out [grids | chunks | pages]", () => {
    const rng = new Random(3);
    const dim = 13;
    const h = new PageHierarchy(dim, { chunkPages: 3, gridChunks: 2, pageCapacity: 4 });
    h.appendPages(randomVectors(rng, 20, dim), 20);
    const anchor = randomVectors(rng, 1, dim);
    const scores = h.score(anchor);
    expect(scores.all.length).toBe(h.nodeCount);
    expect(scores.grid.length).toBe(h.gridCount);
    expect(scores.chunk.length).toBe(h.chunkCount);
    expect(scores.page.length).toBe(h.pageCount);
    const dot = (v: Float32Array) => v.reduce((s, x, i) => s + x * anchor[i]!, 0);
    for (let g = 0; g < h.gridCount; g++) expect(scores.all[g]!).toBeCloseTo(dot(h.gridVector(g)), 5);
    for (let c = 0; c < h.chunkCount; c++) expect(scores.all[h.gridCount + c]!).toBeCloseTo(dot(h.chunkVector(c)), 5);
    for (let p = 0; p < h.pageCount; p++) expect(scores.page[p]!).toBeCloseTo(dot(h.pageVector(p)), 5);
    // The node rows really are in one array, at the level offsets.
    const row = (r: number) => h.data.subarray(r * dim, (r + 1) * dim);
    expect(row(h.pageRowStart + 5)).toEqual(h.pageVector(5));
    expect(row(h.chunkRowStart + 2)).toEqual(h.chunkVector(2));
    expect(row(h.gridRowStart + 1)).toEqual(h.gridVector(1));
    // Into a caller's buffer.
    const out = new Float32Array(100);
    expect(Array.from(h.score(anchor, out).all)).toEqual(Array.from(scores.all));
  });

  test("rejects bad input", () => {
    const h = new PageHierarchy(4);
    expect(() => h.appendPage([1, 2, 3])).toThrow(RangeError);
    expect(() => h.appendPage([1, 2, NaN, 4])).toThrow(RangeError);
    expect(h.pageCount).toBe(0);
    expect(() => h.score([1, 2])).toThrow(RangeError);
    expect(() => h.pageVector(0)).toThrow(RangeError);
    expect(() => new PageHierarchy(0)).toThrow(RangeError);
    expect(() => new PageHierarchy(4, { chunkPages: 0 })).toThrow(RangeError);
    expect(() => PageHierarchy.fromPages(4, new Float32Array(7), 2)).toThrow(RangeError);
    expect(PageHierarchy.fromPages(4, [], 0).nodeCount).toBe(0);
  });
});
