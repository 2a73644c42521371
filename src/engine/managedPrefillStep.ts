/**
 * The scheduler's step for a KV-managed prompt (segments): it runs alone, through
 * managedPrefill.ts (chunk caches reused at any position, the recompute policy's tokens computed),
 * then samples the first token and stores the new chunks back.
 *
 * On a model with sliding-window layers the step's sequence holds in the sliding group what a
 * prefill chunk holds — its window, one block and a chunk (slidingPrefillWindow.ts) — and after
 * the step (cacheStepBlocks) its window plus one block, as a plain prompt does.
 */
import type { ChunkCache } from "../kv/chunkCache.ts";
import { managedPrefill } from "../kv/managedPrefill.ts";
import type { BlockManager } from "./blockManager.ts";
import { DEFAULT_KV_POLICY, DEFAULT_RECOMPUTE_RATIO, type SchedulerOptions, type SchedulerRunner } from "./schedulerTypes.ts";
import type { Sequence } from "./sequence.ts";
import { DEFAULT_PROPHET_SCORES } from "../kv/recomputeSelection.ts";
import type { SequenceOutput } from "./sequenceOutput.ts";
import type { ReuseScoring } from "./reuseScoring.ts";
import type { ReuseAudit } from "./reuseAudit.ts";
import { RATIO_POLICIES } from "./reuseTarget.ts";

export class ManagedPrefillStep {
  constructor(
    private readonly runner: SchedulerRunner,
    private readonly blocks: BlockManager,
    private readonly output: SequenceOutput,
    private readonly options: SchedulerOptions,
    /** The scheduler's counts this step adds to. */
    private readonly counters: { forwards: number; prefillTokens: number },
    /** When stored variants get their measured shift, and the count of reused ones without. */
    private readonly reuseScoring: ReuseScoring,
    /** The live quality audit: a sampled request's reused side is captured here, before it decodes. */
    private readonly reuseAudit: ReuseAudit,
  ) {}

  private get chunkCache(): ChunkCache | null {
    return this.options.chunkCache ?? null;
  }

  /**
   * A KV-managed prefill (managedPrefill.ts): blocks for the prompt and the first
   * token, the prefill, the first token out; then the chunk cache's store-back.
   * A sequence readmitted after preemption with tokens already generated only
   * gets its prompt back this way; the rest is recomputed by ordinary steps.
   * False, before anything ran, when the blocks are not there and `othersRunning` can free them.
   */
  async run(sequence: Sequence, othersRunning: boolean): Promise<boolean> {
    const entries = sequence.promptLength + 1;
    const need = sequence.table.blocksNeeded(entries);
    await this.fetchRemoteChunks(sequence);
    await this.blocks.makeRoom(need);
    const sliding = this.blocks.sliding;
    const span = this.options.prefillChunk ?? 512;
    const slidingNeed = sliding === null ? 0 : sliding.blocksPerSequence(span);
    if (sliding !== null) await this.blocks.makeSlidingRoom(slidingNeed);
    if ((need > this.blocks.pool.free || (sliding !== null && slidingNeed > sliding.pool.free)) && othersRunning) return false;
    // The global layers' blocks for the whole prompt; the sliding group's are taken as its window moves.
    await this.blocks.pool.grow([{ table: sequence.table, entries }]);
    const request = sequence.request;
    this.counters.forwards++;
    const scores = this.options.contextScores ?? "shift";
    // Every stored variant's shift: measured in the engine's idle time (or here, with --reuse-scoring sync).
    const measurement = this.reuseScoring.measurement(scores);
    const policy = request.kvPolicy ?? this.options.kvPolicy ?? DEFAULT_KV_POLICY;
    // A request's own ratio wins; then the quality target's for its policy (--reuse-target-agreement).
    const recomputeRatio = request.recomputeRatio ?? this.options.recomputeRatioFor?.(policy) ?? this.options.recomputeRatio ?? DEFAULT_RECOMPUTE_RATIO;
    const result = await managedPrefill(this.runner, this.chunkCache, request.segments!, sequence.table.blocks, {
      cachedTokens: sequence.table.length,
      policy,
      recomputeRatio,
      focusWindow: this.options.focusWindow ?? 0,
      contextScores: scores,
      measureShift: measurement !== "none",
      ...(measurement === "defer" ? { deferShift: (job, reason) => this.reuseScoring.defer(job, reason) } : {}),
      ...(this.options.prophetSpanDecay !== undefined ? { prophetSpanDecay: this.options.prophetSpanDecay } : {}),
      prophetQueryRows: this.options.prophetQueryRows ?? "all",
      prophetScores: this.options.prophetScores ?? DEFAULT_PROPHET_SCORES,
      ...(sliding === null ? {} : { sliding: { table: sliding.tableOf(sequence.table).blocks, blocks: sliding.blockSource(), window: sliding.window, span } }),
    });
    sequence.table.length = sequence.promptLength;
    sequence.managedPending = false;
    sequence.exactTokens = result.exactTokens;
    this.counters.prefillTokens += result.usage.prompt_tokens_computed + result.usage.prompt_tokens_recomputed;
    this.reuseScoring.countUnscored(result.usage.policy, result.usage.chunks_unscored ?? 0);
    const first = sequence.generated === 0;
    if (first) sequence.usage = RATIO_POLICIES.includes(policy) ? { ...result.usage, recompute_ratio: recomputeRatio } : result.usage;
    // The live audit's copy of the served first-token row, taken before anything samples from it.
    const auditRow = first && this.picksForAudit(result.usage) ? Float32Array.from(result.logits) : null;
    if (first && !sequence.cancelled && !sequence.done) {
      await sequence.constraint?.ready().catch(() => {});
      sequence.sparse?.observe(result.logits);
      if (this.output.acceptOrFail(sequence, result.logits)) await this.output.jumpAhead(sequence);
    }
    if (auditRow !== null) await this.captureForAudit(sequence, result.usage.policy, result.usage.policy === "none" ? 0 : recomputeRatio, auditRow);
    await result.storeBack();
    await this.blocks.cacheStepBlocks([sequence]);
    if (sequence.sparse !== null && !sequence.done) await sequence.sparse.sync(this.runner, sequence.table);
    return true;
  }

  /** Whether the live audit takes this request: served with reused chunks, and the sampler's pick. */
  private picksForAudit(usage: { policy: string; prompt_tokens_chunk_reused: number; prompt_tokens_recomputed: number }): boolean {
    return this.reuseAudit.rate > 0 && usage.prompt_tokens_chunk_reused + usage.prompt_tokens_recomputed > 0 && this.reuseAudit.picks(usage.policy);
  }

  /**
   * The audited request's reused side: its prompt KV (the prompt's entries are as the prefill left
   * them) and first-token row, with the ratio it was served at (the quality target's, if it set it).
   */
  private async captureForAudit(sequence: Sequence, policy: string, ratio: number, row: Float32Array): Promise<void> {
    await this.reuseAudit.capture({ policy, ratio, promptTokens: sequence.tokens.slice(0, sequence.promptLength), row, table: sequence.table.blocks });
  }

  /**
   * With a remote chunk-cache tier: the prompt's chunks that have no variant here and are not
   * already in the table are looked up there first (within its short time limit), so that a
   * chunk another instance computed is reused rather than computed again.
   */
  private async fetchRemoteChunks(sequence: Sequence): Promise<void> {
    const cache = this.chunkCache;
    const request = sequence.request;
    if (cache === null || !cache.hasRemote || request.segments === undefined) return;
    if ((request.kvPolicy ?? this.options.kvPolicy ?? DEFAULT_KV_POLICY) === "full") return;
    const hashes: string[] = [];
    let end = 0;
    for (const segment of request.segments.segments) {
      end += segment.tokens.length;
      if (end > sequence.table.length) hashes.push(segment.hash);
    }
    await cache.fetchRemote(hashes);
  }
}
