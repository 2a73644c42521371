/**
 * The prefill of a segmented prompt with chunk-cache reuse (Cache-Craft,
 * ProphetKV). For one sequence whose block table already holds the prompt:
 *
 * 1. plan (prefillPlan.ts): the exact prefix (tokens the automatic prefix cache
 *    already put in the table, or exact-prefix variants), reused chunk variants
 *    (lowest CFO) and chunks to compute;
 * 2. place every reused segment's KV at its positions (RELOCATE from the device
 *    tier, IMPORT from host or disk) — re-rotated, so a chunk serves any position;
 * 3. compute: the missing chunks (with attention statistics for their metadata),
 *    the recompute set of the reused chunks and the question, with causal
 *    attention over the merged cache:
 *    - cachecraft: the top ⌈CFO·|C|⌉ most contextualised tokens of each reused
 *      chunk (budget-normalised), recomputed with the question in one pass, with
 *      focused-chunk early stop;
 *    - prophet: stage I runs the question over the reused KV and records its
 *      attention in every layer; the fused scores (optionally with each variant's
 *      measured shift) give one global top set; stage II recomputes it with the
 *      question;
 *    - epic (EPIC's LegoLink): the first k tokens of every reused chunk, the
 *      budget spread evenly over the chunks, recomputed with the question;
 *    - none: only the missing chunks and the question;
 *    - prefix: exact prefix reuse only; full: no cache at all;
 * 4. return the last question token's logits, the usage accounting and the
 *    store-back (new chunks into the cache, hits promoted), which the caller runs
 *    after the first token has gone out.
 *
 * On a model with two KV cache groups (sliding-window layers, Gemma 3; options.sliding) the
 * sliding-window group holds only what a prefill chunk would (slidingPrefillWindow.ts): placing
 * writes a reused chunk's global layers, its sliding layers are written as the windows of the
 * FORWARDs reach them (each layer's K rotated with its own RoPE base), and the FORWARDs run in
 * parts of at most the scheduler's chunk, so computed and recomputed tokens write both groups.
 */
import type { ForwardRequest, ForwardResult, ForwardSequence, RunnerInfo } from "../runner/runnerProtocol.ts";
import type { ChunkCache, KvTier, LocalKvTier } from "./chunkCache.ts";
import { variantMetadataFromStats } from "./variantMetadata.ts";
import { planPrefill, type SegmentPlan } from "./prefillPlan.ts";
import {
  DEFAULT_PROPHET_SCORES,
  DEFAULT_PROPHET_SPAN_DECAY,
  cacheCraftSelection,
  epicSelection,
  prophetSelection,
  type ProphetFusion,
  type ProphetQueryRows,
  type ProphetScores,
  type RecomputePolicy,
} from "./recomputeSelection.ts";
import { measureContextShift, type ContextShiftRunner } from "./contextShift.ts";
import type { ShiftScoringRequest } from "./variantShiftScoring.ts";
import { tokenScores, type ContextScores } from "./reuseScores.ts";
import { promptTokens, segmentBounds, type SegmentedPrompt } from "./segmentedPrompt.ts";
import { SlidingPrefillWindow, type SlidingPrefillSettings, type SlidingWindowRunner } from "./slidingPrefillWindow.ts";

export interface ManagedPrefillRunner {
  readonly info: RunnerInfo;
  forward(request: ForwardRequest): Promise<ForwardResult>;
  /** With both, stored variants get their measured context shift (contextShift.ts). */
  export?: ContextShiftRunner["export"];
  relocate?: ContextShiftRunner["relocate"];
  /** Needed on a runner with two KV groups (with export). */
  import?: SlidingWindowRunner["import"];
}

export interface ManagedPrefillOptions {
  policy: RecomputePolicy;
  /** Share of the reused chunks' tokens to recompute, 0..1. */
  recomputeRatio: number;
  /** α of CFO = α·CCI·(1−β′) (eq. 12); only the ranking of variants depends on it. */
  alpha?: number;
  /** Cache-Craft focused-chunk early stop: layers the focused set must hold (0: off). */
  focusWindow?: number;
  /** Most new tokens in one FORWARD (longer runs are split in sequence order). */
  maxForwardTokens?: number;
  /** Record the attention statistics new chunks need to be stored (default true; false: storeBack stores nothing new). */
  collectMetadata?: boolean;
  /** ProphetKV: how much of a token's score carries on to the tokens after it in its chunk (prophetSelection; default DEFAULT_PROPHET_SPAN_DECAY). */
  prophetSpanDecay?: number;
  /**
   * ProphetKV: whose attention scores the tokens, "all" the question's tokens (default, the
   * paper) or only its "last" token (the one the first answer token comes from).
   */
  prophetQueryRows?: ProphetQueryRows;
  /**
   * ProphetKV: what ranks the reused tokens (default DEFAULT_PROPHET_SCORES; "attention" is the
   * paper). All but "attention" need every reused variant's measured shift; a request meeting a
   * variant without one ranks by attention alone.
   */
  prophetScores?: ProphetScores;
  /** What Cache-Craft's scores and the variant choice use (default "shift": measured KV shift where a variant has it). */
  contextScores?: ContextScores;
  /**
   * Measure each stored variant's context shift (needs a runner with export and relocate).
   * Default: with "shift" scores and policy cachecraft, or prophet with shift-using prophetScores
   * (the policies that read it); it costs
   * about one more prefill of the new chunks at store time.
   */
  measureShift?: boolean;
  /**
   * Given with measureShift: the shift of a stored variant is not measured in storeBack but handed
   * here, once the variant is stored, to be measured later (variantShiftScoring.ts, in the engine's
   * idle time). A chunk right after the head still gets its shift (zeros) at once.
   */
  deferShift?: (request: ShiftScoringRequest, reason: "stored" | "reused-unscored") => void;
  /**
   * The prompt's first tokens whose KV the table already holds, exact (blocks of the automatic
   * prefix cache; shared, so never written): planned as "blocks", and a segment they end inside
   * is computed from there on and not stored as a variant (its metadata would be partial).
   */
  cachedTokens?: number;
  /**
   * On a runner with two KV groups, required: the sequence's sliding-window table and its pool,
   * the window, and the most entries one FORWARD may span (slidingPrefillWindow.ts).
   */
  sliding?: SlidingPrefillSettings;
}

export interface ManagedPrefillUsage {
  prompt_tokens_prefix_reused: number;
  prompt_tokens_chunk_reused: number;
  prompt_tokens_recomputed: number;
  prompt_tokens_computed: number;
  /** Hits by tier; `remote` only with a remote tier (--kv-remote). */
  tier_hits: Record<LocalKvTier, number> & { remote?: number };
  policy: RecomputePolicy;
  /** Cache-Craft early stop: layers the unfocused chunks' recomputed tokens ran through (null: they never stopped). */
  focus_cutoff_layer?: number | null;
  /**
   * With "shift" scores: reused chunks whose variant had no measured shift yet, so its choice (and
   * cachecraft's recompute set) fell back to the attention scores.
   */
  chunks_unscored?: number;
}

export interface ManagedPrefillResult {
  /** The last question token's logits. */
  logits: Float32Array;
  usage: ManagedPrefillUsage;
  /** Sequence positions of the reused tokens this request recomputed (ascending): what the policy chose. */
  recomputed: Uint32Array;
  /**
   * How many leading tokens hold exactly a full prefill's KV: up to the first reused chunk that
   * was not wholly recomputed (Infinity when none was: the whole prompt, and what follows it).
   */
  exactTokens: number;
  /** Chunk hashes this request computes (delay-hit bookkeeping; released by storeBack). */
  computing: string[];
  /** Stores the computed chunks and promotes host/disk hits; run after the first token. */
  storeBack(): Promise<void>;
}

/** Runs FORWARDs of the new tokens at `indices` (sorted), split so none exceeds `max` tokens; returns the last one's result. */
async function forwardSpans(
  runner: ManagedPrefillRunner,
  table: SequenceTables,
  tokens: readonly number[],
  indices: Uint32Array,
  max: number,
): Promise<ForwardResult> {
  let result: ForwardResult | null = null;
  for (let from = 0; from < indices.length; from += max) {
    const part = indices.subarray(from, Math.min(indices.length, from + max));
    const isLast = from + max >= indices.length;
    const seq: ForwardSequence = {
      ...table,
      tokens: Array.from(part, (i) => tokens[i]!),
      indices: part,
      logitRows: isLast ? [part.length - 1] : [],
    };
    result = await runner.forward({ sequences: [seq] });
  }
  return result!;
}

/** A sequence's block table (ForwardSequence's field; a SlidingPrefillWindow adds the sliding one). */
interface SequenceTables {
  table: readonly number[];
}

/** The prompt's head tokens (the system part before the first chunk), or none. */
function headTokens(prompt: SegmentedPrompt): readonly number[] {
  return prompt.segments[0]?.kind === "head" ? prompt.segments[0].tokens : [];
}

function range(start: number, end: number): number[] {
  const out: number[] = [];
  for (let i = start; i < end; i++) out.push(i);
  return out;
}

export async function managedPrefill(
  runner: ManagedPrefillRunner,
  cache: ChunkCache | null,
  prompt: SegmentedPrompt,
  table: readonly number[],
  options: ManagedPrefillOptions,
): Promise<ManagedPrefillResult> {
  const tokens = promptTokens(prompt);
  const bounds = segmentBounds(prompt);
  const length = tokens.length;
  const questionStart = bounds.at(-1)!;
  const maxForward = options.maxForwardTokens ?? 8192;
  const scores = options.contextScores ?? "shift";
  const cachedTokens = options.cachedTokens ?? 0;
  if (runner.info.kv_groups !== undefined && options.sliding === undefined) throw new Error("managedPrefill: the runner has two KV groups; options.sliding (the sequence's sliding-window table) is required");
  const tables: SequenceTables = { table };
  const windowed = options.sliding === undefined ? null : newSlidingWindow(runner, table, options.sliding, cachedTokens, length);
  // The FORWARDs: straight to the runner, or through the sliding window's parts.
  const compute: ManagedPrefillRunner = windowed === null ? runner : { info: runner.info, forward: (request) => windowed.forward(request) };
  if (!(Number.isSafeInteger(cachedTokens) && cachedTokens >= 0 && cachedTokens < length)) throw new RangeError(`managedPrefill: cachedTokens must be in [0, ${length}), got ${cachedTokens}`);
  const usage: ManagedPrefillUsage = {
    prompt_tokens_prefix_reused: 0,
    prompt_tokens_chunk_reused: 0,
    prompt_tokens_recomputed: 0,
    prompt_tokens_computed: 0,
    tier_hits: { device: 0, host: 0, disk: 0, ...(cache?.hasRemote ? { remote: 0 } : {}) },
    policy: options.policy,
  };

  const plans: SegmentPlan[] =
    cache === null || options.policy === "full"
      ? prompt.segments.map((_, s): SegmentPlan => (bounds[s + 1]! <= cachedTokens ? { kind: "blocks" } : { kind: "compute" }))
      : planPrefill(cache.index, prompt, options.policy, options.alpha ?? 1, scores, cachedTokens);

  // Place the cached segments; a damaged disk file turns its segment into a computed one.
  const hits: { segment: number; tier: KvTier }[] = [];
  for (let s = 0; s < plans.length; s++) {
    const plan = plans[s]!;
    if (plan.kind === "compute" || plan.kind === "blocks") continue;
    const positions = Int32Array.from(range(bounds[s]!, bounds[s + 1]!));
    const start = bounds[s]!;
    const tier = await cache!.place(plan.variant, table, start, positions, windowed === null ? undefined : { table: windowed.table, windowed: (data) => windowed.addSource(start, data) });
    if (tier === null) {
      plans[s] = { kind: "compute" };
      continue;
    }
    usage.tier_hits[tier] = (usage.tier_hits[tier] ?? 0) + 1;
    hits.push({ segment: s, tier });
    cache!.recordUse(plan.variant, plan.kind === "reuse" ? plan.cfo : 0);
  }
  if (scores === "shift" && cache !== null && options.policy !== "full" && options.policy !== "prefix") {
    const unscored = hits.filter(({ segment }) => {
      const plan = plans[segment]!;
      return plan.kind === "reuse" && plan.variant.meta.tokenShift === undefined;
    });
    usage.chunks_unscored = unscored.length;
    for (const { segment } of unscored) {
      const plan = plans[segment]! as Extract<SegmentPlan, { kind: "reuse" }>;
      options.deferShift?.({ variantId: plan.variant.id, head: headTokens(prompt), tokens: prompt.segments[segment]!.tokens }, "reused-unscored");
    }
  }

  // Exactness: a segment's KV equals full prefill's when everything before it does and it is computed or fully recomputed.
  const computedSegments = plans.flatMap((p, s) => (p.kind === "compute" ? [s] : []));
  const reusedSegments = plans.flatMap((p, s) => (p.kind === "reuse" ? [s] : []));
  const reusedTokens = reusedSegments.reduce((sum, s) => sum + prompt.segments[s]!.tokens.length, 0);
  const budget = Math.min(reusedTokens, Math.ceil(Math.max(0, Math.min(1, options.recomputeRatio)) * reusedTokens - 1e-9));

  const computeIndices: number[] = [];
  for (const s of computedSegments) computeIndices.push(...range(Math.max(bounds[s]!, cachedTokens), bounds[s + 1]!));
  const questionIndices = range(Math.max(questionStart, cachedTokens), length);

  const storing = cache !== null && options.policy !== "full" && (options.collectMetadata ?? true);
  // Stats of the computed chunks (for their metadata) come from the pass that computes them.
  const chunkBounds = Uint32Array.from([...bounds, length]);
  let recompute: number[] = [];
  let metadataStats: ForwardResult | null = null;

  if (options.policy === "prophet" && budget > 0 && reusedTokens > 0) {
    // Stage I: missing chunks, then the question over the reused KV, its attention recorded per layer.
    if (computeIndices.length > 0) {
      if (options.collectMetadata ?? true) metadataStats = await statsForward(compute, tables, tokens, computeIndices, chunkBounds);
      else await forwardSpans(compute, tables, tokens, Uint32Array.from(computeIndices), maxForward);
    }
    const stage1 = await compute.forward({
      stats: true,
      sequences: [{ ...tables, tokens: questionIndices.map((i) => tokens[i]!), indices: Uint32Array.from(questionIndices), logitRows: [], queryRows: range(0, questionIndices.length), chunkBounds: [0] }],
    });
    const layers = stage1.stats![0]!;
    const candidates = reusedSegments.map((s) => ({ start: bounds[s]!, end: bounds[s + 1]! }));
    const queries = questionIndices.length;
    const len = layers[0]!.len;
    const lastOnly = (options.prophetQueryRows ?? "all") === "last";
    const masses = layers.map((l) => (lastOnly ? l.mass.subarray((queries - 1) * len, queries * len) : l.mass));
    recompute = Array.from(prophetSelection(masses, lastOnly ? 1 : queries, len, candidates, budget, options.prophetSpanDecay ?? DEFAULT_PROPHET_SPAN_DECAY, prophetFusion(options.prophetScores ?? DEFAULT_PROPHET_SCORES, plans, reusedSegments, bounds, len)));
  } else if (options.policy === "epic" && budget > 0 && reusedTokens > 0) {
    const chosen = epicSelection(reusedSegments.map((s) => prompt.segments[s]!.tokens.length), budget);
    reusedSegments.forEach((s, k) => {
      for (const local of chosen[k]!) recompute.push(bounds[s]! + local);
    });
  } else if (options.policy === "cachecraft" && budget > 0 && reusedTokens > 0) {
    const chosen = cacheCraftSelection(
      reusedSegments.map((s) => {
        const plan = plans[s] as Extract<SegmentPlan, { kind: "reuse" }>;
        return { tokenCount: prompt.segments[s]!.tokens.length, cfo: plan.cfo, tokenInter: tokenScores(plan.variant.meta, scores) };
      }),
      budget,
    );
    reusedSegments.forEach((s, k) => {
      for (const local of chosen[k]!) recompute.push(bounds[s]! + local);
    });
  }

  // The computing pass: missing chunks, the recompute set and the question. After prophet's stage I
  // the missing chunks are computed already; those behind a recomputed token run again, as their
  // KV depends on it.
  const pass = new Set<number>(recompute);
  const firstRecomputed = recompute.length > 0 ? Math.min(...recompute) : Infinity;
  const stageOneRan = options.policy === "prophet" && budget > 0 && reusedTokens > 0;
  for (const i of computeIndices) if (!stageOneRan || i > firstRecomputed) pass.add(i);
  for (const i of questionIndices) pass.add(i);
  const passIndices = Uint32Array.from([...pass].sort((a, b) => a - b));
  let result: ForwardResult;
  // With a sliding window the early stop needs the pass in one FORWARD part (it decides across all its tokens).
  const focus =
    options.policy === "cachecraft" && (options.focusWindow ?? 0) > 0 && recompute.length > 0 && prompt.segments.length >= 3 && (windowed === null || windowed.fitsOnePart(passIndices));
  if (focus) {
    // Cache-Craft focused-chunk early stop: the runner stops recomputing the chunks the question does not focus on.
    const indices = Array.from(passIndices);
    const rowOf = new Map(indices.map((index, row) => [index, row] as const));
    const metadataRows = !stageOneRan && storing ? computeIndices : [];
    result = await compute.forward({
      stats: true,
      chunkMass: true,
      earlyStop: true,
      sequences: [
        {
          ...tables,
          tokens: indices.map((i) => tokens[i]!),
          indices: passIndices,
          logitRows: [indices.length - 1],
          queryRows: metadataRows.map((i) => rowOf.get(i)!),
          chunkBounds: Array.from(chunkBounds),
          earlyStop: { window: options.focusWindow!, questionChunk: chunkBounds.length - 2 },
        },
      ],
    });
    if (metadataRows.length > 0) metadataStats = result;
    usage.focus_cutoff_layer = result.earlyStop![0]!.cutoffLayer < runner.info.layers ? result.earlyStop![0]!.cutoffLayer : null;
  } else if (!stageOneRan && computeIndices.length > 0 && storing) {
    result = await statsForward(compute, tables, tokens, Array.from(passIndices), chunkBounds, computeIndices);
    metadataStats = result;
  } else {
    result = await forwardSpans(compute, tables, tokens, passIndices, maxForward);
  }
  const logitsAll = result.logits[0]!;
  const logits = logitsAll.subarray(logitsAll.length - runner.info.vocab);

  usage.prompt_tokens_recomputed = recompute.length;
  usage.prompt_tokens_prefix_reused = cachedTokens;
  for (const hit of hits) {
    const n = prompt.segments[hit.segment]!.tokens.length;
    if (plans[hit.segment]!.kind === "prefix") usage.prompt_tokens_prefix_reused += n;
    else usage.prompt_tokens_chunk_reused += n;
  }
  usage.prompt_tokens_chunk_reused -= recompute.length;
  usage.prompt_tokens_computed = length - usage.prompt_tokens_prefix_reused - usage.prompt_tokens_chunk_reused - usage.prompt_tokens_recomputed;

  // A segment computed only from the cached tokens on is not stored (its statistics are partial).
  const storedSegments = computedSegments.filter((s) => bounds[s]! >= cachedTokens);
  const computing = storing ? storedSegments.map((s) => prompt.segments[s]!.hash) : [];
  cache?.computing(computing);
  const recomputedAll = budget === reusedTokens;

  // A chunk's context shift: its KV here against its KV right after the head. The first segment
  // after the head has no other context (shift 0, nothing to measure); a runner without export
  // or relocate, or no scratch room in the pool, leaves it unmeasured (the attention scores then).
  const headLength = prompt.segments[0]?.kind === "head" ? bounds[1]! : 0;
  const shiftRunner = runner.export !== undefined && runner.relocate !== undefined ? (runner as ContextShiftRunner) : null;
  const measuring = options.measureShift ?? (scores === "shift" && (options.policy === "cachecraft" || (options.policy === "prophet" && (options.prophetScores ?? DEFAULT_PROPHET_SCORES) !== "attention")));
  const shiftOf = async (s: number): Promise<number[] | null> => {
    const tokens = prompt.segments[s]!.tokens;
    if (!measuring || cache === null || tokens.length === 0) return null;
    // The head itself, and the chunk right after it, have no other chunk as context.
    if (bounds[s]! <= headLength) return tokens.map(() => 0);
    if (shiftRunner === null || options.deferShift !== undefined) return null;
    const shift = await cache.withScratch(headLength + tokens.length, (scratch) => measureContextShift(shiftRunner, table, headLength, bounds[s]!, tokens, scratch));
    return shift === null ? null : Array.from(shift);
  };

  // A host or disk hit is promoted from this request's copy of it, which is the variant's KV only
  // where nothing was recomputed: a recomputed token holds this prompt's KV, and promoting it would
  // hand every later request KV fixed for another context under the variant's old metadata.
  const recomputedSet = new Set(recompute);
  const untouched = (s: number): boolean => {
    for (let i = bounds[s]!; i < bounds[s + 1]!; i++) if (recomputedSet.has(i)) return false;
    return true;
  };
  const promotable = (s: number): boolean => hits.some((h) => h.segment === s && h.tier !== "device") && untouched(s);

  const storeBack = async (): Promise<void> => {
    if (cache === null || options.policy === "full") return;
    if (!storing) {
      for (const hit of hits) {
        const plan = plans[hit.segment]!;
        if ((plan.kind === "prefix" || plan.kind === "reuse") && promotable(hit.segment)) await cache.promote(plan.variant, table, bounds[hit.segment]!);
      }
      return;
    }
    try {
      let exactSoFar = true;
      for (let s = 0; s < plans.length; s++) {
        const plan = plans[s]!;
        if (plan.kind === "prefix" || plan.kind === "blocks" || (plan.kind === "compute" && bounds[s]! < cachedTokens)) continue;
        if (plan.kind === "reuse") {
          if (!(recomputedAll && options.policy !== "none")) exactSoFar = false;
          if (promotable(s)) await cache.promote(plan.variant, table, bounds[s]!);
          continue;
        }
        const segment = prompt.segments[s]!;
        const meta = variantMetadataFromStats(metadataStats!, computeIndices, s, chunkBounds, prompt.segments.map((g) => g.hash));
        const tokenShift = await shiftOf(s);
        const stored = await cache.store(
          table,
          bounds[s]!,
          { chunkHash: segment.hash, tokenCount: segment.tokens.length, prefix: prompt.segments.slice(0, s).map((g) => g.hash), exact: exactSoFar, ...meta, ...(tokenShift !== null ? { tokenShift } : {}) },
          windowed === null ? undefined : { table: windowed.table, data: await windowed.kvOf(bounds[s]!, segment.tokens.length) },
        );
        if (stored !== null && tokenShift === null && measuring && options.deferShift !== undefined && segment.tokens.length > 0) {
          options.deferShift({ variantId: stored.id, head: headTokens(prompt), tokens: segment.tokens }, "stored");
        }
      }
    } finally {
      cache.computed(computing);
    }
  };
  const firstInexact = recomputedAll && options.policy !== "none" ? undefined : reusedSegments[0];
  const exactTokens = firstInexact === undefined ? Infinity : bounds[firstInexact]!;
  return { logits, usage, recomputed: Uint32Array.from(recompute).sort(), exactTokens, computing, storeBack };
}

/**
 * prophetSelection's fusion: the reused variants' measured shifts at their positions, or undefined
 * (the paper's attention) for "attention" or when any reused variant has no measured shift.
 */
function prophetFusion(scores: ProphetScores, plans: readonly SegmentPlan[], reusedSegments: readonly number[], bounds: readonly number[], len: number): ProphetFusion | undefined {
  if (scores === "attention") return undefined;
  const shift = new Float32Array(len);
  for (const s of reusedSegments) {
    const tokenShift = (plans[s] as Extract<SegmentPlan, { kind: "reuse" }>).variant.meta.tokenShift;
    if (tokenShift === undefined) return undefined;
    shift.set(tokenShift.subarray(0, Math.max(0, Math.min(tokenShift.length, len - bounds[s]!))), bounds[s]!);
  }
  return { scores, shift };
}

/** The sliding window of a prefill on a runner with two KV groups (it needs EXPORT and IMPORT). */
function newSlidingWindow(runner: ManagedPrefillRunner, table: readonly number[], settings: SlidingPrefillSettings, cachedTokens: number, length: number): SlidingPrefillWindow {
  if (runner.export === undefined || runner.import === undefined) throw new Error("managedPrefill: a runner with two KV groups needs export and import");
  return new SlidingPrefillWindow(runner as SlidingWindowRunner, table, settings, cachedTokens, length);
}

/**
 * A FORWARD of `indices` (sorted) with per-token chunk attention recorded for the
 * tokens in `statRows` (default: all of them), chunk bounds over the whole prompt.
 */
async function statsForward(
  runner: ManagedPrefillRunner,
  table: SequenceTables,
  tokens: readonly number[],
  indices: number[],
  chunkBounds: Uint32Array,
  statRows: number[] = indices,
): Promise<ForwardResult> {
  const rowOf = new Map<number, number>();
  indices.forEach((index, row) => rowOf.set(index, row));
  const queryRows = statRows.map((i) => rowOf.get(i)!);
  // Chunk bounds must not reach past the largest index of this pass.
  const len = indices[indices.length - 1]! + 1;
  const bounds = Array.from(chunkBounds).filter((b) => b <= len);
  if (bounds.at(-1)! < len) bounds.push(len);
  return runner.forward({
    stats: true,
    chunkMass: true,
    sequences: [{ ...table, tokens: indices.map((i) => tokens[i]!), indices: Uint32Array.from(indices), logitRows: [indices.length - 1], queryRows, chunkBounds: bounds }],
  } as ForwardRequest);
}
