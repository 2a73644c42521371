/**
 * Per-sequence CHESS state for sparse decoding: the page hierarchy, the current page selection
 * and the uncertainty trigger, turned into the block table a decode step's FORWARD gets.
 *
 * The token with sequence index s attends to entries 0..=s of the table FORWARD is given, so a
 * sparse step passes a compacted table: the kept full pages in their original order, then the
 * sequence's last page (the one the new token is written into, partially filled). The new
 * token's index in that table is (pages before the last) * blockSize + (offset in the last
 * page); its position (RoPE) is still its true sequence index, passed separately.
 *
 * Lifecycle: `setPages` after prefill with the full pages' vectors (mean un-RoPEd keys per page,
 * layers * kv_width floats each), `appendPage` whenever a page fills, `observeLogits` after each
 * step, and `tableFor` before each decode step.
 *
 * The selection is recomputed (`reconstructed: true`) on the first sparse call, when the
 * uncertainty trigger fires (its window is then cleared), when the sequence got shorter, and when
 * the local window slid onto pages the previous table did not have (the sequence grew by more
 * than a page since the last call). Otherwise the previous semantic pages are reused with the
 * always-kept pages of the current step: sinks, window, and full pages that had no vector when
 * the selection was made or still have none. In steady decoding the window slides one page at a time onto the page
 * the previous table ended with, so only the trigger reconstructs. When the budget covers the
 * whole context (sinks + window + semantic budget >= pages, or budgetFraction >= 1) the full
 * table is returned unchanged (dense decode).
 *
 * Anchor "newest": the caller gives the newest tokens' keys (`setNewestKeys`) before a call that
 * reconstructs (`needsNewestKeys` says when); without fresh ones the last keys given are used,
 * and the window anchor before any.
 */
import type { IndexKernels } from "../kernels/index.ts";
import { type PageHierarchyOptions, PageHierarchy } from "./pageHierarchy.ts";
import {
  budgetToPages,
  centeredAnchor,
  checkRatios,
  DEFAULT_RATIOS,
  DEFAULT_SINK_PAGES,
  DEFAULT_WINDOW_PAGES,
  keptPageRanges,
  selectPages,
  type SelectionRatios,
  windowAnchor,
  withKeptPages,
} from "./sparsePageSelection.ts";
import {
  coarseCandidateCount,
  DEFAULT_TOKEN_REFINEMENT,
  pagesToScore,
  refinedPageScores,
  type TokenRefinementOptions,
  topScoredPages,
} from "./sparseTokenRefinement.ts";
import { type TokenUncertainty, UncertaintyTrigger, type UncertaintyTriggerOptions } from "./uncertaintyTrigger.ts";

/** KV budget as a fraction of the context when none is given: the paper's 1%. */
export const DEFAULT_BUDGET_FRACTION = 0.01;
export const DEFAULT_BLOCK_SIZE = 16;

export interface SparseDecodePlannerOptions extends Pick<PageHierarchyOptions, "chunkPages" | "gridChunks"> {
  /** KV budget as a fraction of the context (sinks and window included); default 0.01. >= 1 is dense. */
  budgetFraction?: number;
  /** Default DEFAULT_RATIOS ({ grid: 1, chunk: 1 }: no cascade; AGGRESSIVE_RATIOS are the paper's). */
  ratios?: SelectionRatios;
  /**
   * Score against the anchor minus the mean page vector (selectPages' `centered`; default true,
   * false is the paper's eq. 4). On the quality model's retrieval prompts it lifts sparse decode
   * at a 5% budget from 2% to 26% right (BENCHMARKS.md, issue 12).
   */
  centered?: boolean;
  /** What pages are ranked against: the window's page vectors (default) or the keys given to `setNewestKeys`. */
  anchor?: "window" | "newest";
  /** Default 1. */
  sinkPages?: number;
  /** At least 1 (the partial page); default 2. */
  windowPages?: number;
  /** Tokens per page; default 16. */
  blockSize?: number;
  /** Trigger thresholds and window (see uncertaintyTrigger.ts for the defaults). */
  trigger?: UncertaintyTriggerOptions;
  /** The fine stage: pages re-ranked by their best token (sparseTokenRefinement.ts); default on, factor 0 off. */
  refinement?: TokenRefinementOptions;
  /** Default `kernels()`. */
  kernels?: IndexKernels;
}

export interface DecodeTable {
  /** The block table to pass to FORWARD. */
  table: number[];
  /** The new token's sequence index within `table`. */
  index: number;
  /** Pages the new token attends to (the whole table but for blocks past the last page when dense). */
  pagesSelected: number;
  /** Whether the page selection was recomputed for this step. */
  reconstructed: boolean;
}

function checkInteger(what: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) throw new RangeError(`SparseDecodePlanner: ${what} must be an integer >= ${min} (got ${value})`);
}

export class SparseDecodePlanner {
  readonly budgetFraction: number;
  readonly ratios: Readonly<SelectionRatios>;
  /** selectPages' `centered` (the anchor minus the mean page vector). */
  readonly centered: boolean;
  readonly anchor: "window" | "newest";
  readonly sinkPages: number;
  readonly windowPages: number;
  readonly blockSize: number;
  readonly trigger: UncertaintyTrigger;
  readonly refinement: Readonly<TokenRefinementOptions>;

  private readonly hierarchyOptions: PageHierarchyOptions;
  private readonly kernels: IndexKernels | undefined;
  private hierarchy: PageHierarchy | undefined;
  /** Semantic pages of the current selection; undefined when there is none. */
  private semantic: number[] | undefined;
  /** Full pages [start, end) that had no vector when the current selection was made (kept until the next). */
  private unscoredAtSelection: [number, number] = [0, 0];
  /** Pages of the last sparse table returned. */
  private lastPages = new Set<number>();
  private lastLength = -1;
  private reconstructionCount = 0;
  /** The newest tokens' keys for the next selection (anchor "newest"). */
  private newestKeys: Float32Array | undefined;
  /** Pages ranked by their best token for the selection at sequence index `length` (setTokenScores). */
  private refined: { length: number; scores: Map<number, number> } | undefined;

  constructor(options: SparseDecodePlannerOptions = {}) {
    const {
      budgetFraction = DEFAULT_BUDGET_FRACTION,
      ratios = DEFAULT_RATIOS,
      sinkPages = DEFAULT_SINK_PAGES,
      windowPages = DEFAULT_WINDOW_PAGES,
      blockSize = DEFAULT_BLOCK_SIZE,
    } = options;
    if (typeof budgetFraction !== "number" || !(budgetFraction >= 0)) throw new RangeError(`SparseDecodePlanner: budgetFraction must be >= 0 (got ${budgetFraction})`);
    checkRatios(ratios);
    checkInteger("sinkPages", sinkPages, 0);
    checkInteger("windowPages", windowPages, 1);
    checkInteger("blockSize", blockSize, 1);
    this.budgetFraction = budgetFraction;
    this.ratios = { grid: ratios.grid, chunk: ratios.chunk };
    this.centered = options.centered ?? true;
    this.anchor = options.anchor ?? "window";
    if (this.anchor !== "window" && this.anchor !== "newest") throw new RangeError(`SparseDecodePlanner: anchor must be window or newest (got ${String(this.anchor)})`);
    this.sinkPages = sinkPages;
    this.windowPages = windowPages;
    this.blockSize = blockSize;
    this.trigger = new UncertaintyTrigger(options.trigger);
    const refinement = options.refinement ?? DEFAULT_TOKEN_REFINEMENT;
    checkInteger("refinement.factor", refinement.factor, 0);
    checkInteger("refinement.lookback", refinement.lookback, 0);
    // More than a block looks back past the previous page, which is not scored for it.
    this.refinement = { factor: refinement.factor, lookback: Math.min(refinement.lookback, blockSize) };
    this.hierarchyOptions = { chunkPages: options.chunkPages, gridChunks: options.gridChunks };
    this.kernels = options.kernels;
    if (options.chunkPages !== undefined) checkInteger("chunkPages", options.chunkPages, 1);
    if (options.gridChunks !== undefined) checkInteger("gridChunks", options.gridChunks, 1);
  }

  /** Full pages with a vector. */
  get pageCount(): number {
    return this.hierarchy?.pageCount ?? 0;
  }

  /** The semantic pages of the current selection (sorted), or undefined before one / while dense. */
  get selection(): readonly number[] | undefined {
    return this.semantic;
  }

  /** Selections computed so far. */
  get reconstructions(): number {
    return this.reconstructionCount;
  }

  /**
   * The vectors of the sequence's first `count` full pages (count rows of layers * kv_width
   * floats), after prefill. Replaces any previous state of the sequence (selection and trigger
   * included).
   */
  setPages(vectors: ArrayLike<number>, count: number): void {
    checkInteger("count", count, 0);
    if (count === 0) {
      if (vectors.length !== 0) throw new RangeError(`SparseDecodePlanner: 0 pages but ${vectors.length} floats`);
      this.hierarchy = undefined;
    } else {
      if (vectors.length % count !== 0 || vectors.length === 0) {
        throw new RangeError(`SparseDecodePlanner: ${vectors.length} floats are not ${count} page vectors`);
      }
      this.hierarchy = PageHierarchy.fromPages(vectors.length / count, vectors, count, this.hierarchyOptions);
    }
    this.clearSelection();
    this.newestKeys = undefined;
    this.refined = undefined;
    this.lastLength = -1;
    this.trigger.reset();
  }

  /** The vector of the next full page (the page that just filled). */
  appendPage(vector: ArrayLike<number>): void {
    if (this.hierarchy === undefined) {
      this.hierarchy = new PageHierarchy(vector.length, this.hierarchyOptions);
    }
    this.hierarchy.appendPage(vector);
  }

  /** Feeds a step's next-token logits to the trigger; returns the step's entropy and varentropy. */
  observeLogits(logits: ArrayLike<number>, temperature = 1): TokenUncertainty {
    return this.trigger.observeLogits(logits, temperature);
  }

  /** The anchor of the next selection (anchor "newest"): layers * kv_width floats, as a page vector. */
  setNewestKeys(anchor: Float32Array): void {
    const dim = this.hierarchy?.dim;
    if (dim !== undefined && anchor.length !== dim) throw new RangeError(`SparseDecodePlanner: an anchor of ${anchor.length} floats for page vectors of ${dim}`);
    this.newestKeys = anchor;
  }

  /** Whether `tableFor(_, length)` would select pages against the newest keys (so they are wanted now). */
  needsNewestKeys(length: number): boolean {
    if (this.anchor !== "newest" || this.pageCount === 0) return false;
    const plan = this.plan(length);
    return !plan.dense && plan.reconstruct;
  }

  /**
   * When `tableFor(_, length)` will select pages and the fine stage is on: the pages whose tokens
   * to score (KEY_SCORES) and the anchor to score them against; give the scores to
   * `setTokenScores` before that call. Call after `setNewestKeys`.
   */
  refinementRequest(length: number): { pages: number[]; anchor: Float32Array } | undefined {
    const hierarchy = this.hierarchy;
    if (this.refinement.factor === 0 || hierarchy === undefined || hierarchy.pageCount === 0) return undefined;
    const plan = this.plan(length);
    if (plan.dense || !plan.reconstruct || plan.budget === 0) return undefined;
    const raw = this.anchor === "newest" && this.newestKeys !== undefined ? this.newestKeys : windowAnchor(hierarchy, this.windowPages, plan.totalPages);
    if (raw === undefined) return undefined;
    const coarse = selectPages(hierarchy, {
      pageBudget: coarseCandidateCount(plan.budget, this.refinement.factor),
      ratios: this.ratios,
      sinkPages: this.sinkPages,
      windowPages: this.windowPages,
      totalPages: plan.totalPages,
      kernels: this.kernels,
      centered: this.centered,
      anchor: raw,
    });
    const { sinkEnd, windowStart } = keptPageRanges(plan.totalPages, this.sinkPages, this.windowPages);
    const candidateEnd = Math.min(hierarchy.pageCount, windowStart);
    const pages = pagesToScore(coarse.semantic, (page) => page >= sinkEnd && page < candidateEnd);
    return { pages, anchor: this.centered ? centeredAnchor(hierarchy, raw) : Float32Array.from(raw) };
  }

  /** The token scores of `refinementRequest(length)`'s pages (blockSize per page, in order). */
  setTokenScores(pages: readonly number[], scores: ArrayLike<number>, length: number): void {
    this.refined = { length, scores: refinedPageScores(pages, scores, this.blockSize, this.refinement.lookback) };
  }

  private plan(length: number): { dense: boolean; reconstruct: boolean; budget: number; totalPages: number } {
    const totalPages = Math.floor(length / this.blockSize) + 1;
    const budget = budgetToPages(length + 1, this.budgetFraction, this.blockSize, this.sinkPages, this.windowPages);
    const dense = this.budgetFraction >= 1 || this.sinkPages + this.windowPages + budget >= totalPages;
    const reconstruct =
      !dense && (this.semantic === undefined || length < this.lastLength || this.windowSlidOntoNewPages(totalPages) || this.trigger.shouldReconstruct());
    return { dense, reconstruct, budget, totalPages };
  }

  /**
   * The table for the next decode token, at sequence index `length` (entries 0..length-1
   * written). `fullTable` is the sequence's block table and must have its page
   * floor(length / blockSize); blocks past it are ignored by a sparse table and kept by a dense one.
   */
  tableFor(fullTable: readonly number[], length: number): DecodeTable {
    checkInteger("length", length, 0);
    const blockSize = this.blockSize;
    const lastPage = Math.floor(length / blockSize);
    const offset = length % blockSize;
    const totalPages = lastPage + 1;
    if (fullTable.length < totalPages) {
      throw new RangeError(`SparseDecodePlanner: sequence index ${length} needs ${totalPages} blocks (the table has ${fullTable.length})`);
    }
    const { dense, reconstruct, budget } = this.plan(length);
    const refined = this.refined?.length === length ? this.refined.scores : undefined;
    this.refined = undefined;
    if (dense) {
      this.clearSelection();
      this.lastLength = length;
      return { table: fullTable.slice(), index: length, pagesSelected: totalPages, reconstructed: false };
    }

    let pages: number[];
    if (reconstruct) {
      const hierarchy = this.hierarchy;
      if (refined !== undefined) {
        this.semantic = topScoredPages(refined, budget);
        pages = withKeptPages(this.semantic, totalPages, this.pageCount, this.sinkPages, this.windowPages);
      } else if (hierarchy !== undefined && hierarchy.pageCount > 0) {
        const selection = selectPages(hierarchy, {
          pageBudget: budget,
          ratios: this.ratios,
          sinkPages: this.sinkPages,
          windowPages: this.windowPages,
          totalPages,
          kernels: this.kernels,
          centered: this.centered,
          ...(this.anchor === "newest" && this.newestKeys !== undefined ? { anchor: this.newestKeys } : {}),
        });
        this.semantic = selection.semantic;
        pages = selection.pages;
      } else {
        this.semantic = [];
        pages = withKeptPages([], totalPages, 0, this.sinkPages, this.windowPages);
      }
      this.unscoredAtSelection = [Math.min(this.pageCount, lastPage), lastPage];
      this.trigger.reset();
      this.reconstructionCount++;
    } else {
      const kept = [...this.semantic!];
      for (let page = this.unscoredAtSelection[0]; page < this.unscoredAtSelection[1]; page++) kept.push(page);
      pages = withKeptPages(kept, totalPages, this.pageCount, this.sinkPages, this.windowPages);
    }

    this.lastPages = new Set(pages);
    this.lastLength = length;
    const table = pages.map((page) => fullTable[page]!);
    return { table, index: (pages.length - 1) * blockSize + offset, pagesSelected: pages.length, reconstructed: reconstruct };
  }

  /** Whether a full page of the current window was not in the last table. */
  private windowSlidOntoNewPages(totalPages: number): boolean {
    const lastPage = totalPages - 1;
    for (let page = Math.max(0, totalPages - this.windowPages); page < lastPage; page++) {
      if (!this.lastPages.has(page)) return true;
    }
    return false;
  }

  private clearSelection(): void {
    this.semantic = undefined;
    this.unscoredAtSelection = [0, 0];
    this.lastPages = new Set();
  }
}
