/**
 * Which reused tokens to recompute when chunk-caches are stitched into a new prompt:
 *
 * - Cache-Craft (§3.2.1, eq. 12–14): every reused chunk gets a share of the budget proportional
 *   to its CFO·|C_i|, and within the chunk its most contextualized tokens (by tokenInter).
 * - ProphetKV (Appendix A, Algorithm 1): the question's attention on the reused tokens, summed over
 *   its query rows and fused over all layers, one global top-budget over the reused positions.
 * - Cache-Craft Algorithm 1 (§3.2.2): the "focused" chunks after which recomputation of the
 *   others stops.
 * - EPIC's LegoLink (Hu et al. 2024, §4): the first k tokens of every reused chunk, the ones that
 *   acted as that chunk's attention sink when it was computed after another prefix.
 *
 * Pure functions, no I/O; selections are sorted ascending.
 */
import { kernels } from "../kernels/index.ts";

/**
 * How reused chunk-caches are fixed: "cachecraft" (eq. 14 per chunk), "prophet" (query-driven
 * global top-k), "epic" (EPIC/LegoLink: the first tokens of every reused chunk, the peer
 * baseline), "none" (reuse as is), "full" (recompute everything: no reuse), "prefix" (exact
 * prefix caching only: reuse only the cached run that matches the prompt's start exactly, the
 * benchmark baseline).
 */
export type RecomputePolicy = "cachecraft" | "prophet" | "epic" | "none" | "full" | "prefix";

export const RECOMPUTE_POLICIES: readonly RecomputePolicy[] = ["cachecraft", "prophet", "epic", "none", "full", "prefix"];

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

/**
 * EPIC's per-chunk k from a token budget: the budget spread evenly over the reused chunks, so the
 * same recompute ratio means the same number of tokens as for the other policies. Every chunk gets
 * floor(budget / n); a chunk shorter than its share is recomputed whole and what it cannot take is
 * spread evenly over the longer ones (water-filling with equal weights); the tokens left after the
 * floors, one each, go to the earliest chunks that still have room. So the counts sum to exactly
 * min(floor(budgetTokens), Σ|C_i|), each at most |C_i|, and differ by at most one between chunks
 * that are not recomputed whole. (The paper fixes k per deployment, e.g. 16 or 32 tokens; fixing
 * the total instead makes the policies comparable token for token.)
 */
export function epicShares(chunkSizes: readonly number[], budgetTokens: number): number[] {
  const fn = "epicSelection";
  chunkSizes.forEach((size, i) => {
    if (!Number.isInteger(size) || size < 0) throw new RangeError(`${fn}: chunk ${i} size must be a non-negative integer (got ${size})`);
  });
  const total = chunkSizes.reduce((sum, size) => sum + size, 0);
  let remaining = Math.min(checkBudget(fn, budgetTokens), total);
  const shares = chunkSizes.map(() => 0);
  // Smallest chunks first: those that fit under the even share are taken whole.
  const bySize = chunkSizes.map((_, i) => i).sort((p, q) => chunkSizes[p]! - chunkSizes[q]! || p - q);
  let open = bySize.length;
  let next = 0;
  while (next < bySize.length && chunkSizes[bySize[next]!]! <= Math.floor(remaining / open)) {
    const i = bySize[next]!;
    shares[i] = chunkSizes[i]!;
    remaining -= chunkSizes[i]!;
    open--;
    next++;
  }
  if (open === 0) return shares;
  const even = Math.floor(remaining / open);
  const rest = bySize.slice(next).sort((p, q) => p - q);
  for (const i of rest) shares[i] = even;
  remaining -= even * open;
  for (const i of rest) {
    if (remaining === 0) break;
    if (shares[i]! < chunkSizes[i]!) {
      shares[i]!++;
      remaining--;
    }
  }
  return shares;
}

/**
 * EPIC's LegoLink selection: per reused chunk (its size), the local indices 0..k_i−1 of its first
 * k_i tokens, k_i from epicShares. The first tokens of a chunk computed after some prefix are
 * where its attention sank; recomputed after the new prefix they stop pulling the chunk's
 * attention (and the question's) away from the tokens that follow.
 */
export function epicSelection(chunkSizes: readonly number[], budgetTokens: number): Uint32Array[] {
  return epicShares(chunkSizes, budgetTokens).map((k) => Uint32Array.from({ length: k }, (_, t) => t));
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
 *
 * `fusion` (default: the paper's attention alone) ranks by the measured shift instead, or by
 * attention fused with it (ProphetScores): the question's attention says what the answer needs,
 * the shift what went stale; the span decay applies to the attention before fusing.
 */
export function prophetSelection(
  perLayerMass: readonly Float32Array[],
  queries: number,
  len: number,
  candidates: readonly PositionRange[],
  budgetTokens: number,
  spanDecay = 0,
  fusion?: ProphetFusion,
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
  const scores = fusion === undefined || fusion.scores === "attention" ? Float32Array.from(fused) : fuseWithShift(fused, positions, fusion, budget);
  const top = kernels().topK(scores, budget);
  return Uint32Array.from(top, (c) => positions[c]!).sort();
}

/**
 * What ranks prophet's reused tokens: "attention" (the paper: the question's fused attention, with
 * the span decay), "shift" (the measured KV shift alone: what went stale, question-blind), or a
 * fusion of both: "product" (attention × d/(1+d)), "rank-sum" (the sum of the two ranks) or
 * "shift-gated" (attention among the 2·budget stalest tokens only).
 */
export type ProphetScores = "attention" | "shift" | "product" | "rank-sum" | "shift-gated";

export const PROPHET_SCORES: readonly ProphetScores[] = ["attention", "shift", "product", "rank-sum", "shift-gated"];

/**
 * What ranks prophet's tokens unless configured (`ctxr serve --prophet-scores`): attention × shift.
 * On the quality model's family b it recovers the oracle's tokens as well as the shift alone and
 * answers 98.3% at ratio 0.2 against the paper's 56.7% (BENCHMARKS.md, issue 31).
 */
export const DEFAULT_PROPHET_SCORES: ProphetScores = "product";

/** prophetSelection's fusion: the scores and every sequence position's measured shift (length len; only reused positions are read). */
export interface ProphetFusion {
  scores: ProphetScores;
  shift: Float32Array;
}

/** 0 for the highest score, ties to the lower candidate. */
function ranks(values: ArrayLike<number>): Float64Array {
  const order = Array.from({ length: values.length }, (_, c) => c).sort((p, q) => values[q]! - values[p]! || p - q);
  const out = new Float64Array(values.length);
  order.forEach((c, r) => (out[c] = r));
  return out;
}

/**
 * The candidates' scores under a shift-using ProphetScores, for a top-budget (ties to the lower
 * position). The shift is normalised as d/(1+d) in [0, 1) (as shiftContextualization does), so a
 * product does not let one huge shift outweigh any attention.
 */
function fuseWithShift(attention: Float64Array, positions: Uint32Array, fusion: ProphetFusion, budget: number): Float32Array {
  const fn = "prophetSelection";
  const n = positions.length;
  const stale = new Float64Array(n);
  for (let c = 0; c < n; c++) {
    const d = fusion.shift[positions[c]!];
    if (d === undefined || !(d >= 0) || !Number.isFinite(d)) throw new RangeError(`${fn}: the shift at position ${positions[c]} must be finite and >= 0 (got ${d})`);
    stale[c] = d / (1 + d);
  }
  switch (fusion.scores) {
    case "shift":
      return Float32Array.from(stale);
    case "product":
      return Float32Array.from(attention, (a, c) => a * stale[c]!);
    case "rank-sum": {
      const byAttention = ranks(attention);
      const byShift = ranks(stale);
      return Float32Array.from(byAttention, (r, c) => 2 * n - r - byShift[c]!);
    }
    case "shift-gated": {
      // Outside the gate a token ranks below every gated one (attention is >= 0), in attention order.
      const gate = Math.min(n, 2 * budget);
      const gated = new Set(Array.from(ranks(stale)).flatMap((r, c) => (r < gate ? [c] : [])));
      const ceiling = attention.reduce((m, a) => Math.max(m, a), 0) + 1;
      return Float32Array.from(attention, (a, c) => (gated.has(c) ? a + ceiling : a));
    }
    default:
      throw new RangeError(`${fn}: unknown scores '${fusion.scores}'`);
  }
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
