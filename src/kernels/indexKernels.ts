/**
 * The hot-path kernels behind one interface, implemented twice: Rust compiled to WASM
 * (wasmKernels.ts, the default) and plain TypeScript (tsKernels.ts, the reference). Both give
 * bit-identical distances, linkage and Kendall-tau values and identical top-k/top-p indices;
 * test/kernels checks that on random inputs.
 *
 * `createKernels` wraps a backend with the argument checks both share, so both throw the same
 * Errors for the same bad input.
 */
import {
  checkAlpha,
  checkCondensed,
  checkContexts,
  checkKendallInput,
  checkLinkageMethod,
  checkP,
  checkPairs,
  checkRowLength,
  checkRowRange,
  checkK,
  KernelError,
} from "./validate.ts";
import { DEFAULT_ALPHA, type EncodedContexts, type LinkageMethod, type TopPRows } from "./kernelTypes.ts";

export type ClusterPhase = "distances" | "linkage";

export interface ContextLinkageOptions {
  /** Position weight of the distance; default DEFAULT_ALPHA. */
  alpha?: number;
  /** Default "average". */
  method?: LinkageMethod;
  /** Called between steps: distances counts pairs, linkage counts merges (0 and n-1). */
  onProgress?: (phase: ClusterPhase, done: number, total: number) => void;
}

export interface IndexKernels {
  /** Which implementation this is. */
  readonly name: "wasm" | "ts";

  /**
   * All pairwise context distances as a condensed upper triangle in SciPy `pdist` order: pair
   * (i < j) of n contexts at n*i - i*(i+1)/2 + (j - i - 1) (see `condensedIndex`). With shared
   * blocks S: d = 1 when S is empty, else
   * 1 - |S| / max(|Ci|, |Cj|) + alpha * (sum over S of |pos_i - pos_j| / |S|), in f64, in that
   * operation order.
   */
  contextDistances(contexts: EncodedContexts, alpha?: number): Float64Array;

  /**
   * Rows rowStart..rowEnd-1 of the condensed matrix (row i = pairs (i, i+1) .. (i, n-1)),
   * written into `out`, the full condensed matrix (n(n-1)/2 entries), at their condensed
   * positions; other entries are left alone. Lets a caller fill the matrix in steps and report
   * progress.
   */
  contextDistanceRows(
    contexts: EncodedContexts,
    alpha: number,
    rowStart: number,
    rowEnd: number,
    out: Float64Array,
  ): void;

  /**
   * Distances of the given pairs (i0, j0, i1, j1, ...): out[t] = d(i_t, j_t). Any order; i == j
   * gives 0 (1 for an empty context).
   */
  contextDistancesForPairs(contexts: EncodedContexts, pairs: Uint32Array, alpha?: number): Float64Array;

  /**
   * SciPy-compatible hierarchical clustering (NN-chain, Lance-Williams updates) of n points
   * given their condensed distances (finite values; not modified). Returns Z: (n-1) rows of
   * [clusterA, clusterB, distance, size], flattened; leaves are 0..n-1, the m-th row creates
   * cluster n+m, rows by non-decreasing distance (stable), clusterA < clusterB. Ties are broken
   * exactly as SciPy's nn_chain does (the chain's previous element, else the lowest cluster).
   */
  linkage(condensed: Float64Array, n: number, method?: LinkageMethod): Float64Array;

  /**
   * contextDistances followed by linkage, in steps that report progress. The WASM version keeps
   * the matrix inside the module (one copy instead of two).
   */
  contextLinkage(contexts: EncodedContexts, options?: ContextLinkageOptions): Float64Array;

  /**
   * Kendall-tau distance of each segment: a[o_s .. o_{s+1}) and b[o_s .. o_{s+1}) are two orders
   * of the same distinct items; the distance is discordant pairs / (m(m-1)/2), 0 when m < 2.
   * Throws when a segment's items differ between a and b or repeat.
   */
  kendallTauDistances(a: Int32Array, b: Int32Array, offsets: Int32Array): Float64Array;

  /** Kendall-tau distance of two orders of the same distinct items (one segment). */
  kendallTauDistance(a: Int32Array, b: Int32Array): number;

  /**
   * Indices of the k largest scores, by score descending, equal scores by lower index first
   * (min(k, length) of them). Scores must not be NaN.
   */
  topK(scores: Float32Array, k: number): Uint32Array;

  /** topK of each row of `rowLength` scores: rows * min(k, rowLength) indices within the row. */
  topKRows(scores: Float32Array, rowLength: number, k: number): Uint32Array;

  /**
   * The shortest prefix of the topK order whose score sum reaches p * (sum of all scores).
   * Scores must be finite and >= 0. Sums are f64: the total accumulated in index order, the
   * prefix in the selection order. p >= 1 gives every index with a positive score; an all-zero
   * row or p <= 0 gives nothing; if rounding keeps the prefix below the target, every positive
   * score is taken. p must not be NaN.
   */
  topP(scores: Float32Array, p: number): Uint32Array;

  /** topP of each row of `rowLength` scores. */
  topPRows(scores: Float32Array, rowLength: number, p: number): TopPRows;
}

/**
 * What an implementation provides; inputs are already checked by `createKernels` except for
 * data checks that need a full pass anyway (NaN scores, mismatched Kendall segments), which the
 * backend reports with the errors from validate.ts.
 */
export interface KernelBackend {
  readonly name: "wasm" | "ts";
  /** Optional: the whole condensed matrix (n >= 2) as a new array. */
  distances?(contexts: EncodedContexts, alpha: number): Float64Array;
  /** Writes rows rowStart..rowEnd-1 to out starting at out[outOffset]. */
  distanceRows(contexts: EncodedContexts, alpha: number, rowStart: number, rowEnd: number, out: Float64Array, outOffset: number): void;
  distancePairs(contexts: EncodedContexts, pairs: Uint32Array, alpha: number): Float64Array;
  /** Must leave `condensed` unchanged. */
  linkage(condensed: Float64Array, n: number, method: LinkageMethod): Float64Array;
  /** Optional specialised contextLinkage (arguments checked). */
  contextLinkage?(contexts: EncodedContexts, alpha: number, method: LinkageMethod, onProgress: ContextLinkageOptions["onProgress"]): Float64Array;
  kendall(a: Int32Array, b: Int32Array, offsets: Int32Array): Float64Array;
  /** k <= rowLength here. */
  topKRows(scores: Float32Array, rows: number, rowLength: number, k: number): Uint32Array;
  topPRows(scores: Float32Array, rows: number, rowLength: number, p: number): TopPRows;
}

/** Condensed index of pair (i, j), i != j, among n points (SciPy `pdist` order). */
export function condensedIndex(n: number, i: number, j: number): number {
  if (i > j) [i, j] = [j, i];
  return n * i - (i * (i + 1)) / 2 + (j - i - 1);
}

/** Number of pairs before row i of the condensed matrix (where row i starts). */
export function condensedRowStart(n: number, i: number): number {
  return (i * (2 * n - i - 1)) / 2;
}

/** Number of contexts in a batch. */
export function contextCount(contexts: EncodedContexts): number {
  return contexts.offsets.length - 1;
}

/** Roughly this many pairs per contextLinkage step between progress reports. */
export const PAIRS_PER_STEP = 1 << 21;

/** Splits rows 0..n-1 into steps of about PAIRS_PER_STEP pairs: [rowStart, rowEnd) each. */
export function distanceSteps(n: number): Array<[number, number]> {
  const steps: Array<[number, number]> = [];
  let start = 0;
  while (start < n - 1) {
    let end = start;
    let pairs = 0;
    while (end < n - 1 && (pairs === 0 || pairs + (n - 1 - end) <= PAIRS_PER_STEP)) {
      pairs += n - 1 - end;
      end++;
    }
    steps.push([start, end]);
    start = end;
  }
  return steps;
}

/** The public kernels of a backend, with shared argument checks. */
export function createKernels(backend: KernelBackend): IndexKernels {
  const rows = (scores: Float32Array, rowLength: number, kernel: string): number => {
    checkRowLength(kernel, scores, rowLength);
    return scores.length / rowLength;
  };
  const kernels: IndexKernels = {
    name: backend.name,

    contextDistances(contexts, alpha = DEFAULT_ALPHA) {
      checkContexts("contextDistances", contexts);
      checkAlpha("contextDistances", alpha);
      const n = contextCount(contexts);
      if (n < 2) return new Float64Array(0);
      if (backend.distances) return backend.distances(contexts, alpha);
      const out = new Float64Array((n * (n - 1)) / 2);
      backend.distanceRows(contexts, alpha, 0, n - 1, out, 0);
      return out;
    },

    contextDistanceRows(contexts, alpha, rowStart, rowEnd, out) {
      checkContexts("contextDistanceRows", contexts);
      checkAlpha("contextDistanceRows", alpha);
      const n = contextCount(contexts);
      checkRowRange("contextDistanceRows", n, rowStart, rowEnd, out);
      const end = Math.min(rowEnd, n - 1);
      if (rowStart < end) backend.distanceRows(contexts, alpha, rowStart, end, out, condensedRowStart(n, rowStart));
    },

    contextDistancesForPairs(contexts, pairs, alpha = DEFAULT_ALPHA) {
      checkContexts("contextDistancesForPairs", contexts);
      checkAlpha("contextDistancesForPairs", alpha);
      checkPairs("contextDistancesForPairs", pairs, contextCount(contexts));
      return backend.distancePairs(contexts, pairs, alpha);
    },

    linkage(condensed, n, method = "average") {
      checkLinkageMethod("linkage", method);
      checkCondensed("linkage", condensed, n);
      if (n < 2) return new Float64Array(0);
      return backend.linkage(condensed, n, method);
    },

    contextLinkage(contexts, options = {}) {
      const { alpha = DEFAULT_ALPHA, method = "average", onProgress } = options;
      checkContexts("contextLinkage", contexts);
      checkAlpha("contextLinkage", alpha);
      checkLinkageMethod("contextLinkage", method);
      const n = contextCount(contexts);
      if (n < 2) return new Float64Array(0);
      if (backend.contextLinkage) return backend.contextLinkage(contexts, alpha, method, onProgress);
      const total = (n * (n - 1)) / 2;
      const condensed = new Float64Array(total);
      onProgress?.("distances", 0, total);
      for (const [start, end] of distanceSteps(n)) {
        backend.distanceRows(contexts, alpha, start, end, condensed, condensedRowStart(n, start));
        onProgress?.("distances", condensedRowStart(n, end), total);
      }
      onProgress?.("linkage", 0, n - 1);
      const z = backend.linkage(condensed, n, method);
      onProgress?.("linkage", n - 1, n - 1);
      return z;
    },

    kendallTauDistances(a, b, offsets) {
      checkKendallInput("kendallTauDistances", a, b, offsets);
      return backend.kendall(a, b, offsets);
    },

    kendallTauDistance(a, b) {
      if (!(a instanceof Int32Array) || !(b instanceof Int32Array)) {
        throw new KernelError("kendallTauDistance", "a and b must be Int32Arrays");
      }
      if (a.length !== b.length) {
        throw new KernelError("kendallTauDistance", `a and b must have the same length (got ${a.length} and ${b.length})`);
      }
      return kernels.kendallTauDistances(a, b, Int32Array.of(0, a.length))[0]!;
    },

    topK(scores, k) {
      checkK("topK", k);
      if (!(scores instanceof Float32Array)) throw new KernelError("topK", "scores must be a Float32Array");
      if (scores.length === 0) return new Uint32Array(0);
      return backend.topKRows(scores, 1, scores.length, Math.min(k, scores.length));
    },

    topKRows(scores, rowLength, k) {
      checkK("topKRows", k);
      return backend.topKRows(scores, rows(scores, rowLength, "topKRows"), rowLength, Math.min(k, rowLength));
    },

    topP(scores, p) {
      checkP("topP", p);
      if (!(scores instanceof Float32Array)) throw new KernelError("topP", "scores must be a Float32Array");
      if (scores.length === 0) return new Uint32Array(0);
      return backend.topPRows(scores, 1, scores.length, p).indices;
    },

    topPRows(scores, rowLength, p) {
      checkP("topPRows", p);
      return backend.topPRows(scores, rows(scores, rowLength, "topPRows"), rowLength, p);
    },
  };
  return kernels;
}
