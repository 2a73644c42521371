/**
 * Which reused tokens to recompute when chunk-caches are stitched into a new prompt:
 *
 * - Cache-Craft (§3.2.1, eq. 12–14): every reused chunk gets a share of the budget proportional
 *   to its CFO·|C_i|, and within the chunk its most contextualized tokens (by tokenInter).
 * - ProphetKV (Appendix A, Algorithm 1): the question's attention on the reused tokens, summed over
 *   its query rows and fused over all layers, one global top-budget over the reused positions.
 * - Cache-Craft Algorithm 1 (§3.2.2): the "focused" chunks after which recomputation of the
 *   others stops.
 *
 * Pure functions, no I/O; selections are sorted ascending.
 */
import { kernels } from "../kernels/index.ts";

/**
 * How reused chunk-caches are fixed: "cachecraft" (eq. 14 per chunk), "prophet" (query-driven
 * global top-k), "none" (reuse as is), "full" (recompute everything: no reuse), "prefix" (exact
 * prefix caching only: reuse only the cached run that matches the prompt's start exactly, the
 * benchmark baseline).
 */
export type RecomputePolicy = "cachecraft" | "prophet" | "none" | "full" | "prefix";

export const RECOMPUTE_POLICIES: readonly RecomputePolicy[] = ["cachecraft", "prophet", "none", "full", "prefix"];

/** One reused chunk for cacheCraftSelection. */
export interface CacheCraftChunk {
  /** |C_i|. */
  tokenCount: number;
  /** The chosen variant's CFO (eq. 12), >= 0. */
  cfo: number;
  /** Per token: its attention mass on the variant's prefix chunks (VariantMetadata.tokenInter). */
  tokenInter: Float32Array;
}

function checkBudget(fn: string, budgetTokens: number): number {
  if (!(budgetTokens >= 0)) throw new RangeError(`${fn}: budgetTokens must be >= 0 (got ${budgetTokens})`);
  return Math.floor(budgetTokens);
}

/**
 * Real shares x_i = min(λ·w_i, cap_i) with Σ x_i = budget (water-filling): chunks saturate in the
 * order of cap_i / w_i, the rest share what is left in proportion to w_i. Needs
 * budget <= Σ_{w_i > 0} cap_i; chunks with w_i = 0 get 0.
 */
function waterFill(weights: readonly number[], caps: readonly number[], budget: number, into: Float64Array): void {
  const active = weights.map((_, i) => i).filter((i) => weights[i]! > 0 && caps[i]! > 0);
  active.sort((p, q) => caps[p]! / weights[p]! - caps[q]! / weights[q]! || p - q);
  let remaining = budget;
  let weight = active.reduce((sum, i) => sum + weights[i]!, 0);
  let next = 0;
  while (next < active.length) {
    const i = active[next]!;
    if ((remaining / weight) * weights[i]! < caps[i]!) break;
    into[i] = caps[i]!;
    remaining -= caps[i]!;
    weight -= weights[i]!;
    next++;
  }
  for (; next < active.length; next++) {
    const i = active[next]!;
    into[i] = Math.min(caps[i]!, (remaining / weight) * weights[i]!);
  }
}

/**
 * Integer token counts per reused chunk (eq. 14's N_i) summing to exactly
 * min(floor(budgetTokens), Σ|C_i|), each at most |C_i|.
 *
 * The paper recomputes N_i = ⌈CFO_i·|C_i|⌉ tokens with CFO_i = α·CCI_i·(1−β′_i) (eq. 12) and α a
 * deployment hyperparameter (eq. 13). Here α is chosen per request so that the expected recompute
 * equals the request's budget: shares are proportional to CFO_i·|C_i| (whatever α the CFOs were
 * computed with cancels out), a chunk whose share would exceed |C_i| is capped and the excess goes
 * to the others (water-filling), and ⌈·⌉ is replaced by largest-remainder rounding (floors, then
 * +1 to the largest fractional parts, lower chunk index first on ties) so that the total is the
 * budget exactly. If the chunks with CFO > 0 cannot absorb the budget, or all CFOs are 0, the
 * leftover is spread over the CFO-0 chunks in proportion to their sizes (uniform by size).
 * Chunks that need no fixing at all (exact-prefix hits) should not be passed.
 */
export function cacheCraftShares(chunks: readonly Pick<CacheCraftChunk, "tokenCount" | "cfo">[], budgetTokens: number): number[] {
  const fn = "cacheCraftSelection";
  chunks.forEach((chunk, i) => {
    if (!Number.isInteger(chunk.tokenCount) || chunk.tokenCount < 0) {
      throw new RangeError(`${fn}: chunk ${i} tokenCount must be a non-negative integer (got ${chunk.tokenCount})`);
    }
    if (!(chunk.cfo >= 0) || !Number.isFinite(chunk.cfo)) throw new RangeError(`${fn}: chunk ${i} cfo must be finite and >= 0 (got ${chunk.cfo})`);
  });
  const sizes = chunks.map((chunk) => chunk.tokenCount);
  const total = sizes.reduce((sum, size) => sum + size, 0);
  const budget = Math.min(checkBudget(fn, budgetTokens), total);
  const real = new Float64Array(chunks.length);
  if (budget === total) {
    real.set(sizes);
  } else if (budget > 0) {
    const weights = chunks.map((chunk) => chunk.cfo * chunk.tokenCount);
    const weighted = chunks.reduce((sum, chunk, i) => sum + (weights[i]! > 0 ? chunk.tokenCount : 0), 0);
    waterFill(weights, sizes, Math.min(budget, weighted), real);
    const leftover = budget - Math.min(budget, weighted);
    if (leftover > 0) {
      const bySize = sizes.map((size, i) => (weights[i]! > 0 ? 0 : size));
      waterFill(bySize, sizes, leftover, real);
    }
  }
  // Largest remainder.
  const shares = Array.from(real, (x, i) => Math.min(sizes[i]!, Math.floor(x)));
  let deficit = budget - shares.reduce((sum, n) => sum + n, 0);
  if (deficit > 0) {
    const order = shares.map((_, i) => i).sort((p, q) => real[q]! - Math.floor(real[q]!) - (real[p]! - Math.floor(real[p]!)) || p - q);
    // Rounding may leave the shares a little short of the budget: more passes if needed.
    while (deficit > 0) {
      for (const i of order) {
        if (deficit === 0) break;
        if (shares[i]! < sizes[i]!) {
          shares[i]!++;
          deficit--;
        }
      }
    }
  }
  return shares;
}

/**
 * Cache-Craft token selection (eq. 14): per reused chunk, the local indices (sorted ascending) of
 * its top N_i tokens by tokenInter (ties to the lower index), N_i from cacheCraftShares.
 */
export function cacheCraftSelection(chunks: readonly CacheCraftChunk[], budgetTokens: number): Uint32Array[] {
  chunks.forEach((chunk, i) => {
    if (!(chunk.tokenInter instanceof Float32Array) || chunk.tokenInter.length !== chunk.tokenCount) {
      throw new RangeError(`cacheCraftSelection: chunk ${i} tokenInter must be a Float32Array of tokenCount = ${chunk.tokenCount} scores`);
    }
  });
  const shares = cacheCraftShares(chunks, budgetTokens);
  const k = kernels();
  return chunks.map((chunk, i) => {
    const n = shares[i]!;
    if (n === 0) return new Uint32Array(0);
    if (n === chunk.tokenCount) return Uint32Array.from({ length: n }, (_, t) => t);
    return k.topK(chunk.tokenInter, n).sort();
  });
}

/** A half-open range [start, end) of sequence positions. */
export interface PositionRange {
  start: number;
  end: number;
}

/**
 * The positions of the ranges, ascending, each once (overlapping ranges are merged). Every range
 * must satisfy 0 <= start <= end <= len.
 */
export function candidatePositions(candidates: readonly PositionRange[], len: number, fn = "candidatePositions"): Uint32Array {
  const ranges = candidates.map((range, i) => {
    const { start, end } = range;
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || start > end || end > len) {
      throw new RangeError(`${fn}: candidate ${i} [${start}, ${end}) must be integers with 0 <= start <= end <= ${len}`);
    }
    return [start, end] as const;
  });
  ranges.sort((p, q) => p[0] - q[0] || p[1] - q[1]);
  const positions: number[] = [];
  let covered = 0;
  for (const [start, end] of ranges) {
    for (let t = Math.max(start, covered); t < end; t++) positions.push(t);
    covered = Math.max(covered, end);
  }
  return Uint32Array.from(positions);
}

/** Which question rows score ProphetKV's tokens: all of them (the paper) or the last one only. */
export type ProphetQueryRows = "all" | "last";

export const PROPHET_QUERY_ROWS: readonly ProphetQueryRows[] = ["all", "last"];

/** prophetSelection's spanDecay unless configured (`ctxr serve --prophet-span-decay`). */
export const DEFAULT_PROPHET_SPAN_DECAY = 0.8;

/**
 * ProphetKV's dual-stage selection (Appendix A, Algorithm 1), planning part: given the question's
 * attention from the lightweight first pass, perLayerMass[l] is a queries × len row-major matrix
 * (row q = query token q's softmax weights over the len context positions, stale caches in place).
 * α_l(t) = Σ_q perLayerMass[l][q·len + t] (column sum), the fused ᾱ(t) = Σ_l α_l(t) (the paper's
 * eq. 7 divides by L, which does not change the ranking), and the result is one global top-budget
 * by ᾱ over the candidate (reused) positions only, as sorted sequence indices. Sums are f64 in
 * layer-then-query order, rounded to f32 for the kernel's topK; ties go to the lower position.
 * The budget is floored and capped at the number of candidate positions.
 *
 * `spanDecay` d in [0, 1) (default 0: the paper) carries each token's score on to the tokens
 * after it in the same candidate range: ᾱ'(t) = ᾱ(t) + d·ᾱ'(t−1). The question's attention says
 * where the answer starts reading; decoding then reads on along the span (a copied number, a
 * name), whose following tokens the question itself barely attends to. Measured on the quality
 * model (BENCHMARKS.md, issue 12): with d = 0 the first answer token is right and the rest come
 * from stale KV.
 */
export function prophetSelection(
  perLayerMass: readonly Float32Array[],
  queries: number,
  len: number,
  candidates: readonly PositionRange[],
  budgetTokens: number,
  spanDecay = 0,
): Uint32Array {
  const fn = "prophetSelection";
  if (!Number.isInteger(queries) || queries < 0) throw new RangeError(`${fn}: queries must be a non-negative integer (got ${queries})`);
  if (!Number.isInteger(len) || len < 0) throw new RangeError(`${fn}: len must be a non-negative integer (got ${len})`);
  perLayerMass.forEach((layer, l) => {
    if (layer.length !== queries * len) throw new RangeError(`${fn}: layer ${l} must have queries x len = ${queries * len} entries (got ${layer.length})`);
  });
  if (!(spanDecay >= 0 && spanDecay < 1)) throw new RangeError(`${fn}: spanDecay must be in [0, 1) (got ${spanDecay})`);
  const budget = checkBudget(fn, budgetTokens);
  const positions = candidatePositions(candidates, len, fn);
  if (budget === 0 || positions.length === 0) return new Uint32Array(0);
  if (budget >= positions.length) return positions;
  const fused = new Float64Array(positions.length);
  for (const layer of perLayerMass) {
    for (let q = 0; q < queries; q++) {
      const row = layer.subarray(q * len, (q + 1) * len);
      for (let c = 0; c < positions.length; c++) fused[c]! += row[positions[c]!]!;
    }
  }
  if (spanDecay > 0) {
    // A span ends with its candidate range (a chunk): the next chunk starts afresh.
    const starts = new Set(candidates.map((range) => range.start));
    for (let c = 1; c < positions.length; c++) {
      if (positions[c] === positions[c - 1]! + 1 && !starts.has(positions[c]!)) fused[c]! += spanDecay * fused[c - 1]!;
    }
  }
  const scores = Float32Array.from(fused);
  const top = kernels().topK(scores, budget);
  return Uint32Array.from(top, (c) => positions[c]!).sort();
}

/**
 * Entropy jumps (in [0, 1/e]) this close to the largest count as ties, so that gaps equal in exact
 * arithmetic but not after rounding (0.6 − 0.4 vs 0.4 − 0.2) do not decide i*.
 */
export const JUMP_TIE_TOLERANCE = 1e-12;

/** Result of Cache-Craft's Algorithm 1. */
export interface FocusedChunks {
  /** Indices (0..k−1, ascending) of the chunks whose recomputation continues after cutoffLayer. */
  focused: number[];
  /**
   * 0-based layer at which the focused set was confirmed (stable over the last `window` layers,
   * this one included): from layer cutoffLayer + 1 on, only focused chunks are recomputed. null
   * when it never stabilised: every chunk is recomputed in every layer.
   */
  cutoffLayer: number | null;
}

/**
 * Cache-Craft Algorithm 1 (§3.2.2), predicting the focused chunks. cinterPerLayer[l][i] is
 * inter_l(C_i, U), the question's attention on reused chunk i in layer l (layers × k). Per layer:
 * cumulative scores cinter_i (eq. 15) sorted descending (ties: lower chunk index first), the k−1
 * gaps diff between neighbours, p = diff / Σ diff, cumulative entropy h_i = −Σ_{j<=i} p_j·log p_j
 * (0·log 0 = 0), i* = the 1-based argmax over i in 1..k−2 of h_{i+1} − h_i (the first of the jumps
 * within JUMP_TIE_TOLERANCE of the largest), and
 * F = the top i* chunks; so |F| is between 1 and k−2. Stop at the first layer whose F equals the F
 * of the previous window − 1 layers (window >= 1 layers in all; window = 1 stops at the first
 * usable layer).
 *
 * Degenerate cases:
 * - k < 3: there is no entropy jump to take; all chunks are focused and it never stops
 *   (cutoffLayer null).
 * - all cumulative scores equal (Σ diff = 0, e.g. an all-zero first layer): that layer's F is
 *   every chunk, which says nothing about focus, so it does not count towards stability (it
 *   breaks a run); if no set stabilises, all chunks are focused and it never stops.
 */
export function focusedChunks(cinterPerLayer: readonly (readonly number[])[], window: number): FocusedChunks {
  const fn = "focusedChunks";
  if (!Number.isInteger(window) || window < 1) throw new RangeError(`${fn}: window must be a positive integer (got ${window})`);
  const k = cinterPerLayer.length > 0 ? cinterPerLayer[0]!.length : 0;
  cinterPerLayer.forEach((row, l) => {
    if (row.length !== k) throw new RangeError(`${fn}: layer ${l} has ${row.length} scores, layer 0 has ${k}`);
    row.forEach((value, i) => {
      if (!Number.isFinite(value)) throw new RangeError(`${fn}: layer ${l} chunk ${i} score must be finite (got ${value})`);
    });
  });
  const all = Array.from({ length: k }, (_, i) => i);
  const neverStop: FocusedChunks = { focused: all, cutoffLayer: null };
  if (k < 3) return neverStop;
  const cinter = new Float64Array(k);
  let previous: string | null = null;
  let run = 0;
  for (let l = 0; l < cinterPerLayer.length; l++) {
    const row = cinterPerLayer[l]!;
    for (let i = 0; i < k; i++) cinter[i]! += row[i]!;
    const order = all.slice().sort((p, q) => cinter[q]! - cinter[p]! || p - q);
    const diff = Array.from({ length: k - 1 }, (_, i) => cinter[order[i]!]! - cinter[order[i + 1]!]!);
    const diffSum = diff.reduce((sum, d) => sum + d, 0);
    if (!(diffSum > 0)) {
      previous = null;
      run = 0;
      continue;
    }
    // h_{i+1} − h_i = −p_{i+1}·log p_{i+1}: the entropy added by gap i+1 (1-based), diff[i] here.
    const jumps = Array.from({ length: k - 1 }, (_, i) => {
      if (i === 0) return -Infinity;
      const p = diff[i]! / diffSum;
      return p > 0 ? -p * Math.log(p) : 0;
    });
    const bestJump = Math.max(...jumps);
    const iStar = jumps.findIndex((jump) => jump >= bestJump - JUMP_TIE_TOLERANCE);
    const focused = order.slice(0, iStar).sort((p, q) => p - q);
    const key = focused.join(",");
    run = key === previous ? run + 1 : 1;
    previous = key;
    if (run >= window) return { focused, cutoffLayer: l };
  }
  return neverStop;
}
