/**
 * CHESS's coarse-to-fine page selection (paper §3.2, Algorithm 1) over a PageHierarchy.
 *
 * Every node is scored against a query anchor in one pass (eq. 4, S(u) = v_anchor · v_u). Then a
 * cascade: the top ρ_g of the grids; among the chunks of those grids, the top ρ_c; among the
 * pages of those chunks, the top `pageBudget`. The paper's quantile thresholds are replaced by
 * exact top-k (the index kernels' `topK`: score descending, ties to the lower index), so a level
 * keeps exactly ceil(ρ · candidates) nodes (at least one when ρ > 0).
 *
 * The attention sinks (the first `sinkPages` pages) and the local window (the last
 * `windowPages` pages of the sequence, its current partial page included) are always kept and do
 * not count against the budget. They are not candidates either, so the budget goes to other
 * pages, and a chunk or grid with no candidate page left is not ranked (it could only waste a
 * slot). Full pages the hierarchy has no vector for yet (between its last page and the window)
 * cannot be scored and are kept too.
 */
import { type IndexKernels, kernels as defaultKernels } from "../kernels/index.ts";
import type { PageHierarchy } from "./pageHierarchy.ts";

/** Retention ratios of the cascade: fractions of the candidate grids and chunks kept. */
export interface SelectionRatios {
  /** ρ_g, in [0, 1]. */
  grid: number;
  /** ρ_c, in [0, 1]. */
  chunk: number;
}

/** The paper's "Aggressive" ratios (0.5, 0.2; its page ratio 0.1 becomes the page budget). */
export const AGGRESSIVE_RATIOS: Readonly<SelectionRatios> = Object.freeze({ grid: 0.5, chunk: 0.2 });

/**
 * The default: keep every grid and chunk, so pages are ranked on their own scores. All levels
 * are scored in one pass anyway, so the cascade saves no work here; what it does is drop pages
 * whose chunk's mean key scores low, and with the paper's ratios that dropped the answer's page
 * in about two thirds of the quality model's retrieval questions (at a 10% budget: 36% right
 * with them, 79% without; BENCHMARKS.md, issue 12).
 */
export const DEFAULT_RATIOS: Readonly<SelectionRatios> = Object.freeze({ grid: 1, chunk: 1 });
export const DEFAULT_SINK_PAGES = 1;
export const DEFAULT_WINDOW_PAGES = 2;

export interface SelectPagesOptions {
  /** The query anchor (dim floats); default `windowAnchor(hierarchy, windowPages, totalPages)`. */
  anchor?: ArrayLike<number>;
  /**
   * Subtract the mean of all page vectors from the anchor first (default false: the paper's
   * eq. 4). Every key shares a large common component, so v_anchor·v_u ranks units mostly by
   * that component's size; (v_anchor − μ)·v_u ranks them as (v_anchor − μ)·(v_u − μ) does, by
   * what the anchor and the unit have that the rest of the context has not.
   */
  centered?: boolean;
  /** Semantic pages to keep at most (sinks and window come on top). */
  pageBudget: number;
  /** Default DEFAULT_RATIOS. */
  ratios?: SelectionRatios;
  /** Default DEFAULT_SINK_PAGES. */
  sinkPages?: number;
  /** Default DEFAULT_WINDOW_PAGES. */
  windowPages?: number;
  /**
   * Pages of the sequence, its current partial page included; default hierarchy.pageCount + 1
   * (every page with a vector is full and one partial page follows). Pages with a vector at or
   * past the window are not candidates.
   */
  totalPages?: number;
  /** Default `kernels()`. */
  kernels?: IndexKernels;
}

export interface PageSelection {
  /** Every page to attend to, sorted, without duplicates: sinks, semantic pages, unscored pages, window. */
  pages: number[];
  /** The semantically selected pages alone, sorted (at most pageBudget). */
  semantic: number[];
  /** Grids kept by the first level, sorted. */
  grids: number[];
  /** Chunks kept by the second level, sorted. */
  chunks: number[];
}

function checkInteger(what: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) throw new RangeError(`${what} must be an integer >= ${min} (got ${value})`);
}

function checkRatio(what: string, value: number): void {
  if (typeof value !== "number" || !(value >= 0 && value <= 1)) throw new RangeError(`${what} must be in [0, 1] (got ${value})`);
}

export function checkRatios(ratios: SelectionRatios): void {
  checkRatio("ratios.grid", ratios.grid);
  checkRatio("ratios.chunk", ratios.chunk);
}

/** Nodes a level keeps of `candidates`: ceil(ratio * candidates), at least one when ratio > 0. */
export function retainedCount(ratio: number, candidates: number): number {
  if (candidates === 0 || ratio <= 0) return 0;
  return Math.min(candidates, Math.max(1, Math.ceil(ratio * candidates - 1e-9)));
}

/**
 * Semantic pages a KV budget of `budgetFraction` of `contextTokens` leaves once the sinks and the
 * window are kept: the budget in tokens (rounded up), in whole pages (rounded down), less
 * sinkPages + windowPages, at least 0. E.g. 1% of 32768 tokens = 328 tokens = 20 pages of 16 =
 * 1 sink + 2 window + 17 semantic pages. A fraction >= 1 gives at least every page of the context.
 */
export function budgetToPages(
  contextTokens: number,
  budgetFraction: number,
  blockSize = 16,
  sinkPages = DEFAULT_SINK_PAGES,
  windowPages = DEFAULT_WINDOW_PAGES,
): number {
  checkInteger("contextTokens", contextTokens, 0);
  checkInteger("blockSize", blockSize, 1);
  checkInteger("sinkPages", sinkPages, 0);
  checkInteger("windowPages", windowPages, 0);
  if (typeof budgetFraction !== "number" || !(budgetFraction >= 0)) throw new RangeError(`budgetFraction must be >= 0 (got ${budgetFraction})`);
  if (budgetFraction >= 1) return Math.ceil(contextTokens / blockSize);
  const tokens = Math.ceil(contextTokens * budgetFraction - 1e-9);
  return Math.max(0, Math.floor(tokens / blockSize) - sinkPages - windowPages);
}

/**
 * Eq. 3: the mean of the page vectors of the local window (the last `windowPages` of
 * `totalPages` pages) that have a vector; when none has (a window of only the partial page), the
 * last page vector. Undefined for an empty hierarchy.
 */
export function windowAnchor(
  hierarchy: PageHierarchy,
  windowPages = DEFAULT_WINDOW_PAGES,
  totalPages = hierarchy.pageCount + 1,
): Float32Array | undefined {
  const count = hierarchy.pageCount;
  if (count === 0) return undefined;
  let end = Math.min(totalPages, count);
  let start = Math.max(0, totalPages - windowPages);
  if (start >= end) {
    end = count;
    start = count - 1;
  }
  const dim = hierarchy.dim;
  const sums = new Float64Array(dim);
  for (let p = start; p < end; p++) {
    const v = hierarchy.pageVector(p);
    for (let i = 0; i < dim; i++) sums[i]! += v[i]!;
  }
  const anchor = new Float32Array(dim);
  for (let i = 0; i < dim; i++) anchor[i] = sums[i]! / (end - start);
  return anchor;
}

/** The pages always kept of `totalPages`: the first sinkPages and the last windowPages. */
export function keptPageRanges(totalPages: number, sinkPages: number, windowPages: number): { sinkEnd: number; windowStart: number } {
  return { sinkEnd: Math.min(sinkPages, totalPages), windowStart: Math.max(0, totalPages - windowPages) };
}

/**
 * Sorted, duplicate-free union of `semantic` (any order) and the always-kept pages of a sequence
 * of `totalPages` pages: sinks, window, and the full pages from `scoredPages` (the pages with a
 * vector) up to the window, which could not be scored.
 */
export function withKeptPages(
  semantic: readonly number[],
  totalPages: number,
  scoredPages: number,
  sinkPages = DEFAULT_SINK_PAGES,
  windowPages = DEFAULT_WINDOW_PAGES,
): number[] {
  const { sinkEnd, windowStart } = keptPageRanges(totalPages, sinkPages, windowPages);
  const keep = new Uint8Array(totalPages);
  for (let p = 0; p < sinkEnd; p++) keep[p] = 1;
  for (let p = Math.min(scoredPages, totalPages); p < totalPages; p++) keep[p] = 1;
  for (let p = windowStart; p < totalPages; p++) keep[p] = 1;
  for (const p of semantic) {
    if (!Number.isInteger(p) || p < 0 || p >= totalPages) throw new RangeError(`page ${p} out of range (0..${totalPages - 1})`);
    keep[p] = 1;
  }
  const pages: number[] = [];
  for (let p = 0; p < totalPages; p++) if (keep[p]) pages.push(p);
  return pages;
}

/** Top k of `items` by `scores[item]` (kernels' topK on the gathered scores), sorted by item. */
function topItems(k: IndexKernels, items: readonly number[], scores: Float32Array, count: number): number[] {
  if (count <= 0 || items.length === 0) return [];
  if (count >= items.length) return items.slice();
  const gathered = new Float32Array(items.length);
  for (let i = 0; i < items.length; i++) gathered[i] = scores[items[i]!]!;
  const picked = Array.from(k.topK(gathered, count), (i) => items[i]!);
  return picked.sort((a, b) => a - b);
}

/** The anchor minus the mean of the hierarchy's page vectors. */
export function centeredAnchor(hierarchy: PageHierarchy, anchor: ArrayLike<number>): Float32Array {
  const dim = hierarchy.dim;
  const mean = new Float64Array(dim);
  for (let p = 0; p < hierarchy.pageCount; p++) {
    const v = hierarchy.pageVector(p);
    for (let i = 0; i < dim; i++) mean[i]! += v[i]!;
  }
  const out = new Float32Array(dim);
  for (let i = 0; i < dim; i++) out[i] = anchor[i]! - (hierarchy.pageCount > 0 ? mean[i]! / hierarchy.pageCount : 0);
  return out;
}

/** Algorithm 1 with exact top-k, plus the always-kept pages (see the module comment). */
export function selectPages(hierarchy: PageHierarchy, options: SelectPagesOptions): PageSelection {
  const {
    pageBudget,
    ratios = DEFAULT_RATIOS,
    sinkPages = DEFAULT_SINK_PAGES,
    windowPages = DEFAULT_WINDOW_PAGES,
    totalPages = hierarchy.pageCount + 1,
    kernels = defaultKernels(),
  } = options;
  checkInteger("pageBudget", pageBudget, 0);
  checkInteger("sinkPages", sinkPages, 0);
  checkInteger("windowPages", windowPages, 0);
  checkInteger("totalPages", totalPages, 0);
  checkRatios(ratios);

  const { sinkEnd, windowStart } = keptPageRanges(totalPages, sinkPages, windowPages);
  // Candidates: scored pages that are neither sinks nor in the window.
  const candidateStart = sinkEnd;
  const candidateEnd = Math.min(hierarchy.pageCount, windowStart);
  const empty = (): PageSelection => ({ pages: withKeptPages([], totalPages, hierarchy.pageCount, sinkPages, windowPages), semantic: [], grids: [], chunks: [] });
  if (candidateStart >= candidateEnd || pageBudget === 0) return empty();

  const raw = options.anchor ?? windowAnchor(hierarchy, windowPages, totalPages);
  if (raw === undefined) return empty();
  const anchor = options.centered ? centeredAnchor(hierarchy, raw) : raw;
  const scores = hierarchy.score(anchor);

  // Nodes that hold at least one candidate page.
  const firstChunk = hierarchy.chunkOf(candidateStart);
  const lastChunk = hierarchy.chunkOf(candidateEnd - 1);
  const candidateGrids: number[] = [];
  for (let g = hierarchy.gridOf(firstChunk); g <= hierarchy.gridOf(lastChunk); g++) candidateGrids.push(g);

  // Level 1: grids.
  const grids = topItems(kernels, candidateGrids, scores.grid, retainedCount(ratios.grid, candidateGrids.length));

  // Level 2: chunks whose grid is active.
  const candidateChunks: number[] = [];
  for (const g of grids) {
    const [start, end] = hierarchy.chunksOfGrid(g);
    for (let c = Math.max(start, firstChunk); c < Math.min(end, lastChunk + 1); c++) candidateChunks.push(c);
  }
  const chunks = topItems(kernels, candidateChunks, scores.chunk, retainedCount(ratios.chunk, candidateChunks.length));

  // Level 3: candidate pages whose chunk is active.
  const candidatePages: number[] = [];
  for (const c of chunks) {
    const [start, end] = hierarchy.pagesOfChunk(c);
    for (let p = Math.max(start, candidateStart); p < Math.min(end, candidateEnd); p++) candidatePages.push(p);
  }
  const semantic = topItems(kernels, candidatePages, scores.page, pageBudget);

  return { pages: withKeptPages(semantic, totalPages, hierarchy.pageCount, sinkPages, windowPages), semantic, grids, chunks };
}
