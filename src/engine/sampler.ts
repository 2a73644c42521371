/**
 * Next-token sampling from a row of logits, and the log-probabilities reported with it.
 *
 * Temperature 0 is greedy: the largest logit, the lowest id among equals. Otherwise
 * the distribution is softmax(logits / temperature), without the tokens less likely
 * than minP times the most likely one (min-p; 0: no cut), cut to the top-k tokens
 * (topK 0: no cut), then to the nucleus (the fewest most likely tokens whose
 * probability, renormalised after top-k, reaches topP; topP 1: no cut), and a token
 * is drawn in proportion to its probability with a seeded xoshiro128** stream: the
 * same seed and the same logits give the same tokens. Tokens are ranked by logit,
 * lower id first among equal logits, so the cuts are exact even with ties.
 *
 * Made for vocabularies of ~150k: one pass of exp over the vocabulary, then
 * quickselect (expected linear time) for top-k and for the nucleus' boundary; only
 * a small final range is ever sorted. NaN logits count as -Infinity.
 */
import { Xoshiro128 } from "../model/normalRandom.ts";

export interface SamplingParams {
  /** 0: greedy; otherwise logits are divided by it. */
  temperature: number;
  /** Nucleus mass in (0, 1]; 1 disables. */
  topP: number;
  /** Keep the k most likely tokens; 0 disables. */
  topK: number;
  /** Drop tokens less likely than minP × the most likely one (after temperature), in [0, 1]; 0 disables. */
  minP?: number;
  /** Any safe integer; without one the sampler seeds itself from crypto random. */
  seed?: number;
}

export class SamplingError extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = "SamplingError";
  }
}

/** Throws SamplingError naming the field when params are out of range. */
export function checkSamplingParams(params: SamplingParams): void {
  const { temperature, topP, topK, seed, minP } = params;
  if (typeof temperature !== "number" || !Number.isFinite(temperature) || temperature < 0) {
    throw new SamplingError(`temperature must be a finite number >= 0, got ${temperature}`);
  }
  if (typeof topP !== "number" || !(topP > 0 && topP <= 1)) throw new SamplingError(`top_p must be in (0, 1], got ${topP}`);
  if (!Number.isSafeInteger(topK) || topK < 0) throw new SamplingError(`top_k must be a non-negative integer (0: off), got ${topK}`);
  if (seed !== undefined && !Number.isSafeInteger(seed)) throw new SamplingError(`seed must be an integer, got ${seed}`);
  if (minP !== undefined && !(typeof minP === "number" && minP >= 0 && minP <= 1)) throw new SamplingError(`min_p must be in [0, 1], got ${minP}`);
}

/** The largest logit's id, the lowest id among equals; NaN counts as -Infinity. */
export function argmax(logits: ArrayLike<number>): number {
  let best = -Infinity;
  let bestId = -1;
  for (let i = 0; i < logits.length; i++) {
    const value = logits[i]!;
    if (value > best) {
      best = value;
      bestId = i;
    }
  }
  if (bestId === -1) {
    if (logits.length === 0) throw new SamplingError("no logits to sample from");
    // All -Infinity (or NaN): every token is impossible.
    throw new SamplingError("every logit is -Infinity or NaN");
  }
  return bestId;
}

// Scratch space shared by all samplers: sample() is synchronous and JavaScript runs one
// call at a time, so one vocabulary-sized pair of buffers serves every request.
let weights = new Float64Array(0);
let order = new Uint32Array(0);

function scratch(size: number): void {
  if (weights.length < size) {
    weights = new Float64Array(size);
    order = new Uint32Array(size);
  }
}

/** Whether token a ranks before token b: larger logit, then lower id. */
function before(logits: Float32Array, a: number, b: number): boolean {
  const x = logits[a]!;
  const y = logits[b]!;
  return x > y || (x === y && a < b);
}

/**
 * Partitions ids[lo, hi) around a median-of-three pivot: afterwards ids[lo, p) rank
 * before ids[p] and ids(p, hi) after it. Returns p. Ranks are distinct (ids break ties).
 */
function partition(logits: Float32Array, ids: Uint32Array, lo: number, hi: number): number {
  const last = hi - 1;
  const mid = lo + ((hi - lo) >>> 1);
  // Median of ids[lo], ids[mid], ids[last] moved to ids[last].
  if (before(logits, ids[mid]!, ids[lo]!)) swap(ids, mid, lo);
  if (before(logits, ids[last]!, ids[lo]!)) swap(ids, last, lo);
  if (before(logits, ids[mid]!, ids[last]!)) swap(ids, mid, last);
  const pivot = ids[last]!;
  let store = lo;
  for (let i = lo; i < last; i++) {
    if (before(logits, ids[i]!, pivot)) swap(ids, i, store++);
  }
  swap(ids, store, last);
  return store;
}

function swap(ids: Uint32Array, i: number, j: number): void {
  const t = ids[i]!;
  ids[i] = ids[j]!;
  ids[j] = t;
}

const SMALL_RANGE = 32;

function sortRange(logits: Float32Array, ids: Uint32Array, lo: number, hi: number): void {
  ids.subarray(lo, hi).sort((a, b) => (before(logits, a, b) ? -1 : before(logits, b, a) ? 1 : 0));
}

/** Rearranges ids[0, n) so that ids[0, k) are the k best ranked (in no particular order). */
function selectTop(logits: Float32Array, ids: Uint32Array, n: number, k: number): void {
  let lo = 0;
  let hi = n;
  while (hi - lo > SMALL_RANGE) {
    const p = partition(logits, ids, lo, hi);
    if (p === k || p === k - 1) return;
    if (p < k) lo = p + 1;
    else hi = p;
  }
  sortRange(logits, ids, lo, hi);
}

/**
 * Rearranges ids[0, n) and returns c: ids[0, c) are the fewest best-ranked tokens whose
 * weight reaches target (all n when rounding leaves the total just short of it).
 */
function selectNucleus(logits: Float32Array, w: Float64Array, ids: Uint32Array, n: number, target: number): number {
  let lo = 0;
  let hi = n;
  let need = target;
  while (hi - lo > SMALL_RANGE) {
    const p = partition(logits, ids, lo, hi);
    let mass = 0;
    for (let i = lo; i < p; i++) mass += w[ids[i]!]!;
    if (mass >= need) {
      hi = p;
      continue;
    }
    const withPivot = mass + w[ids[p]!]!;
    if (withPivot >= need) return p + 1;
    need -= withPivot;
    lo = p + 1;
  }
  sortRange(logits, ids, lo, hi);
  for (let i = lo; i < hi; i++) {
    need -= w[ids[i]!]!;
    if (need <= 0) return i + 1;
  }
  return hi;
}

function cryptoSeed(): number {
  const words = crypto.getRandomValues(new Uint32Array(2));
  return (words[0]! & 0x1fffff) * 4294967296 + words[1]!;
}

export class Sampler {
  readonly params: Readonly<SamplingParams>;
  /** The seed in use (the given one, or the one drawn): logging it makes a run repeatable. */
  readonly seed: number;
  private readonly random: Xoshiro128;

  constructor(params: SamplingParams) {
    checkSamplingParams(params);
    this.params = { ...params };
    this.seed = params.seed ?? cryptoSeed();
    this.random = new Xoshiro128(Math.abs(this.seed), this.seed < 0 ? "sampler, negative seed" : "sampler");
  }

  get greedy(): boolean {
    return this.params.temperature === 0 || this.params.topK === 1;
  }

  /** A uniform number in [0, 1) with 53 random bits. */
  private uniform(): number {
    const high = this.random.nextUint32() >>> 5;
    const low = this.random.nextUint32() >>> 6;
    return (high * 67108864 + low) / 9007199254740992;
  }

  /** The next token's id. */
  sample(logits: Float32Array): number {
    if (this.greedy) return argmax(logits);
    const support = selectSupport(logits, this.params);
    if (support === null) return argmax(logits);
    const { ids, n, total } = support;
    const w = weights;
    let remaining = this.uniform() * total;
    let last = -1;
    for (let i = 0; i < n; i++) {
      const id = ids === null ? i : ids[i]!;
      const weight = w[id]!;
      if (weight > 0) last = id;
      remaining -= weight;
      if (remaining < 0) return id;
    }
    return last; // rounding left a sliver past the last token
  }
}

/** The tokens a draw may return: ids[0, n) (every id below n when ids is null), of weights weights[id] summing to total. */
interface Support {
  ids: Uint32Array | null;
  n: number;
  total: number;
}

/** Up to this k, top-k keeps a heap of the best so far (most tokens fail one comparison); beyond, quickselect. */
const HEAP_TOP_K = 2048;

/**
 * Puts the k best-ranked tokens (at most k; NaN and -Infinity logits left out) in
 * ids[0, count) in no particular order and returns count.
 */
function selectTopK(logits: Float32Array, ids: Uint32Array, k: number): number {
  const vocab = logits.length;
  if (k > HEAP_TOP_K) {
    let n = 0;
    for (let i = 0; i < vocab; i++) if (logits[i]! > -Infinity) ids[n++] = i;
    if (n > k) selectTop(logits, ids, n, k);
    return Math.min(n, k);
  }
  // A heap whose root is the worst of the best k so far. Ids come in increasing order,
  // so a later token ranks before the root only with a strictly larger logit.
  let size = 0;
  for (let i = 0; i < vocab; i++) {
    const value = logits[i]!;
    if (!(value > -Infinity)) continue;
    if (size < k) {
      // Sift up: parents rank after their children.
      let at = size++;
      while (at > 0) {
        const parent = (at - 1) >> 1;
        if (!before(logits, ids[parent]!, i)) break;
        ids[at] = ids[parent]!;
        at = parent;
      }
      ids[at] = i;
    } else if (value > logits[ids[0]!]!) {
      // Replace the root and sift down.
      let at = 0;
      for (;;) {
        const left = 2 * at + 1;
        if (left >= size) break;
        const right = left + 1;
        const worse = right < size && before(logits, ids[left]!, ids[right]!) ? right : left;
        if (!before(logits, i, ids[worse]!)) break;
        ids[at] = ids[worse]!;
        at = worse;
      }
      ids[at] = i;
    }
  }
  return size;
}

/** The support of a draw, or null when a logit is +Infinity (the draw is then the argmax). */
function selectSupport(logits: Float32Array, params: Readonly<SamplingParams>): Support | null {
  const max = logits[argmax(logits)]!;
  if (max === Infinity) return null;
  const vocab = logits.length;
  scratch(vocab);
  const w = weights;
  const ids = order;
  const scale = 1 / params.temperature;
  const { topK, topP } = params;
  // The most likely token has weight 1, so min-p keeps the weights of at least minP.
  const minP = params.minP ?? 0;

  // Weights exp((logit - max) / T), NaN as 0 (and below min-p as 0). Tokens of weight 0
  // are never drawn and rank last.
  let n: number;
  let total = 0;
  if (topK > 0 && topK < vocab) {
    const count = selectTopK(logits, ids, topK);
    n = 0;
    for (let i = 0; i < count; i++) {
      const id = ids[i]!;
      const weight = Math.exp((logits[id]! - max) * scale);
      if (weight > 0 && weight >= minP) {
        w[id] = weight;
        total += weight;
        ids[n++] = id;
      }
    }
  } else {
    for (let i = 0; i < vocab; i++) {
      const weight = Math.exp((logits[i]! - max) * scale);
      const clean = weight === weight && weight >= minP ? weight : 0;
      w[i] = clean;
      total += clean;
    }
    if (topP === 1) return { ids: null, n: vocab, total };
    n = 0;
    const floor = nucleusFloor(topP, total, vocab);
    for (let i = 0; i < vocab; i++) {
      const weight = w[i]!;
      if (weight >= floor && weight > 0) ids[n++] = i;
    }
    return nucleus(logits, ids, n, topP * total);
  }
  if (topP === 1) return { ids, n, total };
  const floor = nucleusFloor(topP, total, n);
  let kept = 0;
  for (let i = 0; i < n; i++) {
    const id = ids[i]!;
    if (w[id]! >= floor) ids[kept++] = id;
  }
  return nucleus(logits, ids, kept, topP * total);
}

/**
 * Among count tokens of total weight, those lighter than (1 - p)·total / count hold less
 * than (1 - p)·total together, so the heavier ones reach the nucleus mass p·total: the
 * nucleus lies among them, and only they need ranking.
 */
function nucleusFloor(topP: number, total: number, count: number): number {
  return ((1 - topP) * total) / count;
}

function nucleus(logits: Float32Array, ids: Uint32Array, count: number, target: number): Support {
  const n = selectNucleus(logits, weights, ids, count, target);
  let total = 0;
  for (let i = 0; i < n; i++) total += weights[ids[i]!]!;
  return { ids, n, total };
}

/**
 * The distribution a Sampler with these params draws from: the tokens it may return
 * with their probabilities, most likely first (lower id first among equals). For
 * tests and diagnostics; sampling itself never sorts the support.
 */
export function samplingDistribution(logits: Float32Array, params: SamplingParams): { id: number; probability: number }[] {
  checkSamplingParams(params);
  if (params.temperature === 0 || params.topK === 1) return [{ id: argmax(logits), probability: 1 }];
  const support = selectSupport(logits, params);
  if (support === null) return [{ id: argmax(logits), probability: 1 }];
  const { ids, n, total } = support;
  const chosen = (ids === null ? Array.from({ length: n }, (_, i) => i) : Array.from(ids.subarray(0, n))).filter((id) => weights[id]! > 0);
  chosen.sort((a, b) => (before(logits, a, b) ? -1 : 1));
  return chosen.map((id) => ({ id, probability: weights[id]! / total }));
}

export interface TokenLogprobs {
  /** log p(chosen) under softmax(logits). */
  logprob: number;
  /** The topN most likely tokens, most likely first (lower id first among equals). */
  top: { id: number; logprob: number }[];
}

/**
 * Log-probabilities from the raw logits (before temperature, top-k and top-p, as
 * OpenAI reports them), in float64: the chosen token's and the topN largest.
 */
export function tokenLogprobs(logits: Float32Array, chosen: number, topN: number): TokenLogprobs {
  if (!Number.isSafeInteger(chosen) || chosen < 0 || chosen >= logits.length) {
    throw new SamplingError(`token ${chosen} is outside the ${logits.length} logits`);
  }
  if (!Number.isSafeInteger(topN) || topN < 0) throw new SamplingError(`topN must be a non-negative integer, got ${topN}`);
  const max = logits[argmax(logits)]!;
  if (max === Infinity) throw new SamplingError("a logit is +Infinity");
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    const value = logits[i]!;
    if (value === value) sum += Math.exp(value - max);
  }
  const logTotal = max + Math.log(sum);
  const logprobOf = (id: number) => {
    const value = logits[id]!;
    return value === value ? value - logTotal : -Infinity;
  };

  // The topN best by insertion into a short ranked list.
  const count = Math.min(topN, logits.length);
  const top: number[] = [];
  for (let i = 0; i < logits.length && count > 0; i++) {
    if (logits[i] !== logits[i]) continue; // NaN
    if (top.length === count && !before(logits, i, top[count - 1]!)) continue;
    let at = top.length === count ? count - 1 : top.length;
    while (at > 0 && before(logits, i, top[at - 1]!)) {
      top[at] = top[at - 1]!;
      at--;
    }
    top[at] = i;
  }
  return { logprob: logprobOf(chosen), top: top.map((id) => ({ id, logprob: logprobOf(id) })) };
}
