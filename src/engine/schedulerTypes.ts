/** How the scheduler is set up, what it needs of the runner, and what it reports. */
import type { RunnerInfo, ForwardResult, ForwardRequest } from "../runner/runnerProtocol.ts";
import type { BlockRunner } from "../kv/kvBlockTable.ts";
import type { ChunkCache } from "../kv/chunkCache.ts";
import type { RecomputePolicy, ProphetQueryRows, ProphetScores } from "../kv/recomputeSelection.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import type { PrefixCacheEvents } from "../kv/prefixBlockCache.ts";
import type { SparseDecodeRunner } from "../kv/sparseDecode.ts";
import type { SparseAnchorOptions } from "../kv/sparseAnchor.ts";
import type { UncertaintyTriggerOptions } from "../kv/uncertaintyTrigger.ts";
import type { GenerationRequest } from "./generationTypes.ts";
import type { ReuseAuditSettings } from "./reuseAudit.ts";

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

/** Requests that may wait for admission at once (SchedulerOptions.maxWaiting). */
export const DEFAULT_MAX_WAITING = 256;

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
  /** With --reuse-target-agreement: the ratio a request that names none gets now, by policy (undefined: recomputeRatio). */
  recomputeRatioFor?: (policy: RecomputePolicy) => number | undefined;
  /** Cache-Craft focused-chunk early stop window in layers (0: off; default 0). */
  focusWindow?: number;
  /** What Cache-Craft's scores and the variant choice use (default "shift"). */
  contextScores?: ContextScores;
  /** ProphetKV span decay (default DEFAULT_PROPHET_SPAN_DECAY). */
  prophetSpanDecay?: number;
  /** ProphetKV's scoring rows (default "all"). */
  prophetQueryRows?: ProphetQueryRows;
  /** What ranks ProphetKV's tokens (default DEFAULT_PROPHET_SCORES). */
  prophetScores?: ProphetScores;
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
  /** What sparse decode ranks pages against (default: sparseAnchor.ts's DEFAULT_SPARSE_ANCHOR_OPTIONS). */
  sparseAnchor?: SparseAnchorOptions;
  /** Told each request's latencies as they happen (Prometheus histograms). */
  latency?: LatencyObserver;
  /** Told each request that finished (not failed or cancelled) with its ids: prompt, then generated. */
  finished?: (request: GenerationRequest, tokens: readonly number[]) => void;
  /** Requests (each choice counts) that may wait for admission; beyond, submit throws QueueFullError (default DEFAULT_MAX_WAITING). */
  maxWaiting?: number;
  /** Every request's deadline in ms after submission (default none); a request's own deadlineMs may only be shorter. */
  requestTimeoutMs?: number | null;
  /** Share of wall time background work (backgroundWork.ts) may keep the runner busy, 0..1 (default DEFAULT_BACKGROUND_BUDGET; 0: none runs). */
  backgroundBudget?: number;
  /**
   * When a stored variant's context shift is measured (with "shift" scores): "idle" (default), by
   * a background job in the engine's idle time; "sync", in the store-back of the request that
   * stored it, between its first and second token (what benchmarks that need every shift at once use).
   */
  reuseScoring?: ReuseScoringMode;
  /** The live quality audit (reuseAudit.ts; default rate 0: off). */
  reuseAudit?: ReuseAuditSettings;
}

/** When stored variants get their measured shift (SchedulerOptions.reuseScoring). */
export type ReuseScoringMode = "idle" | "sync";
export const REUSE_SCORING_MODES: readonly ReuseScoringMode[] = ["idle", "sync"];

/** A request's prompt tokens by where their KV came from, when its first token was generated. */
export interface PromptReuse {
  /** Reused from the prefix cache or a chunk cache. */
  cachedTokens: number;
  /** Run through the model (recomputed ones included). */
  computedTokens: number;
}

/** Request latencies in seconds, as vLLM's histograms name them. */
export interface LatencyObserver {
  /** Submission to first admission. */
  queued(seconds: number): void;
  /** Submission to the first generated token, and how many of the prompt's tokens came from a KV cache (prefix or chunk) and how many were computed. */
  firstToken(seconds: number, prompt: PromptReuse): void;
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
  /** FORWARD calls whose logits came back as greedy rows (argmax only: ForwardRequest.greedyRows). */
  greedyRowSteps: number;
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
  /**
   * The sliding-window group's pool (a model with sliding-window layers; 0 otherwise): blocks in
   * use (by sequences and window checkpoints), its size, and the checkpoints' blocks.
   */
  kvSlidingBlocksUsed: number;
  kvSlidingBlocksTotal: number;
  kvSlidingBlocksCheckpointed: number;
  /** Blocks the prefix cache holds (part of kvBlocksUsed), and of those the ones running sequences use. */
  kvBlocksPrefixCached: number;
  kvBlocksPrefixReferenced: number;
  /** Prefix-cache lookups: block hashes queried and hit, blocks evicted. */
  prefixBlocksQueried: number;
  prefixBlocksHit: number;
  prefixBlocksEvicted: number;
}
