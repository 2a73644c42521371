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
 */
import type { RunnerInfo, ForwardResult, ForwardRequest, ForwardSequence } from "../runner/runnerProtocol.ts";
import { RunnerCrashedError } from "../runner/runnerProcess.ts";
import { KvBlockPool, KvBlockTable, blocksFor, type BlockRunner } from "../kv/kvBlockTable.ts";
import { Sampler, tokenLogprobs, type SamplingParams } from "./sampler.ts";
import { StopMatcher } from "./stopMatcher.ts";
import type { GrammarConstraint } from "./grammarConstraint.ts";
import { GrammarRuntimeError } from "./grammar/grammarErrors.ts";
import { LogitsAdjuster, adjustsLogits, checkLogitsAdjustments, type LogitsAdjustments } from "./logitsAdjuster.ts";
import { TokenTextStream, type StreamDecoder } from "./textStream.ts";
import { promptTokens, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { managedPrefill, type ManagedPrefillUsage } from "../kv/managedPrefill.ts";
import type { ChunkCache } from "../kv/chunkCache.ts";
import type { ChunkVariant } from "../kv/chunkVariantIndex.ts";
import { cacheAwareOrder, type QueuedPrefill } from "../kv/cacheAwareOrder.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import { PrefixBlockCache, blockHash, chainRoot, type PrefixBlockCacheStats, type PrefixCacheEvents, type StoredPrefixBlock } from "../kv/prefixBlockCache.ts";
import type { ProphetQueryRows } from "../kv/recomputeSelection.ts";
import { SparseDecode, type SparseDecodeRunner } from "../kv/sparseDecode.ts";
import type { UncertaintyTriggerOptions } from "../kv/uncertaintyTrigger.ts";
import { sleep } from "../runtime/sleep.ts";

/** The recompute policy and ratio of requests that name none, when the server sets none. */
export const DEFAULT_KV_POLICY: RecomputePolicy = "prophet";
export const DEFAULT_RECOMPUTE_RATIO = 0.2;

/** What the scheduler needs of the runner (RunnerProcess has it). */
export interface SchedulerRunner extends BlockRunner, SparseDecodeRunner {
  readonly info: RunnerInfo;
  readonly alive: boolean;
  forward(request: ForwardRequest): Promise<ForwardResult>;
  restart(): Promise<RunnerInfo>;
}

export interface GenerationRequest {
  /** The prompt's token ids (at least one). */
  promptIds: readonly number[];
  /** Most tokens to generate (at least 1); null: as many as the model's length allows. */
  maxTokens: number | null;
  sampling: SamplingParams;
  /** Stop strings: the text ends before the first one generated. */
  stop?: readonly string[];
  /** Ids that end generation (eos, and the request's stop_token_ids); their text is not part of the output unless includeStopInOutput. */
  stopTokenIds?: readonly number[];
  /** The stop string or stop token that ended the text is part of it (vLLM's include_stop_str_in_output). */
  includeStopInOutput?: boolean;
  /** Penalties and logit bias applied to the logits before sampling (logprobs stay the raw ones). */
  adjustments?: LogitsAdjustments;
  /** Structured output: the grammar the text must follow (the sequence owns it and disposes of it when it ends). */
  constraint?: GrammarConstraint;
  /** Tokens to generate before a stop token or stop string may end the text (vLLM's min_tokens; default 0). */
  minTokens?: number;
  /**
   * Salts this request's prefix-cache names (vLLM's cache_salt): only requests with the same salt
   * share cached blocks, so one tenant cannot learn from timings what another's prompts held.
   */
  cacheSalt?: string;
  /** Return each token's logprob and this many top alternatives (null: no logprobs). */
  logprobs?: number | null;
  /**
   * Also the prompt's tokens' logprobs (each given the tokens before it; the first has none) with
   * this many top alternatives (null: none). The whole prompt is then computed (no cached prefix).
   */
  promptLogprobs?: number | null;
  /** Leave special tokens out of the text (default true). */
  skipSpecialTokens?: boolean;
  /** KV-managed prefill: the prompt as segments (promptIds must be their tokens). */
  segments?: SegmentedPrompt;
  /** Recompute policy of the managed prefill (default: the scheduler's). */
  kvPolicy?: RecomputePolicy;
  /** Share of reused chunk tokens to recompute, 0..1 (default: the scheduler's). */
  recomputeRatio?: number;
  /** Sparse decode (CHESS): the share of the KV each decode step reads, (0, 1]; null or 1: all of it. */
  kvBudget?: number | null;
  /** Cancel the request if it has not finished this many ms after submission (the scheduler's requestTimeoutMs caps it). */
  deadlineMs?: number;
}

/** What happened to a request's prompt and KV (usage.ctxr). */
export interface CtxrUsage extends Partial<ManagedPrefillUsage> {
  prompt_tokens_prefix_reused: number;
  prompt_tokens_chunk_reused: number;
  prompt_tokens_recomputed: number;
  prompt_tokens_computed: number;
  ttft_ms: number;
  /** Submission to first admission (time spent waiting in the queue). */
  queue_ms: number;
  /** Sparse decode: steps decoded from a page subset, and selections made. */
  sparse_decode_steps?: number;
  sparse_reconstructions?: number;
}

export interface GeneratedToken {
  id: number;
  /** With logprobs: log p(id) under the raw logits. */
  logprob?: number;
  /** With logprobs: the most likely tokens, most likely first. */
  top?: { id: number; logprob: number }[];
}

export type FinishReason = "stop" | "length";

export type GenerationEvent =
  | { type: "delta"; text: string; tokens: GeneratedToken[]; promptLogprobs?: GeneratedToken[] }
  | { type: "finish"; reason: FinishReason; promptTokens: number; completionTokens: number; ctxr: CtxrUsage; promptLogprobs?: GeneratedToken[] };

export interface GenerationResult {
  text: string;
  tokens: GeneratedToken[];
  /** With promptLogprobs: the prompt's tokens after the first, each with its logprob. */
  promptLogprobs?: GeneratedToken[];
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  ctxr: CtxrUsage;
}

/** A prompt (with max_tokens) that the model or cache cannot hold; `field` names the request field. */
/** How long the masks of a step wait for each other when sequences without one share the batch. */
const MASK_GRACE_MS = 5;
/** A step with nothing to run but held logits checks their masks this often. */
const MASK_POLL_MS = 5;

/** Waits until every promise settles, or `limitMs` passes (null: no limit); never throws. */
async function settleWithin(promises: Promise<unknown>[], limitMs: number | null): Promise<void> {
  if (promises.length === 0) return;
  const all = Promise.allSettled(promises);
  if (limitMs === null) await all;
  else await Promise.race([all, sleep(limitMs)]);
}

export class PromptTooLongError extends Error {
  constructor(
    message: string,
    readonly field: "prompt" | "max_tokens",
    /** The prompt and max_tokens exceed the context length (else another bound of the request). */
    readonly overLength = false,
  ) {
    super(message);
    this.name = "PromptTooLongError";
  }
}

/** A request that was cut short by a runner failure (crash, internal error). */
export class GenerationFailedError extends Error {
  constructor(
    message: string,
    readonly cause?: unknown,
  ) {
    super(message);
    this.name = "GenerationFailedError";
  }
}

/** The waiting queue holds `limit` requests already; `retryAfterSeconds`: a guess at when to try again. */
export class QueueFullError extends Error {
  constructor(
    readonly limit: number,
    readonly retryAfterSeconds: number,
  ) {
    super(`${limit} requests are already waiting for the engine, the most that may wait`);
    this.name = "QueueFullError";
  }
}

/**
 * A request that had not finished by its deadline (it was cancelled); `field` names where the
 * deadline came from: "ctxr.deadline_ms" (the request's), or "" (the server's request timeout).
 */
export class DeadlineExceededError extends Error {
  constructor(
    readonly deadlineMs: number,
    readonly field: string,
    progress: string,
  ) {
    super(`the request did not finish within its deadline of ${deadlineMs} ms (${field === "" ? "the server's request timeout" : field}) and was cancelled; ${progress}`);
    this.name = "DeadlineExceededError";
  }
}

/** Requests that may wait for admission at once (SchedulerOptions.maxWaiting). */
export const DEFAULT_MAX_WAITING = 256;

/** The scheduler was closed. */
export class SchedulerClosedError extends Error {
  constructor() {
    super("the generation engine is shutting down");
    this.name = "SchedulerClosedError";
  }
}

export interface SchedulerOptions {
  /** Most prompt tokens per step, over all prefilling sequences (default 512). */
  prefillChunk?: number;
  /** Most sequences running at once (default 64). */
  maxBatch?: number;
  /** Longest sequence (prompt + generated), further capped by the runner's max positions and cache (default: those). */
  maxModelLen?: number;
  /** Runner restarts and failures. */
  log?: (line: string) => void;
  /** The chunk cache of KV-managed prefills (none: segments are prefilled without reuse). */
  chunkCache?: ChunkCache | null;
  /** Default recompute policy and ratio of KV-managed prefills (prophet, 0.2). */
  kvPolicy?: RecomputePolicy;
  recomputeRatio?: number;
  /** Cache-Craft focused-chunk early stop window in layers (0: off; default 0). */
  focusWindow?: number;
  /** What Cache-Craft's scores and the variant choice use (default "shift"). */
  contextScores?: ContextScores;
  /** ProphetKV span decay (default DEFAULT_PROPHET_SPAN_DECAY). */
  prophetSpanDecay?: number;
  /** ProphetKV's scoring rows (default "all"). */
  prophetQueryRows?: ProphetQueryRows;
  /**
   * Automatic prefix caching of plain prompts (default true): full KV blocks stay cached after
   * their sequence ends, named by a chained hash seeded with `prefixSeed` (the model identity and
   * KV settings), and a new prompt starts from its longest cached prefix.
   */
  prefixCache?: boolean;
  prefixSeed?: string;
  /** Told every block the prefix cache stores and evicts, and when it is dropped (KV events). */
  prefixEvents?: PrefixCacheEvents;
  /** Sparse decode's reconstruction trigger: thresholds and window (default: uncertaintyTrigger.ts's). */
  sparseTrigger?: UncertaintyTriggerOptions;
  /** Told each request's latencies as they happen (Prometheus histograms). */
  latency?: LatencyObserver;
  /** Requests (each choice counts) that may wait for admission; beyond, submit throws QueueFullError (default DEFAULT_MAX_WAITING). */
  maxWaiting?: number;
  /** Every request's deadline in ms after submission (default none); a request's own deadlineMs may only be shorter. */
  requestTimeoutMs?: number | null;
}

/** Request latencies in seconds, as vLLM's histograms name them. */
export interface LatencyObserver {
  /** Submission to first admission. */
  queued(seconds: number): void;
  /** Submission to the first generated token. */
  firstToken(seconds: number): void;
  /** Between two consecutive generated tokens of a request. */
  interToken(seconds: number): void;
  /** Submission to the end (finished, not failed or cancelled). */
  finished(seconds: number): void;
}

export interface SchedulerStats {
  /** FORWARD calls. */
  forwards: number;
  /** FORWARD calls with at least one decoding sequence. */
  decodeSteps: number;
  /** FORWARD calls that decoded two or more sequences together. */
  batchedDecodeSteps: number;
  /** Decode tokens over all steps (sum of sequences decoded per step). */
  decodeTokens: number;
  /** The most sequences decoded in one step. */
  maxDecodeBatch: number;
  /** Prompt tokens run (recomputed ones after preemption included). */
  prefillTokens: number;
  /** Requests completed, failed and cancelled. */
  finished: number;
  failed: number;
  cancelled: number;
  /** Requests cancelled at their deadline, and refused because the waiting queue was full. */
  timedOut: number;
  rejected: number;
  preemptions: number;
  runnerRestarts: number;
  running: number;
  waiting: number;
  /** The most requests that may wait. */
  maxWaiting: number;
  kvBlocksUsed: number;
  kvBlocksTotal: number;
  /** Tokens a KV block holds. */
  blockSize: number;
  /** Blocks the prefix cache holds (part of kvBlocksUsed), and of those the ones running sequences use. */
  kvBlocksPrefixCached: number;
  kvBlocksPrefixReferenced: number;
  /** Prefix-cache lookups: block hashes queried and hit, blocks evicted. */
  prefixBlocksQueried: number;
  prefixBlocksHit: number;
  prefixBlocksEvicted: number;
}

/** An async queue of events with an end (or an error). */
class EventQueue<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | null = null;
  private ended = false;
  private error: unknown = null;

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.wake();
  }

  end(error: unknown = null): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.wake();
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  async *drain(): AsyncGenerator<T> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.ended) {
        if (this.error !== null) throw this.error;
        return;
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}

/** One request's state from submission to its end. */
class Sequence {
  /** Prompt and generated ids; the last one is not yet in the cache while decoding. */
  readonly tokens: number[];
  readonly promptLength: number;
  readonly table: KvBlockTable;
  readonly sampler: Sampler;
  readonly text: TokenTextStream;
  readonly stop: StopMatcher;
  readonly stopIds: ReadonlySet<number>;
  readonly adjuster: LogitsAdjuster | null;
  readonly constraint: GrammarConstraint | null;
  readonly events = new EventQueue<GenerationEvent>();
  generated = 0;
  cancelled = false;
  /** Cancelled at its deadline (cancelled too). */
  expired = false;
  /** The deadline's timer, until the sequence ends. */
  deadlineTimer: ReturnType<typeof setTimeout> | null = null;
  done = false;
  admitted = 0;
  readonly submittedAt = performance.now();
  ttftMs: number | null = null;
  /** When it was first admitted (queue time ends), and when its last token came. */
  firstAdmittedAt: number | null = null;
  lastTokenAt: number | null = null;
  usage: ManagedPrefillUsage | null = null;
  sparse: SparseDecode | null = null;
  /** Prefix-cache blocks this sequence holds (acquired at admission, released with its table). */
  prefixHashes: string[] = [];
  /** Prompt tokens whose KV came from the prefix cache at its first admission. */
  prefixCachedTokens = 0;
  /** Chained hashes of this sequence's full blocks computed so far (they only ever extend). */
  blockHashes: string[] = [];
  /**
   * Leading tokens whose KV is exactly a full prefill's, so its blocks may be prefix-cached: all
   * of a plain sequence's; a segmented one's up to its first approximately reused chunk, known
   * after its KV-managed prefill (0 until then).
   */
  exactTokens: number;
  /** Whether the prompt still waits for its KV-managed prefill. */
  managedPending: boolean;
  /** With promptLogprobs: the prompt's tokens 1.. with their logprobs, as the prefill reaches them. */
  readonly promptTokenLogprobs: GeneratedToken[] = [];
  /**
   * Structured outputs: the logits of the next token, held while its grammar mask is still being
   * computed (so the other sequences of the batch go on without waiting for it).
   */
  awaitingMask: Float32Array | null = null;

  constructor(
    readonly request: GenerationRequest,
    decoder: StreamDecoder,
    blockSize: number,
    readonly maxTokens: number,
  ) {
    this.tokens = [...request.promptIds];
    this.promptLength = this.tokens.length;
    this.table = new KvBlockTable(blockSize);
    this.sampler = new Sampler(request.sampling);
    this.text = new TokenTextStream(decoder, { skipSpecialTokens: request.skipSpecialTokens ?? true, contextIds: request.promptIds });
    this.stop = new StopMatcher(request.stop ?? [], request.includeStopInOutput ?? false);
    this.stopIds = new Set(request.stopTokenIds ?? []);
    this.constraint = request.constraint ?? null;
    this.adjuster = request.adjustments !== undefined && adjustsLogits(request.adjustments) ? new LogitsAdjuster(request.adjustments, request.promptIds) : null;
    this.managedPending = request.segments !== undefined;
    this.exactTokens = this.managedPending ? 0 : Infinity;
  }

  /** Tokens still to run before the next logits (0 never: the last token always runs). */
  get uncached(): number {
    return this.tokens.length - this.table.length;
  }

  get prefilling(): boolean {
    return this.uncached > 1;
  }

  get needsManagedPrefill(): boolean {
    return this.managedPending;
  }

  get ctxrUsage(): CtxrUsage {
    const usage: CtxrUsage = {
      prompt_tokens_prefix_reused: this.prefixCachedTokens,
      prompt_tokens_chunk_reused: 0,
      prompt_tokens_recomputed: 0,
      prompt_tokens_computed: this.promptLength - this.prefixCachedTokens,
      ...(this.usage ?? {}),
      ttft_ms: Math.round((this.ttftMs ?? 0) * 1000) / 1000,
      queue_ms: Math.round(((this.firstAdmittedAt ?? this.submittedAt) - this.submittedAt) * 1000) / 1000,
    };
    if (this.sparse !== null) {
      usage.sparse_decode_steps = this.sparse.sparseSteps;
      usage.sparse_reconstructions = this.sparse.reconstructions;
    }
    return usage;
  }
}

/** A submitted request: its events as an async iterable, or its whole result. */
export class GenerationHandle implements AsyncIterable<GenerationEvent> {
  constructor(
    private readonly sequence: Sequence,
    private readonly onCancel: () => void,
  ) {}

  get promptTokens(): number {
    return this.sequence.promptLength;
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerationEvent> {
    return this.sequence.events.drain();
  }

  /** Stops generating (frees the request's KV blocks at the next step); later events are dropped. */
  cancel(): void {
    if (this.sequence.done || this.sequence.cancelled) return;
    this.sequence.cancelled = true;
    this.sequence.events.end();
    this.onCancel();
  }

  /** Collects every event into the whole result. */
  async result(): Promise<GenerationResult> {
    let text = "";
    const tokens: GeneratedToken[] = [];
    for await (const event of this) {
      if (event.type === "delta") {
        text += event.text;
        tokens.push(...event.tokens);
      } else {
        return {
          text,
          tokens,
          finishReason: event.reason,
          promptTokens: event.promptTokens,
          completionTokens: event.completionTokens,
          ctxr: event.ctxr,
          ...(event.promptLogprobs !== undefined ? { promptLogprobs: event.promptLogprobs } : {}),
        };
      }
    }
    throw new GenerationFailedError("the request was cancelled");
  }
}

/**
 * The logits with every stop token at −Infinity (min_tokens), on a copy when `shared` (the raw
 * logits); as they are when that would leave no token possible (a grammar that only allows the end).
 */
function withoutStopTokens(logits: Float32Array, shared: boolean, stopIds: ReadonlySet<number>): Float32Array {
  let open = false;
  for (let id = 0; id < logits.length && !open; id++) if (!stopIds.has(id) && logits[id]! > -Infinity) open = true;
  if (!open || stopIds.size === 0) return logits;
  const out = shared ? Float32Array.from(logits) : logits;
  for (const id of stopIds) if (id < out.length) out[id] = -Infinity;
  return out;
}

export class GenerationScheduler {
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private pool: KvBlockPool;
  /** Automatic prefix cache of plain prompts' full blocks (null: off). */
  private prefix: PrefixBlockCache | null;
  private loop: Promise<void> | null = null;
  private prefetching: Promise<void> | null = null;
  private closed = false;
  private admissions = 0;
  /** Set when the runner must be restarted before the next step (it crashed, or a restart failed). */
  private needsRestart = false;
  /** Restart even with no work queued (right after a crash; not again after a failed restart). */
  private eagerRestart = false;
  private readonly tableOwner = new WeakMap<KvBlockTable, Sequence>();
  private readonly prefillChunk: number;
  private readonly maxBatch: number;
  private readonly maxWaiting: number;
  /** Queue time of recent admissions, ms (an exponential moving average): what Retry-After is guessed from. */
  private recentQueueMs = 0;
  private readonly counters = {
    forwards: 0,
    decodeSteps: 0,
    batchedDecodeSteps: 0,
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
    this.pool = this.newPool(runner.info);
    this.chunkCache?.attachPool(this.pool);
    this.prefix = this.newPrefixCache();
  }

  private newPrefixCache(): PrefixBlockCache | null {
    if (!(this.options.prefixCache ?? true)) return null;
    const events = this.options.prefixEvents;
    return new PrefixBlockCache(events === undefined ? undefined : (hashes) => events.removed(hashes));
  }

  /** Prefix-cache statistics (null when it is off). */
  get prefixCacheStats(): PrefixBlockCacheStats | null {
    return this.prefix?.stats ?? null;
  }

  /** The chained hashes of the sequence's first `blocks` full blocks (each block hashed once per sequence). */
  private blockHashes(sequence: Sequence, blocks: number): string[] {
    const known = sequence.blockHashes;
    if (known.length < blocks) {
      const blockSize = this.pool.blockSize;
      const salt = sequence.request.cacheSalt;
      const seed = (this.options.prefixSeed ?? "") + (salt === undefined ? "" : `|salt=${JSON.stringify(salt)}`);
      let parent = known.length === 0 ? chainRoot(seed) : known[known.length - 1]!;
      for (let i = known.length; i < blocks; i++) {
        parent = blockHash(parent, sequence.tokens, i * blockSize, (i + 1) * blockSize);
        known.push(parent);
      }
    }
    return known.slice(0, blocks);
  }

  /**
   * A sequence being admitted with an empty table starts from its longest cached prefix: those
   * blocks join its table (referenced, never written: at least its last token is computed).
   *
   * A segmented prompt consults the chunk cache's exact-prefix variants too and takes whichever
   * reaches further (one exact prefix, never both); its managed prefill then starts after the
   * blocks. A "full" prefill uses no cache at all.
   */
  private attachCachedPrefix(sequence: Sequence): void {
    if (this.prefix === null || sequence.table.blocks.length > 0 || sequence.request.promptLogprobs != null) return;
    const blockSize = this.pool.blockSize;
    const segments = sequence.request.segments;
    const hashes = this.blockHashes(sequence, Math.floor(((segments === undefined ? sequence.tokens.length : sequence.promptLength) - 1) / blockSize));
    if (segments !== undefined) {
      if ((sequence.request.kvPolicy ?? this.options.kvPolicy ?? DEFAULT_KV_POLICY) === "full") return;
      const exactVariants = this.chunkCache?.index.longestExactPrefix(segments.segments.map((segment) => segment.hash)) ?? [];
      const variantTokens = exactVariants.reduce((sum, variant) => sum + variant.tokenCount, 0);
      if (this.prefix.cachedRun(hashes) * blockSize <= variantTokens && variantTokens > 0) return;
    }
    const hit = this.prefix.lookup(hashes);
    if (hit.length === 0) return;
    const held = hashes.slice(0, hit.length);
    this.prefix.acquire(held);
    sequence.prefixHashes = held;
    sequence.table.blocks.push(...hit);
    sequence.table.length = hit.length * blockSize;
    if (sequence.generated === 0 && sequence.ttftMs === null) sequence.prefixCachedTokens = Math.max(sequence.prefixCachedTokens, hit.length * blockSize);
  }

  /**
   * Registers a plain sequence's newly filled blocks (prompt or generated tokens whose KV is
   * written) in the prefix cache, held by the sequence, so that requests admitted from now on find
   * them. A block another sequence cached first replaces this sequence's copy (equal tokens after
   * an equal prefix: the same KV), and the copy's id goes to `spare`, to free.
   */
  private cacheFilledBlocks(sequence: Sequence, spare: number[]): void {
    if (this.prefix === null) return;
    const table = sequence.table;
    const blockSize = this.pool.blockSize;
    const full = Math.min(Math.floor(Math.min(table.length, sequence.exactTokens) / blockSize), table.blocks.length);
    const held = sequence.prefixHashes.length;
    if (full <= held) return;
    const hashes = this.blockHashes(sequence, full);
    const stored: StoredPrefixBlock[] = [];
    for (let i = held; i < full; i++) {
      const block = table.blocks[i]!;
      const parent = i === 0 ? null : hashes[i - 1]!;
      const cached = this.prefix.insert(hashes[i]!, parent, block);
      if (cached !== block) {
        table.blocks[i] = cached;
        spare.push(block);
      } else if (this.options.prefixEvents !== undefined) {
        stored.push({ hash: hashes[i]!, parent, tokens: sequence.tokens.slice(i * blockSize, (i + 1) * blockSize) });
      }
    }
    sequence.prefixHashes = hashes;
    if (stored.length > 0) this.options.prefixEvents!.stored(stored);
  }

  /** After a step: the step's sequences' filled blocks join the prefix cache; duplicate copies are freed. */
  private async cacheStepBlocks(sequences: readonly Sequence[]): Promise<void> {
    if (this.prefix === null) return;
    const spare = new KvBlockTable(this.pool.blockSize);
    for (const sequence of sequences) this.cacheFilledBlocks(sequence, spare.blocks);
    await this.pool.release([spare]);
  }

  /**
   * Gives back the blocks of ended or preempted sequences' tables: full blocks of exact KV
   * (cached as they filled) stay in the prefix cache, unreferenced by the sequence; the rest go
   * back to the pool. After a failed step the table's length does not count that step's entries,
   * so only blocks written by earlier steps are kept. A segmented prompt readmitted later runs its
   * managed prefill again.
   */
  private async releaseTables(tables: readonly KvBlockTable[]): Promise<void> {
    const toFree: KvBlockTable[] = [];
    for (const table of tables) {
      const sequence = this.tableOwner.get(table);
      if (sequence === undefined) {
        toFree.push(table);
        continue;
      }
      const spare = new KvBlockTable(this.pool.blockSize);
      if (this.prefix !== null) {
        this.cacheFilledBlocks(sequence, spare.blocks);
        this.prefix.release(sequence.prefixHashes);
      }
      spare.blocks.push(...table.blocks.slice(sequence.prefixHashes.length));
      table.blocks.length = 0;
      table.length = 0;
      sequence.prefixHashes = [];
      if (sequence.request.segments !== undefined) {
        sequence.managedPending = true;
        sequence.exactTokens = 0;
      }
      toFree.push(spare);
    }
    await this.pool.release(toFree);
  }

  /**
   * The hashes of prompt blocks that running plain sequences are about to compute (their prompt's
   * full blocks not yet written).
   */
  private pendingPrefixBlocks(): Set<string> {
    const pending = new Set<string>();
    if (this.prefix === null) return pending;
    for (const sequence of this.running) this.addPendingBlocks(sequence, pending);
    return pending;
  }

  private addPendingBlocks(sequence: Sequence, pending: Set<string>): void {
    if (sequence.request.segments !== undefined || sequence.done || sequence.cancelled) return;
    const blockSize = this.pool.blockSize;
    const written = Math.floor(sequence.table.length / blockSize);
    const promptBlocks = Math.floor(sequence.promptLength / blockSize);
    if (written >= promptBlocks) return;
    const hashes = this.blockHashes(sequence, promptBlocks);
    for (let i = written; i < promptBlocks; i++) pending.add(hashes[i]!);
  }

  /**
   * Requests arriving together with a common prefix compute it once: a plain prompt whose next
   * uncached block is one a running sequence is computing waits (others behind it are still
   * admitted) and is admitted once those blocks are cached, to start after them.
   */
  private waitsForSharedPrefix(sequence: Sequence, pending: ReadonlySet<string>): boolean {
    if (this.prefix === null || pending.size === 0 || sequence.request.segments !== undefined || sequence.table.blocks.length > 0) return false;
    const hashes = this.blockHashes(sequence, Math.floor((sequence.tokens.length - 1) / this.pool.blockSize));
    const run = this.prefix.cachedRun(hashes);
    return run < hashes.length && pending.has(hashes[run]!);
  }

  /** Frees at least `blocks` pool blocks if cached KV can give them: chunk caches first, then unreferenced prefix blocks. */
  private async makeRoom(blocks: number): Promise<void> {
    if (blocks <= this.pool.free) return;
    if (this.chunkCache !== null) await this.chunkCache.reclaim(blocks);
    if (blocks <= this.pool.free || this.prefix === null) return;
    const evicted = new KvBlockTable(this.pool.blockSize);
    evicted.blocks.push(...this.prefix.evict(blocks - this.pool.free));
    await this.pool.release([evicted]);
  }

  private get chunkCache(): ChunkCache | null {
    return this.options.chunkCache ?? null;
  }

  private newPool(info: RunnerInfo): KvBlockPool {
    return new KvBlockPool(this.runner, info.block_size, info.free_blocks);
  }

  /** Longest sequence (prompt + generated tokens) the model and the cache can hold. */
  get maxModelLen(): number {
    const info = this.runner.info;
    const limits = [info.max_position_embeddings > 0 ? info.max_position_embeddings : Infinity, this.pool.totalBlocks * info.block_size];
    if (this.options.maxModelLen !== undefined) limits.push(this.options.maxModelLen);
    return Math.min(...limits);
  }

  get stats(): SchedulerStats {
    const prefix = this.prefix?.stats;
    return {
      ...this.counters,
      running: this.running.length,
      waiting: this.waiting.length,
      maxWaiting: this.maxWaiting,
      kvBlocksUsed: this.pool.used,
      kvBlocksTotal: this.pool.totalBlocks,
      blockSize: this.pool.blockSize,
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
    const maxLen = this.maxModelLen;
    if (promptLength >= maxLen) {
      throw new PromptTooLongError(`the prompt has ${promptLength} tokens; the maximum context length of this model and KV cache is ${maxLen} tokens in all, so a prompt may have at most ${maxLen - 1}`, "prompt", true);
    }
    const budget = maxTokens ?? maxLen - promptLength;
    if (!Number.isSafeInteger(budget) || budget < 1) throw new PromptTooLongError(`max_tokens must be a positive integer, got ${budget}`, "max_tokens");
    if (promptLength + budget > maxLen) {
      throw new PromptTooLongError(
        `the maximum context length of this model and KV cache is ${maxLen} tokens, but ${promptLength + budget} were requested (${promptLength} in the prompt, ${budget} in max_tokens); lower max_tokens or shorten the prompt`,
        "max_tokens",
        true,
      );
    }
    return budget;
  }

  /**
   * Queues a request. Throws PromptTooLongError when prompt + max_tokens cannot
   * fit, and the Sampler's SamplingError for bad sampling parameters.
   */
  submit(request: GenerationRequest): GenerationHandle {
    if (this.closed) throw new SchedulerClosedError();
    const promptLength = request.promptIds.length;
    if (promptLength === 0) throw new PromptTooLongError("the prompt is empty; it needs at least one token", "prompt");
    const vocab = this.runner.info.vocab;
    for (const id of request.promptIds) {
      if (!Number.isSafeInteger(id) || id < 0 || id >= vocab) throw new PromptTooLongError(`prompt token ${id} is not in the model's vocabulary (0 to ${vocab - 1})`, "prompt");
    }
    const maxTokens = this.checkLength(promptLength, request.maxTokens);
    if (request.segments !== undefined) {
      const flat = promptTokens(request.segments);
      if (flat.length !== promptLength || flat.some((id, i) => id !== request.promptIds[i])) throw new Error("submit: promptIds must be the segments' tokens");
    }
    if (request.recomputeRatio !== undefined && !(request.recomputeRatio >= 0 && request.recomputeRatio <= 1)) {
      throw new PromptTooLongError(`recompute_ratio must be between 0 and 1, got ${request.recomputeRatio}`, "prompt");
    }
    if (request.adjustments !== undefined) checkLogitsAdjustments(request.adjustments, vocab);
    if (request.minTokens !== undefined && !(Number.isSafeInteger(request.minTokens) && request.minTokens >= 0)) throw new PromptTooLongError(`min_tokens must be a non-negative integer, got ${request.minTokens}`, "max_tokens");
    if (request.promptLogprobs != null && request.segments !== undefined) throw new PromptTooLongError("prompt logprobs (echo with logprobs) need a plain prompt, not segments", "prompt");
    const budget = request.kvBudget ?? null;
    if (budget !== null && !(budget > 0 && budget <= 1)) throw new PromptTooLongError(`kv_budget must be in (0, 1], got ${budget}`, "prompt");
    if (request.deadlineMs !== undefined && !(Number.isFinite(request.deadlineMs) && request.deadlineMs > 0)) throw new RangeError(`deadlineMs must be a positive number, got ${request.deadlineMs}`);
    if (this.waiting.length >= this.maxWaiting) {
      this.counters.rejected++;
      throw new QueueFullError(this.maxWaiting, Math.min(60, Math.max(1, Math.ceil(this.recentQueueMs / 1000))));
    }
    const sequence = new Sequence(request, this.decoder, this.runner.info.block_size, maxTokens);
    if (budget !== null && budget < 1) sequence.sparse = new SparseDecode(this.runner.info, budget, this.options.sparseTrigger);
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

  private stopDeadline(sequence: Sequence): void {
    if (sequence.deadlineTimer !== null) clearTimeout(sequence.deadlineTimer);
    sequence.deadlineTimer = null;
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

  /** Fails every request and stops the loop (the runner is the owner's to shut down). */
  async close(): Promise<void> {
    this.closed = true;
    for (const sequence of [...this.waiting, ...this.running]) this.fail(sequence, new SchedulerClosedError());
    this.waiting.length = 0;
    await this.loop;
  }

  /** A waiting request that is cancelled leaves the queue at once; a running one at the next step. */
  private onCancel(sequence: Sequence): void {
    this.stopDeadline(sequence);
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
      if (this.hasWork()) this.kick();
    });
  }

  private hasWork(): boolean {
    return !this.closed && (this.waiting.length > 0 || this.running.length > 0 || (this.needsRestart && this.eagerRestart));
  }

  private async run(): Promise<void> {
    while (this.hasWork()) {
      if (this.needsRestart || !this.runner.alive) {
        if (!(await this.restartRunner())) return;
        continue;
      }
      try {
        await this.step();
      } catch (error) {
        await this.recover(error);
      }
    }
  }

  /** Restarts the runner; on failure fails the waiting requests (the next request tries again). */
  private async restartRunner(): Promise<boolean> {
    this.options.log?.("ctxr: restarting the model runner");
    try {
      const info = await this.runner.restart();
      this.counters.runnerRestarts++;
      this.pool = this.newPool(info);
      this.chunkCache?.attachPool(this.pool);
      // The runner's blocks are gone, and with them every cached prefix.
      if (this.prefix !== null) {
        this.prefix = this.newPrefixCache();
        this.options.prefixEvents?.cleared();
      }
      for (const sequence of [...this.running, ...this.waiting]) sequence.prefixHashes = [];
      this.needsRestart = false;
      this.eagerRestart = false;
      this.options.log?.(`ctxr: model runner restarted (${info.num_blocks} KV blocks)`);
      return true;
    } catch (error) {
      const failure = new GenerationFailedError(`the model runner could not be restarted: ${(error as Error).message}`, error);
      this.options.log?.(`ctxr: ${failure.message}`);
      for (const sequence of [...this.running, ...this.waiting]) this.fail(sequence, failure);
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
    for (const sequence of victims) this.fail(sequence, failure);
    if (crashed) {
      this.needsRestart = true;
      this.eagerRestart = true;
      return;
    }
    try {
      await this.releaseTables(victims.map((sequence) => sequence.table));
    } catch {
      // The runner is in trouble: start afresh.
      this.needsRestart = true;
      this.eagerRestart = true;
    }
  }

  private fail(sequence: Sequence, error: Error): void {
    if (sequence.done) return;
    this.stopDeadline(sequence);
    sequence.done = true;
    sequence.constraint?.dispose();
    this.counters.failed++;
    sequence.events.end(error);
  }

  private finish(sequence: Sequence, reason: FinishReason, finalText: string, tokens: GeneratedToken[]): void {
    this.stopDeadline(sequence);
    sequence.done = true;
    this.options.latency?.finished((performance.now() - sequence.submittedAt) / 1000);
    sequence.constraint?.dispose();
    this.counters.finished++;
    if (finalText !== "" || tokens.length > 0) sequence.events.push({ type: "delta", text: finalText, tokens });
    sequence.events.push({
      type: "finish",
      reason,
      promptTokens: sequence.promptLength,
      completionTokens: sequence.generated,
      ctxr: sequence.ctxrUsage,
      ...(sequence.request.promptLogprobs != null ? { promptLogprobs: sequence.promptTokenLogprobs } : {}),
    });
    sequence.events.end();
  }

  /** Blocks a sequence is counted for at admission: its tokens so far plus the next one. */
  private committedBlocks(sequence: Sequence): number {
    return blocksFor(Math.min(sequence.tokens.length + 1, this.maxModelLen), this.pool.blockSize);
  }

  private async step(): Promise<void> {
    // Cancelled sequences leave; their blocks are freed with the step's other frees.
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

    // Admission in cache-aware order (first come first served without KV-managed prompts).
    let committed = this.running.reduce((sum, sequence) => sum + this.committedBlocks(sequence), 0);
    const admitted = new Set<Sequence>();
    const pending = this.waiting.length > 0 ? this.pendingPrefixBlocks() : new Set<string>();
    for (const candidate of this.admissionOrder()) {
      if (this.running.length >= this.maxBatch) break;
      if (this.waitsForSharedPrefix(candidate, pending)) continue;
      const need = this.committedBlocks(candidate);
      if (committed + need > this.pool.totalBlocks && this.running.length > 0) break;
      admitted.add(candidate);
      candidate.admitted = ++this.admissions;
      if (candidate.firstAdmittedAt === null) {
        candidate.firstAdmittedAt = performance.now();
        const queuedMs = candidate.firstAdmittedAt - candidate.submittedAt;
        this.recentQueueMs += 0.2 * (queuedMs - this.recentQueueMs);
        this.options.latency?.queued(queuedMs / 1000);
      }
      this.tableOwner.set(candidate.table, candidate);
      this.attachCachedPrefix(candidate);
      this.running.push(candidate);
      if (this.prefix !== null) this.addPendingBlocks(candidate, pending);
      committed += need;
    }
    if (admitted.size > 0) {
      const rest = this.waiting.filter((sequence) => !admitted.has(sequence));
      this.waiting.length = 0;
      this.waiting.push(...rest);
    }

    // KV-managed prefills run on their own, one sequence at a time.
    const managed = this.running.find((sequence) => sequence.needsManagedPrefill && !sequence.cancelled && !sequence.done);
    if (managed !== undefined) {
      await this.releaseTables(released.splice(0));
      if (await this.runManagedPrefill(managed)) return;
    }

    await this.sampleHeldLogits();

    // The batch: every decoding sequence, and prompt chunks within the budget.
    let plan = this.plan();
    const shortfall = () => this.pool.shortfall(plan.map((p) => ({ table: p.sequence.table, entries: p.sequence.table.length + p.count })));
    // Ended tables first; then cached KV gives way (chunk caches leave the device, unreferenced
    // prefix blocks are evicted) before a running sequence is preempted or a step fails for lack
    // of blocks; then the most recently admitted sequences are preempted until the step fits
    // (their blocks go back, or stay in the prefix cache, and so can be evicted in turn).
    // release() empties the tables at once, so a preempted sequence recomputes from its start
    // (from its cached prefix).
    for (;;) {
      if (released.length > 0) await this.releaseTables(released.splice(0));
      await this.makeRoom(shortfall());
      if (shortfall() <= this.pool.free || this.running.length <= 1) break;
      const victim = this.running.reduce((latest, sequence) => (sequence.admitted > latest.admitted ? sequence : latest));
      this.running.splice(this.running.indexOf(victim), 1);
      released.push(victim.table);
      // Its held logits are computed again with its tokens.
      victim.awaitingMask = null;
      this.waiting.unshift(victim);
      this.counters.preemptions++;
      plan = this.plan();
    }
    if (plan.length === 0) {
      await this.awaitAnyMask(MASK_POLL_MS);
      return;
    }
    await this.pool.grow(plan.map((p) => ({ table: p.sequence.table, entries: p.sequence.table.length + p.count })));

    const sequences: ForwardSequence[] = plan.map(({ sequence, count, decode }) => {
      const start = sequence.table.length;
      if (decode && sequence.sparse !== null) {
        const entry = sequence.sparse.decodeEntry(sequence.table.blocks, start);
        return { table: entry.table, tokens: [sequence.tokens[start]!], positions: [start], indices: [entry.index], logitRows: [0] };
      }
      const indices = new Uint32Array(count);
      for (let i = 0; i < count; i++) indices[i] = start + i;
      const last = start + count === sequence.tokens.length;
      const logitRows = this.wantsPromptRows(sequence, start) ? Array.from({ length: count }, (_, row) => row) : last ? [count - 1] : [];
      return { table: sequence.table.blocks, tokens: sequence.tokens.slice(start, start + count), indices, logitRows };
    });
    const starts = plan.map(({ sequence }) => sequence.table.length);
    const decoding = plan.filter((p) => p.decode).length;
    this.counters.forwards++;
    if (decoding > 0) {
      this.counters.decodeSteps++;
      this.counters.decodeTokens += decoding;
      if (decoding > 1) this.counters.batchedDecodeSteps++;
      this.counters.maxDecodeBatch = Math.max(this.counters.maxDecodeBatch, decoding);
    }
    for (const p of plan) if (!p.decode) this.counters.prefillTokens += p.count;

    const forwarding = this.runner.forward({ sequences });
    // Structured outputs: the masks of the tokens this step samples are computed while the runner works.
    const constrained = plan.flatMap((p, i) => (p.sequence.constraint !== null && sequences[i]!.logitRows.length > 0 ? [p.sequence.constraint] : []));
    for (const constraint of constrained) constraint.prepare();
    const result = await forwarding;
    // A sequence whose mask is late does not hold up the others: when the batch has sequences
    // without one, masks get a short grace, and the late ones keep their logits for a later step.
    const alone = plan.every((p) => p.sequence.constraint !== null);
    await settleWithin(
      constrained.map((constraint) => constraint.ready()),
      alone ? null : MASK_GRACE_MS,
    );

    const finished: KvBlockTable[] = [];
    for (const { sequence, count } of plan) sequence.table.length += count;
    await this.cacheStepBlocks(plan.map((p) => p.sequence));
    const sampled: Sequence[] = [];
    plan.forEach(({ sequence, count }, i) => {
      let logits = result.logits[i]!;
      if (sequences[i]!.logitRows.length > 1) logits = this.recordPromptLogprobs(sequence, starts[i]!, count, logits);
      if (sequence.cancelled || sequence.done || logits.length === 0) return;
      sequence.sparse?.observe(logits);
      if (sequence.constraint !== null && !sequence.constraint.hasMask && sequence.constraint.failure === null) {
        sequence.awaitingMask = Float32Array.from(logits);
        return;
      }
      if (this.acceptOrFail(sequence, logits)) sampled.push(sequence);
    });
    await Promise.all(sampled.map((sequence) => this.jumpAhead(sequence)));
    for (const { sequence } of plan) if (sequence.done && !finished.includes(sequence.table)) finished.push(sequence.table);
    // Sparse decode summarises pages as they fill.
    for (const { sequence } of plan) {
      if (sequence.sparse !== null && !sequence.done && !sequence.cancelled && sequence.uncached <= 1) await sequence.sparse.sync(this.runner, sequence.table);
    }
    if (finished.length > 0) {
      for (let i = this.running.length - 1; i >= 0; i--) if (this.running[i]!.done) this.running.splice(i, 1);
      await this.releaseTables(finished);
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
   * A KV-managed prefill (managedPrefill.ts): blocks for the prompt and the first
   * token, the prefill, the first token out; then the chunk cache's store-back.
   * A sequence readmitted after preemption with tokens already generated only
   * gets its prompt back this way; the rest is recomputed by ordinary steps.
   */
  private async runManagedPrefill(sequence: Sequence): Promise<boolean> {
    const entries = sequence.promptLength + 1;
    const need = sequence.table.blocksNeeded(entries);
    await this.fetchRemoteChunks(sequence);
    await this.makeRoom(need);
    if (need > this.pool.free && this.running.length > 1) {
      // Back to the queue until running sequences free blocks; this step decodes the others.
      this.running.splice(this.running.indexOf(sequence), 1);
      this.waiting.unshift(sequence);
      return false;
    }
    await this.pool.grow([{ table: sequence.table, entries }]);
    const request = sequence.request;
    this.counters.forwards++;
    const result = await managedPrefill(this.runner, this.chunkCache, request.segments!, sequence.table.blocks, {
      cachedTokens: sequence.table.length,
      policy: request.kvPolicy ?? this.options.kvPolicy ?? DEFAULT_KV_POLICY,
      recomputeRatio: request.recomputeRatio ?? this.options.recomputeRatio ?? DEFAULT_RECOMPUTE_RATIO,
      focusWindow: this.options.focusWindow ?? 0,
      contextScores: this.options.contextScores ?? "shift",
      // The shift is metadata for cachecraft: measured when this request or the server's default uses it.
      measureShift: (this.options.contextScores ?? "shift") === "shift" && (request.kvPolicy === "cachecraft" || (this.options.kvPolicy ?? DEFAULT_KV_POLICY) === "cachecraft"),
      ...(this.options.prophetSpanDecay !== undefined ? { prophetSpanDecay: this.options.prophetSpanDecay } : {}),
      prophetQueryRows: this.options.prophetQueryRows ?? "all",
    });
    sequence.table.length = sequence.promptLength;
    sequence.managedPending = false;
    sequence.exactTokens = result.exactTokens;
    this.counters.prefillTokens += result.usage.prompt_tokens_computed + result.usage.prompt_tokens_recomputed;
    const first = sequence.generated === 0;
    if (first) sequence.usage = result.usage;
    if (first && !sequence.cancelled && !sequence.done) {
      await sequence.constraint?.ready().catch(() => {});
      sequence.sparse?.observe(result.logits);
      if (this.acceptOrFail(sequence, result.logits)) await this.jumpAhead(sequence);
    }
    await result.storeBack();
    await this.cacheStepBlocks([sequence]);
    if (sequence.sparse !== null && !sequence.done) await sequence.sparse.sync(this.runner, sequence.table);
    if (sequence.done) {
      this.running.splice(this.running.indexOf(sequence), 1);
      await this.releaseTables([sequence.table]);
    }
    return true;
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

  /** Whether a step running the sequence's tokens from `start` returns logits for every row (prompt logprobs). */
  private wantsPromptRows(sequence: Sequence, start: number): boolean {
    return sequence.request.promptLogprobs != null && start < sequence.promptLength - 1 && start === sequence.promptTokenLogprobs.length;
  }

  /**
   * Records the logprobs of the prompt tokens that rows [start, start + count) predict, and
   * returns the last row's logits when that row samples the next token (else none).
   */
  private recordPromptLogprobs(sequence: Sequence, start: number, count: number, rows: Float32Array): Float32Array {
    const vocab = this.runner.info.vocab;
    const topN = sequence.request.promptLogprobs ?? 0;
    for (let row = 0; row < count; row++) {
      const next = start + row + 1;
      if (next >= sequence.promptLength) break;
      const id = sequence.tokens[next]!;
      const lp = tokenLogprobs(rows.subarray(row * vocab, (row + 1) * vocab), id, topN);
      sequence.promptTokenLogprobs.push({ id, logprob: lp.logprob, top: lp.top });
    }
    return start + count === sequence.tokens.length ? rows.subarray((count - 1) * vocab, count * vocab) : new Float32Array(0);
  }

  /** This step's work: [sequence, tokens to run, whether it is a decode]. */
  private plan(): { sequence: Sequence; count: number; decode: boolean }[] {
    const plan: { sequence: Sequence; count: number; decode: boolean }[] = [];
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

  /** Samples the next token from the logits and passes its text on; ends the sequence on eos, a stop string or a length limit. */
  private accept(sequence: Sequence, logits: Float32Array): void {
    let sampling = sequence.adjuster === null ? logits : sequence.adjuster.apply(logits);
    const constraint = sequence.constraint;
    if (constraint !== null) sampling = constraint.masked(sampling);
    if (sequence.generated < (sequence.request.minTokens ?? 0)) sampling = withoutStopTokens(sampling, sampling === logits, sequence.stopIds);
    const id = sequence.sampler.sample(sampling);
    sequence.adjuster?.observe(id);
    constraint?.accept(id);
    const token: GeneratedToken = { id };
    const topN = sequence.request.logprobs;
    if (topN !== undefined && topN !== null) {
      const lp = tokenLogprobs(logits, id, topN);
      token.logprob = lp.logprob;
      token.top = lp.top;
    }
    const now = performance.now();
    if (sequence.ttftMs === null) {
      sequence.ttftMs = now - sequence.submittedAt;
      this.options.latency?.firstToken(sequence.ttftMs / 1000);
    } else if (sequence.lastTokenAt !== null) {
      this.options.latency?.interToken((now - sequence.lastTokenAt) / 1000);
    }
    sequence.lastTokenAt = now;
    this.emit(sequence, token);
  }

  /**
   * Samples the next token (accept), unless the sequence's grammar failed (its mask could not be
   * had, or allows nothing): then the sequence alone ends with that error. Whether it sampled.
   */
  private acceptOrFail(sequence: Sequence, logits: Float32Array): boolean {
    const failure = sequence.constraint?.failure ?? null;
    if (failure !== null) {
      this.fail(sequence, failure);
      return false;
    }
    try {
      this.accept(sequence, logits);
      return true;
    } catch (error) {
      if (!(error instanceof GrammarRuntimeError)) throw error;
      this.fail(sequence, error);
      return false;
    }
  }

  /**
   * Jump-forward: where the grammar allows a single continuation, its tokens follow without
   * sampling (they are computed with the next step). Not with logprobs: they have no logits. Then
   * the next mask is asked for at once, so that it is computed while the step runs.
   */
  private async jumpAhead(sequence: Sequence): Promise<void> {
    const constraint = sequence.constraint;
    if (constraint === null || sequence.done) return;
    const topN = sequence.request.logprobs;
    if (topN === undefined || topN === null) {
      const room = Math.min(sequence.maxTokens - sequence.generated, this.maxModelLen - sequence.tokens.length);
      let forced: number[];
      try {
        forced = await constraint.jumpForward(room);
      } catch (error) {
        if (!(error instanceof GrammarRuntimeError)) throw error;
        this.fail(sequence, error);
        return;
      }
      for (const id of forced) {
        if (sequence.done || sequence.cancelled) return;
        sequence.adjuster?.observe(id);
        this.emit(sequence, { id });
      }
    }
    if (!sequence.done && !sequence.cancelled) constraint.prepare();
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
      if (this.acceptOrFail(sequence, logits)) sampled.push(sequence);
    }
    await Promise.all(sampled.map((sequence) => this.jumpAhead(sequence)));
  }

  /** Waits until a held sequence's mask comes or fails (at most `limitMs`, when given). */
  private async awaitAnyMask(limitMs: number | null): Promise<void> {
    const waits = this.running.filter((sequence) => sequence.awaitingMask !== null && !sequence.done).map((sequence) => sequence.constraint!.ready().catch(() => {}));
    if (waits.length === 0) return;
    await Promise.race(limitMs === null ? waits : [...waits, sleep(limitMs)]);
  }

  /** A new token joins the sequence: its text goes out, or it ends the sequence (stop token or string, grammar complete, a length limit). */
  private emit(sequence: Sequence, token: GeneratedToken): void {
    const id = token.id;
    sequence.tokens.push(id);
    sequence.generated++;
    if ((sequence.stopIds.has(id) && sequence.generated > (sequence.request.minTokens ?? 0)) || sequence.constraint?.terminated === true) {
      // The stop token's own text only with includeStopInOutput (special tokens' text is still skipped unless asked for).
      const own = sequence.request.includeStopInOutput || !sequence.stopIds.has(id) ? sequence.text.push(id) : "";
      const rest = sequence.stop.push(own + sequence.text.flush());
      this.finish(sequence, "stop", rest.stopped ? rest.text : rest.text + sequence.stop.flush(), [token]);
      return;
    }
    // Before min_tokens the text passes by the stop strings unchecked.
    const early = sequence.generated <= (sequence.request.minTokens ?? 0);
    const piece = early ? { text: sequence.stop.flush() + sequence.text.push(id), stopped: false } : sequence.stop.push(sequence.text.push(id));
    if (piece.stopped) {
      this.finish(sequence, "stop", piece.text, [token]);
      return;
    }
    if (sequence.generated >= sequence.maxTokens || sequence.tokens.length >= this.maxModelLen) {
      const rest = sequence.stop.push(sequence.text.flush());
      const text = piece.text + rest.text + (rest.stopped ? "" : sequence.stop.flush());
      this.finish(sequence, rest.stopped ? "stop" : "length", text, [token]);
      return;
    }
    const first = sequence.generated === 1 && sequence.request.promptLogprobs != null;
    sequence.events.push({ type: "delta", text: piece.text, tokens: [token], ...(first ? { promptLogprobs: sequence.promptTokenLogprobs } : {}) });
  }

}

