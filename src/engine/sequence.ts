import { KvBlockTable } from "../kv/kvBlockTable.ts";
import type { ManagedPrefillUsage } from "../kv/managedPrefill.ts";
import type { SparseDecode } from "../kv/sparseDecode.ts";
import { EventQueue } from "./eventQueue.ts";
import type { CtxrUsage, GeneratedToken, GenerationEvent, GenerationRequest } from "./generationTypes.ts";
import type { OutputConstraint } from "./outputConstraint.ts";
import { ReasoningGatedConstraint } from "./reasoning/reasoningGatedConstraint.ts";
import { ReasoningTracker } from "./reasoning/reasoningTracker.ts";
import { LogitsAdjuster, adjustsLogits } from "./logitsAdjuster.ts";
import { Sampler } from "./sampler.ts";
import { StopMatcher } from "./stopMatcher.ts";
import { TokenTextStream, type StreamDecoder } from "./textStream.ts";

/**
 * One request's state from submission to its end: its tokens, block table, sampler, text stream,
 * stop matching, timings and usage. The scheduler moves it between its queues.
 */
export class Sequence {
  /** Prompt and generated ids; the last one is not yet in the cache while decoding. */
  readonly tokens: number[];
  readonly promptLength: number;
  readonly table: KvBlockTable;
  readonly sampler: Sampler;
  readonly text: TokenTextStream;
  readonly stop: StopMatcher;
  readonly stopIds: ReadonlySet<number>;
  readonly adjuster: LogitsAdjuster | null;
  /** The request's constraint; with reasoning, gated to apply after it. */
  readonly constraint: OutputConstraint | null;
  /** Where the answer's tokens stand, reasoning or content (null: the request does not reason). */
  readonly reasoning: ReasoningTracker | null;
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
  usage: (ManagedPrefillUsage & { recompute_ratio?: number }) | null = null;
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
    this.reasoning = request.reasoning !== undefined ? new ReasoningTracker(request.reasoning.start, request.reasoning.vocabulary) : null;
    const constraint = request.constraint ?? null;
    this.constraint = constraint !== null && this.reasoning !== null ? new ReasoningGatedConstraint(constraint, this.reasoning, this.stopIds) : constraint;
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

  /** Disarms the deadline (the sequence ended). */
  stopDeadline(): void {
    if (this.deadlineTimer !== null) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = null;
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
