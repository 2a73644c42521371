/**
 * Cache-Craft's reuse scores of a chunk-cache variant (Cache-Craft §3.1–3.2, eq. 6–12): how much
 * of a cached chunk's contextualization survives in a new prompt, how contextualized the chunk
 * was in the first place, and from both the fraction of its tokens to recompute.
 *
 * Notation. A prompt is chunks C_0 (the template head), C_1..C_n (documents) and the question.
 * A variant of chunk C_i is its KV computed after some prefix of other chunks (its "old" prefix);
 * a new request puts C_i after a "new" prefix. Chunks are named by their hashes (chunkHash.ts).
 * Per-layer attention masses are sums of softmax weights (each query token's row sums to 1).
 *
 * Everything here is pure: no I/O, inputs are not modified.
 */
import { kernels } from "../kernels/index.ts";
import { shiftContextualization } from "./contextShift.ts";

/** What is kept per chunk-cache variant to score it against new prefixes. */
export interface VariantMetadata {
  /** Hashes of the chunks before it when it was computed, in order. */
  prefix: string[];
  /**
   * Layer-averaged inter(i, j) per prefix chunk j (by hash): the attention mass of this chunk's
   * tokens on chunk j. A hash repeated in the prefix has the masses of its copies summed.
   */
  interByPrefix: Record<string, number>;
  /** Cache Context Impact (eq. 11), in [0, 1]. */
  cci: number;
  /** Per token of the chunk: layer-averaged attention mass on all prefix chunks (eq. 14). */
  tokenInter: Float32Array;
  /**
   * Per token: how far its KV moves when the prefix is taken away (contextShift.ts). When
   * present and the scores are "shift", it replaces tokenInter in the ranking and CCI in the CFO.
   */
  tokenShift?: Float32Array;
}

/**
 * What Cache-Craft's scores are made of: "attention" (the paper: CCI from attention masses,
 * tokens ranked by tokenInter) or "shift" (measured KV shift, where a variant has it).
 */
export type ContextScores = "attention" | "shift";

export const CONTEXT_SCORES: readonly ContextScores[] = ["shift", "attention"];

/** The chunk's contextualisation the CFO uses: CCI, or the shift-based one. */
export function contextualization(meta: VariantMetadata, scores: ContextScores): number {
  return scores === "shift" && meta.tokenShift !== undefined ? shiftContextualization(meta.tokenShift) : meta.cci;
}

/** The per-token scores eq. 14 ranks by: tokenInter, or the measured shift. */
export function tokenScores(meta: VariantMetadata, scores: ContextScores): Float32Array {
  return scores === "shift" && meta.tokenShift !== undefined ? meta.tokenShift : meta.tokenInter;
}

/** β, γ, β′ and the CFO of one variant for one new prefix. */
export interface ReuseScore {
  /** Cache Fix Overhead (eq. 12): the fraction of the chunk's tokens to recompute, α·CCI·(1−β′). */
  cfo: number;
  /** Prefix overlap (eq. 6). */
  beta: number;
  /** Order penalty (eq. 7). */
  gamma: number;
  /** Adjusted prefix overlap (eq. 8). */
  betaPrime: number;
}

function inter(meta: VariantMetadata, hash: string): number {
  return Object.hasOwn(meta.interByPrefix, hash) ? meta.interByPrefix[hash]! : 0;
}

/** The distinct hashes of a prefix, first occurrences, in order. */
function distinct(prefix: readonly string[]): string[] {
  return [...new Set(prefix)];
}

/**
 * β (eq. 6): Σ inter(i, j) over the old prefix chunks j that are also in newPrefix, divided by
 * Σ inter(i, j) over all old prefix chunks; in [0, 1]. Chunks count once however often they
 * repeat (interByPrefix already sums a repeated chunk's copies); a prefix chunk missing from
 * interByPrefix has inter 0.
 *
 * Edge cases, both 1: an empty old prefix (the variant was computed without context, so no
 * contextualization can be lost), and a zero total (the chunk put no attention on its prefix, so
 * again nothing depends on it). Note that β measures only what the old context contributed:
 * chunks new in newPrefix that the cached KV never saw do not lower it (as in the paper).
 */
export function prefixOverlap(meta: VariantMetadata, newPrefix: readonly string[]): number {
  return keptMassShare(meta, new Set(newPrefix), "prefixOverlap");
}

/**
 * Σ inter(i, j) over the distinct old prefix chunks j in `kept` / Σ over all of them, in [0, 1];
 * 1 for an empty old prefix or a zero total (see prefixOverlap).
 */
function keptMassShare(meta: VariantMetadata, kept: ReadonlySet<string>, fn: string): number {
  const oldChunks = distinct(meta.prefix);
  if (oldChunks.length === 0) return 1;
  let shared = 0;
  let total = 0;
  for (const hash of oldChunks) {
    const value = inter(meta, hash);
    if (!(value >= 0) || !Number.isFinite(value)) {
      throw new RangeError(`${fn}: interByPrefix[${hash}] must be finite and >= 0 (got ${value})`);
    }
    total += value;
    if (kept.has(hash)) shared += value;
  }
  if (total === 0) return 1;
  return Math.min(1, shared / total);
}

/**
 * β for the "shift" scores: like eq. 6, but an old prefix chunk counts as kept only where its
 * surroundings are kept too: in the common trailing run of both prefixes (the same chunks
 * between it and this one), or as the first chunk of both (the head: the same KV at the same
 * place, and the start of the sequence is where idle attention sinks). Eq. 6 keeps any chunk
 * still present anywhere, so a chunk that copies "the record right before me" scores β = 1 when
 * another record is slipped in between (its old neighbour is still in the prompt, only further
 * up); here it scores the mass it lost. Same edge cases as prefixOverlap (1 for an empty old
 * prefix or zero total mass).
 */
export function localPrefixOverlap(meta: VariantMetadata, newPrefix: readonly string[]): number {
  const old = meta.prefix;
  let trail = 0;
  while (trail < old.length && trail < newPrefix.length && old[old.length - 1 - trail] === newPrefix[newPrefix.length - 1 - trail]) trail++;
  const kept = new Set(old.slice(old.length - trail));
  if (old.length > 0 && newPrefix.length > 0 && old[0] === newPrefix[0]) kept.add(old[0]!);
  return keptMassShare(meta, kept, "localPrefixOverlap");
}

/**
 * γ (eq. 7): the normalized Kendall-τ distance between the order of the chunks shared by both
 * prefixes in oldPrefix and their order in newPrefix: discordant pairs / (m(m−1)/2), in [0, 1];
 * 0 when fewer than 2 chunks are shared. A chunk repeated in a prefix is placed at its first
 * occurrence.
 */
export function orderPenalty(oldPrefix: readonly string[], newPrefix: readonly string[]): number {
  const newChunks = distinct(newPrefix);
  const inNew = new Set(newChunks);
  const oldShared = distinct(oldPrefix).filter((hash) => inNew.has(hash));
  if (oldShared.length < 2) return 0;
  const ids = new Map(oldShared.map((hash, i) => [hash, i]));
  const a = Int32Array.from(oldShared, (_, i) => i);
  const b = Int32Array.from(newChunks.filter((hash) => ids.has(hash)), (hash) => ids.get(hash)!);
  return kernels().kendallTauDistance(a, b);
}

/** β′ (eq. 8): β·(1 − γ). */
export function adjustedPrefixOverlap(beta: number, gamma: number): number {
  checkUnit("adjustedPrefixOverlap", "beta", beta);
  checkUnit("adjustedPrefixOverlap", "gamma", gamma);
  return beta * (1 - gamma);
}

/**
 * CFO (eq. 12): α·CCI·(1 − β′), the fraction of the chunk's tokens to recompute (1 = all of
 * them; values above 1 are left for the caller to cap). α ≥ 0 scales the recompute; CCI and β′
 * are in [0, 1].
 */
export function cacheFixOverhead(alpha: number, cci: number, betaPrime: number): number {
  if (!(alpha >= 0) || !Number.isFinite(alpha)) throw new RangeError(`cacheFixOverhead: alpha must be finite and >= 0 (got ${alpha})`);
  checkUnit("cacheFixOverhead", "cci", cci);
  checkUnit("cacheFixOverhead", "betaPrime", betaPrime);
  return alpha * cci * (1 - betaPrime);
}

/**
 * β, γ, β′ and CFO of a variant for a new prefix (eq. 6, 7, 8, 12). With "shift" scores and a
 * measured shift: β is localPrefixOverlap, β′ = β, and the CFO's contextualisation is the
 * shift-based one.
 */
export function reuseScore(meta: VariantMetadata, newPrefix: readonly string[], alpha: number, scores: ContextScores = "attention"): ReuseScore {
  const gamma = orderPenalty(meta.prefix, newPrefix);
  // The local β already requires the kept chunks' order (and neighbours) to be unchanged.
  const local = scores === "shift" && meta.tokenShift !== undefined;
  const beta = local ? localPrefixOverlap(meta, newPrefix) : prefixOverlap(meta, newPrefix);
  const betaPrime = local ? beta : adjustedPrefixOverlap(beta, gamma);
  return { cfo: cacheFixOverhead(alpha, Math.min(1, contextualization(meta, scores)), betaPrime), beta, gamma, betaPrime };
}

/** The logistic function of eq. 11: 1 / (1 + e^(−x)). */
function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

/** ā, b̄ (eq. 9–10) and CCI (eq. 11) of one chunk. */
export interface ChunkContextualization {
  /** Layer average of Σ_{j<i} inter(C_j, C_i) / (|C_i|·|C_j|). */
  a: number;
  /** Layer average of intra(C_i) / |C_i|². */
  b: number;
  /** 1 / (1 + e^(−ā/b̄)), in [0.5, 1]. */
  cci: number;
}

/**
 * ā, b̄ and CCI (eq. 9–11) of chunk `chunkIndex` from per-layer chunk-to-chunk attention masses:
 * matrices[l][x*nChunks + y] is the total attention mass of chunk x's tokens on chunk y in layer
 * l, so inter(C_j, C_i) for the cached chunk i and a prefix chunk j < i is matrix[i*n + j] and
 * intra(C_i) is matrix[i*n + i]. Only row chunkIndex is read. chunkSizes[x] = |C_x| in tokens.
 *
 * Edge cases: a prefix chunk of size 0 contributes 0 to a (its inter is 0 anyway); a chunk i of
 * size 0 has a = b = 0. The ratio ā/b̄ is +∞ when b̄ = 0 < ā (CCI 1) and 0 when both are 0. Note
 * that the paper's sigmoid maps "no outside influence" (ā = 0, e.g. chunk 0 or an empty prefix)
 * to CCI = 0.5, not 0; such a variant still scores CFO 0 because its β is 1.
 */
export function chunkContextualization(
  perLayerChunkMatrices: readonly Float32Array[],
  nChunks: number,
  chunkIndex: number,
  chunkSizes: readonly number[],
): ChunkContextualization {
  const name = "chunkContextualization";
  checkCount(name, "nChunks", nChunks);
  if (!Number.isInteger(chunkIndex) || chunkIndex < 0 || chunkIndex >= nChunks) {
    throw new RangeError(`${name}: chunkIndex must be an integer in [0, ${nChunks}) (got ${chunkIndex})`);
  }
  if (chunkSizes.length !== nChunks) throw new RangeError(`${name}: chunkSizes must have ${nChunks} entries (got ${chunkSizes.length})`);
  chunkSizes.forEach((size, x) => checkCount(name, `chunkSizes[${x}]`, size));
  if (perLayerChunkMatrices.length === 0) throw new RangeError(`${name}: at least one layer is needed`);
  const size = chunkSizes[chunkIndex]!;
  let aSum = 0;
  let bSum = 0;
  perLayerChunkMatrices.forEach((matrix, l) => {
    if (matrix.length !== nChunks * nChunks) {
      throw new RangeError(`${name}: layer ${l} must have ${nChunks}x${nChunks} entries (got ${matrix.length})`);
    }
    if (size === 0) return;
    const row = chunkIndex * nChunks;
    for (let j = 0; j < chunkIndex; j++) {
      const mass = checkMass(name, matrix[row + j]!, l);
      if (chunkSizes[j]! > 0) aSum += mass / (size * chunkSizes[j]!);
    }
    bSum += checkMass(name, matrix[row + chunkIndex]!, l) / (size * size);
  });
  const a = aSum / perLayerChunkMatrices.length;
  const b = bSum / perLayerChunkMatrices.length;
  const ratio = b > 0 ? a / b : a > 0 ? Infinity : 0;
  return { a, b, cci: sigmoid(ratio) };
}

/**
 * Per-layer per-token chunk masses of one chunk's tokens: layer l is a Float32Array
 * [tokens][nChunks], row-major, entry [t][y] = attention mass of the chunk's token t on chunk y.
 * Returns the number of tokens (the same in every layer).
 */
function checkTokenMasses(name: string, perLayerTokenMass: readonly Float32Array[], nChunks: number): number {
  checkCount(name, "nChunks", nChunks);
  if (nChunks === 0) throw new RangeError(`${name}: nChunks must be positive`);
  if (perLayerTokenMass.length === 0) throw new RangeError(`${name}: at least one layer is needed`);
  const length = perLayerTokenMass[0]!.length;
  if (length % nChunks !== 0) throw new RangeError(`${name}: layer 0 has ${length} entries, not a multiple of nChunks = ${nChunks}`);
  perLayerTokenMass.forEach((layer, l) => {
    if (layer.length !== length) throw new RangeError(`${name}: layer ${l} has ${layer.length} entries, layer 0 has ${length}`);
  });
  return length / nChunks;
}

/**
 * interByPrefix of a variant: for each prefix chunk j (column j of the per-token masses; the
 * prefix chunks are columns 0..prefix.length−1 in order, the cached chunk itself and anything
 * after it are ignored), the layer average of Σ_t mass[t][j], keyed by prefix[j]; a hash repeated
 * in the prefix gets the sum of its columns.
 */
export function buildInterByPrefix(
  perLayerTokenMass: readonly Float32Array[],
  nChunks: number,
  prefix: readonly string[],
): Record<string, number> {
  const name = "buildInterByPrefix";
  const tokens = checkTokenMasses(name, perLayerTokenMass, nChunks);
  if (prefix.length >= nChunks) throw new RangeError(`${name}: the prefix (${prefix.length} chunks) must leave a column for the chunk itself (nChunks = ${nChunks})`);
  const sums = new Float64Array(prefix.length);
  perLayerTokenMass.forEach((layer, l) => {
    for (let t = 0; t < tokens; t++) {
      for (let j = 0; j < prefix.length; j++) sums[j]! += checkMass(name, layer[t * nChunks + j]!, l);
    }
  });
  const result: Record<string, number> = Object.create(null);
  prefix.forEach((hash, j) => {
    result[hash] = (result[hash] ?? 0) + sums[j]! / perLayerTokenMass.length;
  });
  return { ...result };
}

/**
 * tokenInter of a variant: per token t, the layer average of Σ_{j<prefixLength} mass[t][j] (its
 * attention mass on all prefix chunks, the score of eq. 14).
 */
export function buildTokenInter(perLayerTokenMass: readonly Float32Array[], nChunks: number, prefixLength: number): Float32Array {
  const name = "buildTokenInter";
  const tokens = checkTokenMasses(name, perLayerTokenMass, nChunks);
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength >= nChunks) {
    throw new RangeError(`${name}: prefixLength must be an integer in [0, ${nChunks}) (got ${prefixLength})`);
  }
  const sums = new Float64Array(tokens);
  perLayerTokenMass.forEach((layer, l) => {
    for (let t = 0; t < tokens; t++) {
      let mass = 0;
      for (let j = 0; j < prefixLength; j++) mass += checkMass(name, layer[t * nChunks + j]!, l);
      sums[t]! += mass;
    }
  });
  return Float32Array.from(sums, (sum) => sum / perLayerTokenMass.length);
}

/**
 * All of a new variant's metadata from its tokens' per-layer chunk masses (see buildInterByPrefix;
 * column prefix.length is the chunk itself, its intra mass) and the sizes of its prefix chunks.
 */
export function buildVariantMetadata(
  perLayerTokenMass: readonly Float32Array[],
  nChunks: number,
  prefix: readonly string[],
  prefixSizes: readonly number[],
): VariantMetadata {
  const name = "buildVariantMetadata";
  const tokens = checkTokenMasses(name, perLayerTokenMass, nChunks);
  if (prefixSizes.length !== prefix.length) throw new RangeError(`${name}: prefixSizes must have ${prefix.length} entries (got ${prefixSizes.length})`);
  const k = prefix.length;
  // Row k of each layer's chunk matrix (the only row eq. 9 reads), as a k+1 chunk matrix.
  const n = k + 1;
  const matrices = perLayerTokenMass.map((layer) => {
    const matrix = new Float32Array(n * n);
    const row = new Float64Array(n);
    for (let t = 0; t < tokens; t++) for (let y = 0; y <= k; y++) row[y]! += layer[t * nChunks + y]!;
    for (let y = 0; y <= k; y++) matrix[k * n + y] = row[y]!;
    return matrix;
  });
  const { cci } = chunkContextualization(matrices, n, k, [...prefixSizes, tokens]);
  return {
    prefix: [...prefix],
    interByPrefix: buildInterByPrefix(perLayerTokenMass, nChunks, prefix),
    cci,
    tokenInter: buildTokenInter(perLayerTokenMass, nChunks, k),
  };
}

/** What chooseVariant needs of a variant. */
export interface ScorableVariant {
  meta: VariantMetadata;
  /** Recency for ties: lastUsedAt, else createdAt, else 0. */
  lastUsedAt?: number;
  createdAt?: number;
}

/** The chosen variant and its scores. */
export interface ChosenVariant<V> extends ReuseScore {
  variant: V;
}

function sharedCount(oldPrefix: readonly string[], newPrefix: readonly string[]): number {
  const present = new Set(newPrefix);
  return distinct(oldPrefix).filter((hash) => present.has(hash)).length;
}

/**
 * The variant with the lowest CFO for newPrefix (Cache-Craft §3.3), null when there is none.
 * Ties (exact float equality, e.g. several variants at CFO 0) go to more prefix overlap: the
 * higher β′, then more chunks shared with newPrefix (so an exact-prefix variant beats one computed
 * without context); then the most recent (lastUsedAt, else createdAt); then the earlier in the
 * list.
 */
export function chooseVariant<V extends ScorableVariant>(
  variants: readonly V[],
  newPrefix: readonly string[],
  alpha: number,
  scores: ContextScores = "attention",
): ChosenVariant<V> | null {
  let best: ChosenVariant<V> | null = null;
  let bestShared = 0;
  let bestRecency = 0;
  for (const variant of variants) {
    const score = reuseScore(variant.meta, newPrefix, alpha, scores);
    const shared = sharedCount(variant.meta.prefix, newPrefix);
    const recency = variant.lastUsedAt ?? variant.createdAt ?? 0;
    const better =
      best === null ||
      score.cfo < best.cfo ||
      (score.cfo === best.cfo &&
        (score.betaPrime > best.betaPrime ||
          (score.betaPrime === best.betaPrime && (shared > bestShared || (shared === bestShared && recency > bestRecency)))));
    if (better) {
      best = { variant, ...score };
      bestShared = shared;
      bestRecency = recency;
    }
  }
  return best;
}

function checkUnit(fn: string, name: string, value: number): void {
  if (!(value >= 0 && value <= 1)) throw new RangeError(`${fn}: ${name} must be in [0, 1] (got ${value})`);
}

function checkCount(fn: string, name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${fn}: ${name} must be a non-negative integer (got ${value})`);
}

function checkMass(fn: string, value: number, layer: number): number {
  if (!(value >= 0) || !Number.isFinite(value)) throw new RangeError(`${fn}: attention masses must be finite and >= 0 (layer ${layer} has ${value})`);
  return value;
}
