/**
 * Continuous batching over the model runner. Requests queue; one loop runs steps,
 * one FORWARD each:
 *
 * - admission: waiting requests join the running batch (first come, first
 *   served) while the KV cache can hold them: every running sequence's current
 *   tokens plus one are counted against the cache's blocks;
 * - the step's FORWARD holds the next token of every decoding sequence (one token
 *   each, logits of row 0) and prompt chunks of the sequences still prefilling, at
 *   most `prefillChunk` prompt tokens per step in all, so a long prompt never
 *   stalls the others' decoding for long (chunked prefill);
 * - blocks are allocated lazily, for the entries the step writes, in one ALLOC for
 *   the whole step; when the cache is full the most recently admitted sequence is
 *   preempted (its blocks freed; it is requeued first and recomputes its tokens
 *   when readmitted; what it already streamed stands);
 * - every sequence that got logits samples its next token with its own Sampler;
 *   eos ids, stop strings and max_tokens end it; its text deltas go to its
 *   consumer; finished and cancelled sequences' blocks are freed in one FREE.
 *
 * When the runner crashes, every running request fails with the crash error, the
 * runner is restarted and the queue carries on. Prompts longer than the model or
 * the cache can hold are refused when submitted, and so is any request while
 * `maxWaiting` requests wait (QueueFullError). A request with a deadline that has
 * not finished by then is cancelled (DeadlineExceededError; its blocks are freed
 * at the next step).
 *
 * This file is admission, planning, stepping, preemption and recovery; the rest lives beside it:
 * the public types (generationTypes.ts, schedulerTypes.ts), errors (generationErrors.ts), a
 * request's state (sequence.ts) and handle (generationHandle.ts), the checks at submission
 * (requestChecks.ts), the KV blocks and prefix cache (blockManager.ts), the token output
 * (tokenOutput.ts, sequenceOutput.ts), the KV-managed prefill's step (managedPrefillStep.ts), the
 * lowest-priority background work (backgroundWork.ts: reuseScoring.ts, the audit reuseAudit.ts).
 */
import { EngineTokenAccount } from "../accounting/tokenAccounts.ts";
import type { ForwardResult, ForwardSequence } from "../runner/runnerProtocol.ts";
import { RunnerCrashedError } from "../runner/runnerProcess.ts";
import { blocksFor, type KvBlockTable } from "../kv/kvBlockTable.ts";
import type { ChunkCache } from "../kv/chunkCache.ts";
import type { ChunkVariant } from "../kv/chunkVariantIndex.ts";
import { cacheAwareOrder, type QueuedPrefill } from "../kv/cacheAwareOrder.ts";
import type { PrefixBlockCacheStats } from "../kv/prefixBlockCache.ts";
import { SparseDecode } from "../kv/sparseDecode.ts";
import type { StreamDecoder } from "./textStream.ts";
import { BlockManager } from "./blockManager.ts";
import { GenerationFailedError, QueueFullError, DeadlineExceededError, SchedulerClosedError } from "./generationErrors.ts";
import { GenerationHandle } from "./generationHandle.ts";
import { ManagedPrefillStep } from "./managedPrefillStep.ts";
import { BackgroundWork, DEFAULT_BACKGROUND_BUDGET, type BackgroundJob } from "./backgroundWork.ts";
import { ReuseScoring } from "./reuseScoring.ts";
import { ReuseAudit } from "./reuseAudit.ts";
import type { GenerationRequest } from "./generationTypes.ts";
import { checkGenerationRequest, completionBudget } from "./requestChecks.ts";
import { DEFAULT_MAX_WAITING, type SchedulerOptions, type SchedulerRunner, type SchedulerStats } from "./schedulerTypes.ts";
import { Sequence } from "./sequence.ts";
import { SequenceOutput } from "./sequenceOutput.ts";
import { recordPromptLogprobs } from "./tokenOutput.ts";
import { greedyRowsSuffice, growRequests, type StepRun } from "./stepRun.ts";
import { stepForwardSequences } from "./stepForward.ts";
import { settleWithin } from "../runtime/settleWithin.ts";
import { sleep } from "../runtime/sleep.ts";

/** How long the masks of a step wait for each other when sequences without one share the batch. */
const MASK_GRACE_MS = 5;
/** A step with nothing to run but held logits checks their masks this often. */
const MASK_POLL_MS = 5;
/** How long the engine must have been without live work before a background piece starts. */
const BACKGROUND_IDLE_GRACE_MS = 20;

export class GenerationScheduler {
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private readonly blocks: BlockManager;
  private readonly output: SequenceOutput;
  private readonly managedPrefill: ManagedPrefillStep;
  /** Jobs run only while no live sequence needs the runner, one piece at a time, within a budget. */
  readonly background: BackgroundWork;
  /** Stored variants' shift measurement and the count of reused chunks that had none. */
  readonly reuseScoring: ReuseScoring;
  /** The live quality audit: its figures, and `onSample` for whoever adapts to them (the adaptive ratio). */
  readonly reuseAudit: ReuseAudit;
  /** Set while the budget (or the idle grace) holds background work back: it kicks the loop when it may run again. */
  private backgroundTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the last live step ended (performance.now()): background work starts only after BACKGROUND_IDLE_GRACE_MS of quiet. */
  private lastLiveStepAt = -Infinity;
  private loop: Promise<void> | null = null;
  private prefetching: Promise<void> | null = null;
  private closed = false;
  private admissions = 0;
  /** Set when the runner must be restarted before the next step (it crashed, or a restart failed). */
  private needsRestart = false;
  /** Restart even with no work queued (right after a crash; not again after a failed restart). */
  private eagerRestart = false;
  private readonly prefillChunk: number;
  private readonly maxBatch: number;
  private readonly maxWaiting: number;
  /** Queue time of recent admissions, ms (an exponential moving average): what Retry-After is guessed from. */
  private recentQueueMs = 0;
  /** Each finished request's prompt usage, in the model's tokens (what ctxr saved). */
  readonly tokenAccount = new EngineTokenAccount();
  private readonly counters = {
    forwards: 0,
    decodeSteps: 0,
    batchedDecodeSteps: 0,
    greedyRowSteps: 0,
    decodeTokens: 0,
    maxDecodeBatch: 0,
    prefillTokens: 0,
    finished: 0,
    failed: 0,
    cancelled: 0,
    timedOut: 0,
    rejected: 0,
    preemptions: 0,
    runnerRestarts: 0,
  };

  constructor(
    private readonly runner: SchedulerRunner,
    private readonly decoder: StreamDecoder,
    private readonly options: SchedulerOptions = {},
  ) {
    this.prefillChunk = options.prefillChunk ?? 512;
    this.maxBatch = options.maxBatch ?? 64;
    this.maxWaiting = options.maxWaiting ?? DEFAULT_MAX_WAITING;
    if (!Number.isSafeInteger(this.maxWaiting) || this.maxWaiting < 1) throw new RangeError(`maxWaiting must be a positive integer, got ${this.maxWaiting}`);
    const timeout = options.requestTimeoutMs ?? null;
    if (timeout !== null && !(Number.isFinite(timeout) && timeout > 0)) throw new RangeError(`requestTimeoutMs must be a positive number, got ${timeout}`);
    if (!Number.isSafeInteger(this.prefillChunk) || this.prefillChunk < 1) throw new RangeError(`prefillChunk must be a positive integer, got ${this.prefillChunk}`);
    if (!Number.isSafeInteger(this.maxBatch) || this.maxBatch < 1) throw new RangeError(`maxBatch must be a positive integer, got ${this.maxBatch}`);
    this.output = new SequenceOutput(this.counters, () => this.maxModelLen, options.latency, this.tokenAccount, options.finished);
    this.blocks = new BlockManager(runner, runner.info, {
      chunkCache: options.chunkCache ?? null,
      ...(options.prefixCache !== undefined ? { prefixCache: options.prefixCache } : {}),
      ...(options.prefixSeed !== undefined ? { prefixSeed: options.prefixSeed } : {}),
      ...(options.prefixEvents !== undefined ? { prefixEvents: options.prefixEvents } : {}),
      ...(options.kvPolicy !== undefined ? { kvPolicy: options.kvPolicy } : {}),
    });
    this.background = new BackgroundWork(options.backgroundBudget ?? DEFAULT_BACKGROUND_BUDGET, { ...(options.log !== undefined ? { log: options.log } : {}) });
    this.reuseScoring = new ReuseScoring(options.reuseScoring ?? "idle", runner, options.chunkCache ?? null, this.blocks, (job, first) => this.enqueueBackground(job, first), this.background.enabled);
    this.reuseAudit = new ReuseAudit(options.reuseAudit ?? { rate: 0, model: "" }, runner, this.blocks, (job) => this.enqueueBackground(job), this.background.enabled, this.prefillChunk, options.log);
    this.managedPrefill = new ManagedPrefillStep(runner, this.blocks, this.output, options, this.counters, this.reuseScoring, this.reuseAudit);
    const sliding = this.blocks.sliding;
    if (sliding !== null && sliding.pool.totalBlocks < sliding.blocksPerSequence(this.prefillChunk))
      throw new RangeError(
        `the sliding-window KV group has ${sliding.pool.totalBlocks} blocks, fewer than one sequence needs in a prefill step: ${sliding.blocksPerSequence(this.prefillChunk)} ` +
          `(its window of ${sliding.window} tokens, one more block and a ${this.prefillChunk}-token chunk, in blocks of ${sliding.blockSize}); give --kv-sliding-blocks at least that`,
      );
  }

  /** Prefix-cache statistics (null when it is off). */
  get prefixCacheStats(): PrefixBlockCacheStats | null {
    return this.blocks.prefixCacheStats;
  }

  private get chunkCache(): ChunkCache | null {
    return this.options.chunkCache ?? null;
  }

  /** Longest sequence (prompt + generated tokens) the model and the cache can hold. */
  get maxModelLen(): number {
    const info = this.runner.info;
    const limits = [info.max_position_embeddings > 0 ? info.max_position_embeddings : Infinity, this.blocks.pool.totalBlocks * info.block_size];
    if (this.options.maxModelLen !== undefined) limits.push(this.options.maxModelLen);
    return Math.min(...limits);
  }

  get stats(): SchedulerStats {
    const prefix = this.blocks.prefixCacheStats;
    const pool = this.blocks.pool;
    return {
      ...this.counters,
      running: this.running.length,
      waiting: this.waiting.length,
      maxWaiting: this.maxWaiting,
      kvBlocksUsed: pool.used,
      kvBlocksTotal: pool.totalBlocks,
      blockSize: pool.blockSize,
      kvSlidingBlocksUsed: this.blocks.sliding?.pool.used ?? 0,
      kvSlidingBlocksTotal: this.blocks.sliding?.pool.totalBlocks ?? 0,
      kvSlidingBlocksCheckpointed: this.blocks.sliding?.checkpointStats?.blocks ?? 0,
      kvBlocksPrefixCached: prefix?.blocks ?? 0,
      kvBlocksPrefixReferenced: prefix?.referenced ?? 0,
      prefixBlocksQueried: prefix?.queried ?? 0,
      prefixBlocksHit: prefix?.hits ?? 0,
      prefixBlocksEvicted: prefix?.evictions ?? 0,
    };
  }

  /**
   * The completion budget of a prompt of `promptLength` tokens: `maxTokens`, or what room the
   * context leaves; PromptTooLongError when prompt + max_tokens cannot fit.
   */
  checkLength(promptLength: number, maxTokens: number | null | undefined): number {
    return completionBudget(promptLength, maxTokens, this.maxModelLen);
  }

  /**
   * Queues a request. Throws PromptTooLongError when prompt + max_tokens cannot fit or an option
   * is out of bounds (requestChecks.ts), the Sampler's SamplingError for bad sampling parameters,
   * and QueueFullError when `maxWaiting` requests wait already.
   */
  submit(request: GenerationRequest): GenerationHandle {
    if (this.closed) throw new SchedulerClosedError();
    const maxTokens = checkGenerationRequest(request, this.runner.info.vocab, this.maxModelLen);
    if (this.waiting.length >= this.maxWaiting) {
      this.counters.rejected++;
      throw new QueueFullError(this.maxWaiting, Math.min(60, Math.max(1, Math.ceil(this.recentQueueMs / 1000))));
    }
    const sequence = new Sequence(request, this.decoder, this.runner.info.block_size, maxTokens);
    const budget = request.kvBudget ?? null;
    if (budget !== null && budget < 1) sequence.sparse = new SparseDecode(this.runner.info, budget, this.options.sparseTrigger, this.options.sparseAnchor);
    const handle = new GenerationHandle(sequence, () => this.onCancel(sequence));
    this.startDeadline(sequence);
    this.waiting.push(sequence);
    this.kick();
    return handle;
  }

  /** Arms the sequence's deadline: the shorter of its own and the server's request timeout. */
  private startDeadline(sequence: Sequence): void {
    const own = sequence.request.deadlineMs;
    const server = this.options.requestTimeoutMs ?? null;
    if (own === undefined && server === null) return;
    const [deadlineMs, field] = own !== undefined && (server === null || own <= server) ? [own, "ctxr.deadline_ms"] : [server!, ""];
    sequence.deadlineTimer = setTimeout(() => this.expire(sequence, deadlineMs, field), deadlineMs);
  }

  /**
   * The deadline passed: the request fails with DeadlineExceededError at once; a waiting one
   * leaves the queue, a running one is cancelled and its blocks are freed at the next step.
   */
  private expire(sequence: Sequence, deadlineMs: number, field: string): void {
    sequence.deadlineTimer = null;
    if (sequence.done || sequence.cancelled) return;
    const waitedMs = Math.round((sequence.firstAdmittedAt ?? performance.now()) - sequence.submittedAt);
    const progress = sequence.firstAdmittedAt === null ? `it was still waiting in the queue` : `it waited ${waitedMs} ms in the queue and generated ${sequence.generated} tokens`;
    const error = new DeadlineExceededError(deadlineMs, field, progress);
    sequence.expired = true;
    sequence.cancelled = true;
    sequence.events.end(error);
    const at = this.waiting.indexOf(sequence);
    if (at >= 0) {
      this.waiting.splice(at, 1);
      sequence.done = true;
      sequence.constraint?.dispose();
      this.counters.timedOut++;
    }
  }

  /**
   * Queues a lowest-priority job (backgroundWork.ts): it runs once no live sequence needs the
   * runner and the budget allows; false (counted as dropped) when the budget is 0 or the queue full.
   */
  enqueueBackground(job: BackgroundJob, first = false): boolean {
    if (this.closed || !this.background.enqueue(job, first)) return false;
    if (this.hasWork()) this.background.defer();
    this.kick();
    return true;
  }

  /** Fails every request and stops the loop (the runner is the owner's to shut down). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.backgroundTimer !== null) clearTimeout(this.backgroundTimer);
    this.backgroundTimer = null;
    this.background.clear();
    for (const sequence of [...this.waiting, ...this.running]) this.output.fail(sequence, new SchedulerClosedError());
    this.waiting.length = 0;
    await this.loop;
  }

  /** A waiting request that is cancelled leaves the queue at once; a running one at the next step. */
  private onCancel(sequence: Sequence): void {
    sequence.stopDeadline();
    const at = this.waiting.indexOf(sequence);
    if (at >= 0) {
      this.waiting.splice(at, 1);
      sequence.done = true;
      sequence.constraint?.dispose();
      this.counters.cancelled++;
    }
  }

  /** The runner died while idle: restart it before the next step. */
  runnerCrashed(): void {
    this.needsRestart = true;
    this.eagerRestart = true;
    this.kick();
  }

  private kick(): void {
    if (this.loop !== null) return;
    this.loop = this.run().finally(() => {
      this.loop = null;
      // Work that arrived as the loop was ending.
      if (this.hasWork() || this.backgroundReady()) this.kick();
    });
  }

  private hasWork(): boolean {
    return !this.closed && (this.waiting.length > 0 || this.running.length > 0 || (this.needsRestart && this.eagerRestart));
  }

  private async run(): Promise<void> {
    for (;;) {
      if (!this.hasWork()) {
        if (!(await this.runBackgroundPiece())) return;
        continue;
      }
      if (this.needsRestart || !this.runner.alive) {
        if (!(await this.restartRunner())) return;
        continue;
      }
      if (this.background.pending > 0) this.background.defer();
      try {
        await this.step();
      } catch (error) {
        await this.recover(error);
      }
      this.lastLiveStepAt = performance.now();
    }
  }

  /** Whether a background piece could start now if the loop ran (no budget timer pending). */
  private backgroundReady(): boolean {
    return !this.closed && !this.needsRestart && this.runner.alive && this.background.pending > 0 && this.backgroundTimer === null;
  }

  /**
   * With no live work: one background piece, if the budget allows it now (true); otherwise false,
   * and a timer kicks the loop when the budget will allow it.
   */
  private async runBackgroundPiece(): Promise<boolean> {
    if (!this.backgroundReady()) return false;
    // Back-to-back requests leave gaps of a few ms between them: not idle time worth a piece.
    const wait = Math.max(this.background.waitMs(), this.lastLiveStepAt + BACKGROUND_IDLE_GRACE_MS - performance.now());
    if (wait > 0) {
      this.background.defer();
      if (Number.isFinite(wait)) {
        this.backgroundTimer = setTimeout(() => {
          this.backgroundTimer = null;
          this.kick();
        }, Math.ceil(wait));
        (this.backgroundTimer as { unref?: () => void }).unref?.();
      }
      return false;
    }
    await this.background.runNext();
    return true;
  }

  /** Restarts the runner; on failure fails the waiting requests (the next request tries again). */
  private async restartRunner(): Promise<boolean> {
    this.options.log?.("ctxr: restarting the model runner");
    try {
      const info = await this.runner.restart();
      this.counters.runnerRestarts++;
      this.blocks.reset(info, [...this.running, ...this.waiting]);
      this.needsRestart = false;
      this.eagerRestart = false;
      this.options.log?.(`ctxr: model runner restarted (${info.num_blocks} KV blocks)`);
      return true;
    } catch (error) {
      const failure = new GenerationFailedError(`the model runner could not be restarted: ${(error as Error).message}`, error);
      this.options.log?.(`ctxr: ${failure.message}`);
      for (const sequence of [...this.running, ...this.waiting]) this.output.fail(sequence, failure);
      this.running.length = 0;
      this.waiting.length = 0;
      this.needsRestart = true;
      this.eagerRestart = false;
      return false;
    }
  }

  /** A step failed: a crash fails the running requests (the loop restarts the runner); other errors fail them too. */
  private async recover(error: unknown): Promise<void> {
    const crashed = error instanceof RunnerCrashedError || !this.runner.alive;
    const message = crashed
      ? `the model runner crashed during generation: ${(error as Error).message}`
      : `generation failed: ${(error as Error).message}`;
    this.options.log?.(`ctxr: ${message}`);
    const failure = new GenerationFailedError(message, error);
    const victims = this.running.splice(0);
    for (const sequence of victims) this.output.fail(sequence, failure);
    if (crashed) {
      this.needsRestart = true;
      this.eagerRestart = true;
      return;
    }
    try {
      await this.blocks.release(victims.map((sequence) => sequence.table));
    } catch {
      // The runner is in trouble: start afresh.
      this.needsRestart = true;
      this.eagerRestart = true;
    }
  }

  /** Blocks a sequence is counted for at admission: its tokens so far plus the next one. */
  private committedBlocks(sequence: Sequence): number {
    return blocksFor(Math.min(sequence.tokens.length + 1, this.maxModelLen), this.blocks.blockSize);
  }

  /**
   * One step: ended sequences leave, waiting ones are admitted, a KV-managed prefill runs alone if
   * one is due; otherwise the step's runs are planned (preempting until their blocks fit), run in
   * one FORWARD, and their logits sampled.
   */
  private async step(): Promise<void> {
    const released = this.removeEnded();
    this.admitWaiting();

    // KV-managed prefills run on their own, one sequence at a time.
    const managed = this.running.find((sequence) => sequence.needsManagedPrefill && !sequence.cancelled && !sequence.done);
    if (managed !== undefined) {
      await this.blocks.release(released.splice(0));
      if (await this.runManagedPrefill(managed)) return;
    }

    await this.sampleHeldLogits();
    const plan = await this.planWithinBlocks(released);
    if (plan.length === 0) {
      await this.awaitAnyMask(MASK_POLL_MS);
      return;
    }
    await this.blocks.grow(growRequests(plan));
    const sequences = stepForwardSequences(plan, this.blocks.sliding);
    const starts = plan.map(({ sequence }) => sequence.table.length);
    this.countStep(plan);
    const greedyRows = greedyRowsSuffice(plan, sequences);
    if (greedyRows) this.counters.greedyRowSteps++;
    const result = await this.forwardWithMasks(plan, sequences, greedyRows);
    await this.takeResults(plan, sequences, starts, result);
  }

  /** Cancelled and ended sequences leave the running batch; their tables, to free with the step's other frees. */
  private removeEnded(): KvBlockTable[] {
    const released: KvBlockTable[] = [];
    for (let i = this.running.length - 1; i >= 0; i--) {
      const sequence = this.running[i]!;
      if (sequence.cancelled || sequence.done) {
        if (sequence.cancelled && !sequence.done) {
          sequence.done = true;
          sequence.constraint?.dispose();
          if (sequence.expired) this.counters.timedOut++;
          else this.counters.cancelled++;
        }
        this.running.splice(i, 1);
        released.push(sequence.table);
      }
    }
    return released;
  }

  /** Admission in cache-aware order (first come first served without KV-managed prompts), while the batch and the cache hold them. */
  private admitWaiting(): void {
    let committed = this.running.reduce((sum, sequence) => sum + this.committedBlocks(sequence), 0);
    // The sliding-window group (when there is one) holds at most its window plus a prompt chunk a sequence.
    const sliding = this.blocks.sliding;
    const slidingBlocks = (sequence: Sequence) => Math.min(this.committedBlocks(sequence), sliding!.blocksPerSequence(this.prefillChunk));
    let committedSliding = sliding === null ? 0 : this.running.reduce((sum, sequence) => sum + slidingBlocks(sequence), 0);
    const admitted = new Set<Sequence>();
    const pending = this.waiting.length > 0 ? this.blocks.pendingPrefixBlocks(this.running) : new Set<string>();
    for (const candidate of this.admissionOrder()) {
      if (this.running.length >= this.maxBatch) break;
      if (this.blocks.waitsForSharedPrefix(candidate, pending)) continue;
      const need = this.committedBlocks(candidate);
      if (committed + need > this.blocks.pool.totalBlocks && this.running.length > 0) break;
      const needSliding = sliding === null ? 0 : slidingBlocks(candidate);
      if (sliding !== null && committedSliding + needSliding > sliding.pool.totalBlocks && this.running.length > 0) break;
      committedSliding += needSliding;
      admitted.add(candidate);
      candidate.admitted = ++this.admissions;
      if (candidate.firstAdmittedAt === null) {
        candidate.firstAdmittedAt = performance.now();
        const queuedMs = candidate.firstAdmittedAt - candidate.submittedAt;
        this.recentQueueMs += 0.2 * (queuedMs - this.recentQueueMs);
        this.options.latency?.queued(queuedMs / 1000);
      }
      this.blocks.admit(candidate);
      this.running.push(candidate);
      this.blocks.addPendingBlocks(candidate, pending);
      committed += need;
    }
    if (admitted.size > 0) {
      const rest = this.waiting.filter((sequence) => !admitted.has(sequence));
      this.waiting.length = 0;
      this.waiting.push(...rest);
    }
  }

  /**
   * The batch (every decoding sequence, and prompt chunks within the budget), with blocks for it.
   * Ended tables go first; then cached KV gives way (chunk caches leave the device, unreferenced
   * prefix blocks are evicted) before a running sequence is preempted or a step fails for lack of
   * blocks; then the most recently admitted sequences are preempted until the step fits (their
   * blocks go back, or stay in the prefix cache, and so can be evicted in turn). Releasing empties
   * the tables at once, so a preempted sequence recomputes from its start (from its cached prefix).
   */
  private async planWithinBlocks(released: KvBlockTable[]): Promise<StepRun[]> {
    let plan = this.plan();
    for (;;) {
      if (released.length > 0) await this.blocks.release(released.splice(0));
      await this.blocks.makeRoomFor(growRequests(plan));
      if (this.blocks.fits(growRequests(plan)) || this.running.length <= 1) return plan;
      const victim = this.running.reduce((latest, sequence) => (sequence.admitted > latest.admitted ? sequence : latest));
      this.running.splice(this.running.indexOf(victim), 1);
      released.push(victim.table);
      // Its held logits are computed again with its tokens.
      victim.awaitingMask = null;
      this.waiting.unshift(victim);
      this.counters.preemptions++;
      plan = this.plan();
    }
  }

  /** This step's work: each running sequence's decode token, or a prompt chunk within the step's prefill budget. */
  private plan(): StepRun[] {
    const plan: StepRun[] = [];
    let budget = this.prefillChunk;
    for (const sequence of this.running) {
      if (sequence.cancelled || sequence.done || sequence.needsManagedPrefill || sequence.awaitingMask !== null) continue;
      const uncached = sequence.uncached;
      if (uncached <= 1 && sequence.table.length > 0) {
        plan.push({ sequence, count: 1, decode: true });
      } else if (budget > 0) {
        const count = Math.min(uncached, budget);
        budget -= count;
        plan.push({ sequence, count, decode: false });
      }
    }
    return plan;
  }

  private countStep(plan: readonly StepRun[]): void {
    const decoding = plan.filter((p) => p.decode).length;
    this.counters.forwards++;
    if (decoding > 0) {
      this.counters.decodeSteps++;
      this.counters.decodeTokens += decoding;
      if (decoding > 1) this.counters.batchedDecodeSteps++;
      this.counters.maxDecodeBatch = Math.max(this.counters.maxDecodeBatch, decoding);
    }
    for (const p of plan) if (!p.decode) this.counters.prefillTokens += p.count;
  }

  /**
   * Runs the FORWARD; structured outputs' masks of the tokens this step samples are computed while
   * the runner works. A sequence whose mask is late does not hold up the others: when the batch
   * has sequences without one, masks get a short grace, and the late ones keep their logits for a
   * later step.
   */
  private async forwardWithMasks(plan: readonly StepRun[], sequences: ForwardSequence[], greedyRows: boolean): Promise<ForwardResult> {
    const forwarding = this.runner.forward(greedyRows ? { sequences, greedyRows } : { sequences });
    const constrained = plan.flatMap((p, i) => (p.sequence.constraint !== null && sequences[i]!.logitRows.length > 0 ? [p.sequence.constraint] : []));
    for (const constraint of constrained) constraint.prepare();
    const result = await forwarding;
    const alone = plan.every((p) => p.sequence.constraint !== null);
    await settleWithin(
      constrained.map((constraint) => constraint.ready()),
      alone ? null : MASK_GRACE_MS,
    );
    return result;
  }

  /**
   * After the FORWARD: the written entries count, filled blocks join the prefix cache, every
   * sequence with logits samples its next token (or holds them for its late mask), sparse decode
   * summarises filled pages, and finished sequences' blocks are freed.
   */
  private async takeResults(plan: readonly StepRun[], sequences: readonly ForwardSequence[], starts: readonly number[], result: ForwardResult): Promise<void> {
    for (const { sequence, count } of plan) sequence.table.length += count;
    await this.blocks.cacheStepBlocks(plan.map((p) => p.sequence));
    const sampled: Sequence[] = [];
    plan.forEach(({ sequence, count }, i) => {
      const greedy = result.greedy?.[i];
      if (greedy !== undefined) {
        if (sequence.cancelled || sequence.done || greedy.tokens.length === 0) return;
        this.output.acceptGreedy(sequence, greedy.tokens[0]!);
        return;
      }
      let logits = result.logits[i]!;
      if (sequences[i]!.logitRows.length > 1) logits = recordPromptLogprobs(sequence, starts[i]!, count, logits, this.runner.info.vocab);
      if (sequence.cancelled || sequence.done || logits.length === 0) return;
      sequence.sparse?.observe(logits);
      if (sequence.constraint !== null && !sequence.constraint.hasMask && sequence.constraint.failure === null) {
        sequence.awaitingMask = Float32Array.from(logits);
        return;
      }
      if (this.output.acceptOrFail(sequence, logits)) sampled.push(sequence);
    });
    await Promise.all(sampled.map((sequence) => this.output.jumpAhead(sequence)));
    const finished: KvBlockTable[] = [];
    for (const { sequence } of plan) if (sequence.done && !finished.includes(sequence.table)) finished.push(sequence.table);
    for (const { sequence } of plan) {
      if (sequence.sparse !== null && !sequence.done && !sequence.cancelled && sequence.uncached <= 1) await sequence.sparse.sync(this.runner, sequence.table);
    }
    if (finished.length > 0) {
      for (let i = this.running.length - 1; i >= 0; i--) if (this.running[i]!.done) this.running.splice(i, 1);
      await this.blocks.release(finished);
    }
  }

  /**
   * The waiting sequences in the order to admit them: with a chunk cache and
   * KV-managed prompts queued, cache-aware (cacheAwareOrder.ts: delay-hit
   * deferral, balanced batches, bundle hits), and their disk-tier chunks are
   * prefetched to host memory while they wait; otherwise first come first served.
   */
  private admissionOrder(): Sequence[] {
    const cache = this.chunkCache;
    if (cache === null || !this.waiting.some((sequence) => sequence.request.segments !== undefined)) return [...this.waiting];
    const onDisk: ChunkVariant[] = [];
    const queue: QueuedPrefill[] = this.waiting.map((sequence) => {
      if (sequence.request.segments === undefined) return { newChunks: [], cachedChunks: [], loadTokens: 0, computeTokens: sequence.tokens.length };
      const described = cache.describe(sequence.request.segments);
      onDisk.push(...described.onDisk);
      return described.queued;
    });
    if (onDisk.length > 0 && this.prefetching === null) {
      this.prefetching = cache.prefetch(onDisk).catch((error) => this.options.log?.(`ctxr: prefetch failed: ${(error as Error).message}`)).finally(() => (this.prefetching = null));
    }
    const order = cacheAwareOrder(queue, { inFlight: (hash) => cache.isInFlight(hash) });
    return order.admit.map((i) => this.waiting[i]!);
  }

  /**
   * A KV-managed prefill (managedPrefillStep.ts); false when its blocks are not there yet: it goes
   * back to the queue until running sequences free blocks, and this step decodes the others.
   */
  private async runManagedPrefill(sequence: Sequence): Promise<boolean> {
    if (!(await this.managedPrefill.run(sequence, this.running.length > 1))) {
      this.running.splice(this.running.indexOf(sequence), 1);
      this.waiting.unshift(sequence);
      return false;
    }
    if (sequence.done) {
      this.running.splice(this.running.indexOf(sequence), 1);
      await this.blocks.release([sequence.table]);
    }
    return true;
  }

  /** Sequences whose held logits' masks have come are sampled now (or end, if their grammar failed). */
  private async sampleHeldLogits(): Promise<void> {
    const held = this.running.filter((sequence) => sequence.awaitingMask !== null && !sequence.done && !sequence.cancelled);
    if (held.length === 0) return;
    // With nothing else to run, wait for the first mask (each is bounded by --max-grammar-step-ms).
    const others = this.running.some((sequence) => sequence.awaitingMask === null && !sequence.done && !sequence.cancelled) || this.waiting.length > 0;
    if (!others) await this.awaitAnyMask(null);
    const sampled: Sequence[] = [];
    for (const sequence of held) {
      const constraint = sequence.constraint!;
      if (!constraint.hasMask && constraint.failure === null) continue;
      const logits = sequence.awaitingMask!;
      sequence.awaitingMask = null;
      if (sequence.done || sequence.cancelled) continue;
      if (this.output.acceptOrFail(sequence, logits)) sampled.push(sequence);
    }
    await Promise.all(sampled.map((sequence) => this.output.jumpAhead(sequence)));
  }

  /** Waits until a held sequence's mask comes or fails (at most `limitMs`, when given). */
  private async awaitAnyMask(limitMs: number | null): Promise<void> {
    const waits = this.running.filter((sequence) => sequence.awaitingMask !== null && !sequence.done).map((sequence) => sequence.constraint!.ready().catch(() => {}));
    if (waits.length === 0) return;
    await Promise.race(limitMs === null ? waits : [...waits, sleep(limitMs)]);
  }
}
