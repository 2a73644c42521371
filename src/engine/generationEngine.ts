/**
 * The built-in generation engine of `ctxr serve --model DIR`: the model folder's
 * tokenizer, the native runner process and the continuous-batching scheduler,
 * wired together. Restarts the runner after a crash (the scheduler fails the
 * requests it was running). Prometheus metrics of the scheduler.
 */
import type { EngineTokenAccount } from "../accounting/tokenAccounts.ts";
import { singleMetric } from "../http/prometheus.ts";
import type { RedisTlsSettings } from "../state/redisDiagnosis.ts";
import type { GenerationHandle } from "./generationHandle.ts";
import { GenerationScheduler } from "./generationScheduler.ts";
import type { GenerationRequest } from "./generationTypes.ts";
import { DEFAULT_KV_POLICY, DEFAULT_RECOMPUTE_RATIO, type LatencyObserver, type ReuseScoringMode, type SchedulerStats } from "./schedulerTypes.ts";
import { describeKvSettings, describeKvTuning, type KvSettings } from "./kvSettings.ts";
import { ReuseTarget, type ReuseTargetSettings } from "./reuseTarget.ts";
import { GrammarCompiler } from "./grammarCompiler.ts";
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from "./grammar/grammarBudget.ts";
import { completionIds, completionsAddBos } from "../model/completionPrompt.ts";
import type { ToolCallFormat } from "./toolCalls/toolCallFormat.ts";
import { resolveReasoningParser, type ReasoningParserChoice, type ReasoningParserName } from "./reasoning/reasoningParser.ts";
import { reasoningVocabulary, type ReasoningVocabulary } from "./reasoning/reasoningTracker.ts";
import { loadModelTokenizer, type ChatTemplateMessage, type ChatTemplateOptions, type ModelTokenizer } from "../model/modelTokenizer.ts";
import { findRunner } from "../runner/runnerExecutable.ts";
import { RunnerProcess, type KvDtypeChoice } from "../runner/runnerProcess.ts";
import type { RunnerInfo } from "../runner/runnerProtocol.ts";
import { ChunkCache } from "../kv/chunkCache.ts";
import { DiskKvTier } from "../kv/diskKvTier.ts";
import { DEFAULT_REMOTE_KV_BYTES, RemoteKvTier, remoteNamespace } from "../kv/remoteKvTier.ts";
import type { RedisUrl } from "../state/redisUrl.ts";
import { ggufModelIdentity, modelIdentity } from "../kv/modelIdentity.ts";
import { ggufModelTensors, readGgufParts } from "../model/gguf/ggufSplit.ts";
import { ggufModelConfig } from "../model/gguf/ggufModelConfig.ts";
import { ggufModelTokenizer } from "../model/gguf/ggufTokenizer.ts";
import { resolveModelSource, type ModelSource } from "../model/modelSource.ts";
import { OffThreadTokenizer } from "../model/tokenizerThread/offThreadTokenizer.ts";
import { TokenizerThread } from "../model/tokenizerThread/tokenizerThread.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import { preparePrompt, type PreparedPrompt, type PromptRequest, type PromptTokenizing } from "./promptPreparation.ts";
import type { SparseAnchorOptions } from "../kv/sparseAnchor.ts";
import type { UncertaintyTriggerOptions } from "../kv/uncertaintyTrigger.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import { DEFAULT_PROPHET_SCORES, DEFAULT_PROPHET_SPAN_DECAY, type ProphetQueryRows, type ProphetScores } from "../kv/recomputeSelection.ts";
import type { PrefixCacheEvents } from "../kv/prefixBlockCache.ts";
import { GeneratedTokenMemory } from "./generatedTokenMemory.ts";
import { RememberedChatTurns } from "./rememberedChatPrompt.ts";
import { backgroundWorkMetrics } from "./backgroundWorkMetrics.ts";
import { ReuseAuditMetrics } from "./reuseAuditMetrics.ts";

export interface EngineOptions {
  /** The model folder (config.json, *.safetensors, tokenizer.json, tokenizer_config.json), a .gguf file, or a folder holding one .gguf file. */
  model: string;
  /** "cpu" (default), "cuda" or "cuda:N". */
  device?: string;
  /** KV-cache blocks (default: the runner's, 8,192 tokens' worth). */
  kvBlocks?: number;
  /**
   * A model with sliding-window layers: the sliding-window group's blocks (default: as many as
   * kvBlocks), and 1 to keep every layer's KV for every position in one group (a baseline).
   */
  kvSlidingBlocks?: number;
  kvGroups?: 1 | 2;
  /** Tokens per KV block (default: the runner's, 16). */
  blockSize?: number;
  /** CPU threads of the runner (default: the runner's). */
  threads?: number;
  /** The runner's KV cache element type (default auto: f16 for a GGUF file on the CPU, else f32). */
  kvDtype?: KvDtypeChoice;
  /** The model id in the API (default: the folder's name, or the GGUF file's name without .gguf). */
  servedModelName?: string;
  /** The runner executable (default: found by runnerExecutable.ts). */
  runner?: string;
  /** Most prompt tokens per step (default 512). */
  prefillChunk?: number;
  /** Most sequences running together (default 64). */
  maxBatch?: number;
  /** Most requests waiting for admission (--max-waiting-requests; default DEFAULT_MAX_WAITING); beyond, QueueFullError. */
  maxWaitingRequests?: number;
  /** Every request's deadline in ms (--request-timeout; default none): past it the request is cancelled. */
  requestTimeoutMs?: number | null;
  /** Structured outputs' budget (grammarBudget.ts; defaults DEFAULT_GRAMMAR_LIMITS): --max-grammar-step-ms and the like. */
  grammarLimits?: Partial<GrammarLimits>;
  /** Runner stderr and engine events (default: dropped). */
  log?: (line: string) => void;
  /** KV-managed generation: default recompute policy and ratio (prophet, 0.2). */
  kvPolicy?: RecomputePolicy;
  recomputeRatio?: number;
  /** Chunk-cache tiers: device blocks (default a quarter of the cache), host bytes (1 GiB), disk folder and bytes (none; 16 GiB). */
  kvDeviceBlocks?: number;
  kvHostBytes?: number;
  kvDir?: string | null;
  kvDiskBytes?: number;
  /** The remote tier shared by instances (--kv-remote, parsed by parseRedisUrl), or none; its byte limit (default 4 GiB). */
  kvRemote?: RedisUrl | null;
  kvRemoteBytes?: number;
  /** --kv-remote-secret: authenticate remote entries with HMAC-SHA256 under it. */
  kvRemoteSecret?: Uint8Array | null;
  /** --redis-ca: TLS settings for a rediss:// --kv-remote. */
  redisTls?: RedisTlsSettings;
  /** Cache-Craft focused-chunk early stop window in layers (0: off). */
  focusWindow?: number;
  /** What Cache-Craft's scores and the variant choice use (default "shift"). */
  contextScores?: ContextScores;
  /** ProphetKV span decay (default DEFAULT_PROPHET_SPAN_DECAY). */
  prophetSpanDecay?: number;
  /** ProphetKV's scoring rows (default "all"). */
  prophetQueryRows?: ProphetQueryRows;
  /** What ranks ProphetKV's tokens (default DEFAULT_PROPHET_SCORES). */
  prophetScores?: ProphetScores;
  /** Automatic prefix caching of plain prompts (default true). */
  prefixCache?: boolean;
  /** Share of wall time background work (stored variants' shift measurement) may keep the runner busy (--reuse-scoring-budget; default 0.2; 0: none). */
  reuseScoringBudget?: number;
  /** --reuse-target-agreement with --min-ratio and --max-ratio (null: the ratio stays --recompute-ratio). */
  reuseTarget?: ReuseTargetSettings | null;
  /** When stored variants' shift is measured: in the idle time (default) or on the request path (--reuse-scoring sync). */
  reuseScoring?: ReuseScoringMode;
  /** The live quality audit (docs/reuse-audit.md): share of requests served with reused chunks compared with full prefill (--reuse-audit-rate; default 0: off). */
  reuseAuditRate?: number;
  /** Greedy tokens the audit compares (--reuse-audit-tokens; default 8). */
  reuseAuditTokens?: number;
  /** A cell's recent agreement below which the audit logs a warning (--reuse-audit-warn-below; default 0.9). */
  reuseAuditWarnBelow?: number;
  /** Told every block the prefix cache stores and evicts, and when it is dropped (KV events out). */
  prefixEvents?: PrefixCacheEvents;
  /** Told each request's queue time, time to first token, inter-token gaps and end-to-end time. */
  latency?: LatencyObserver;
  /** How the model writes tool calls (--tool-call-parser; default: detected from the chat template). */
  toolCallParser?: ToolCallFormat;
  /** How the model writes its reasoning (--reasoning-parser; default auto: detected from the chat template; none: reasoning stays in the content). */
  reasoningParser?: ReasoningParserChoice;
  /** Sparse decode's reconstruction trigger (default: uncertaintyTrigger.ts's placeholders; calibrate with `ctxr model calibrate-sparse`). */
  sparseTrigger?: UncertaintyTriggerOptions;
  /** What sparse decode ranks pages against (--sparse-anchor, --sparse-anchor-tokens). */
  sparseAnchor?: SparseAnchorOptions;
}

/** The runner settings besides the model that change a chunk's K/V (the remote tier's namespace). */
export function remoteKvSettings(info: Pick<RunnerInfo, "kv_dtype" | "weight_dtype" | "device">): string {
  return `kv=${info.kv_dtype}|weights=${info.weight_dtype}|device=${info.device}`;
}

/**
 * What prefix-cache block hashes are seeded with: the model's identity and every runner setting
 * that changes a block's KV, so no block is ever found by another model or KV layout.
 */
export function prefixSeed(identity: string, info: Pick<RunnerInfo, "kv_dtype" | "block_size" | "device">): string {
  return `${identity}|kv=${info.kv_dtype}|block=${info.block_size}|device=${info.device}`;
}

/** A model's tokenizer, whether plain completions start with BOS, and its prefix-cache identity. */
interface LoadedModel {
  tokenizer: ModelTokenizer;
  addBos: boolean;
  identity: () => Promise<string>;
}

/**
 * The tokenizer side of a model source. A GGUF file's header is read (never its tensor data)
 * and checked before the runner starts: a damaged file or an architecture we do not run fails
 * here with the reader's or the config's error naming the key or tensor.
 */
async function loadModel(source: ModelSource): Promise<LoadedModel> {
  if (source.kind === "folder") {
    const tokenizer = await loadModelTokenizer(source.path);
    return { tokenizer, addBos: await completionsAddBos(source.path, tokenizer), identity: () => modelIdentity(source.path) };
  }
  const parts = readGgufParts(source.path);
  const header = parts[0]!.header;
  ggufModelConfig(header.metadata, ggufModelTensors(parts));
  const { tokenizer, addBos } = ggufModelTokenizer(header.metadata, source.path);
  const otherParts = parts.slice(1).map((part) => ({ path: part.path, dataStart: part.header.dataStart }));
  return { tokenizer, addBos, identity: () => ggufModelIdentity(source.path, header.dataStart, otherParts) };
}

export class GenerationEngine {
  /** Unix seconds when the engine started (the model's "created"). */
  readonly created = Math.floor(Date.now() / 1000);
  /** KV-cache managed generation's settings, one line (kvSettings.ts). */
  kvSettings = "";
  /** Their tuning details, one line (kvSettings.ts; shown at --log-level debug). */
  kvTuning = "";
  /** Structured outputs' budget. */
  grammarLimits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS;
  private log: (line: string) => void = () => {};

  private constructor(
    readonly modelId: string,
    readonly modelDir: string,
    readonly tokenizer: ModelTokenizer,
    readonly runner: RunnerProcess,
    readonly scheduler: GenerationScheduler,
    private readonly addBos: boolean,
    readonly device: string,
    readonly chunkCache: ChunkCache,
    /** Prompt ids as promises, long prompts tokenized on the tokenizer thread (the request routes use these). */
    private readonly prompts: OffThreadTokenizer,
    private readonly tokenizerThread: TokenizerThread,
    /** The ids of the chats answered, by their text: a conversation's next turn is prompted with them. */
    private readonly chatTurns: RememberedChatTurns,
  ) {
    this.auditMetrics = new ReuseAuditMetrics(scheduler.reuseAudit);
  }

  /** The live quality audit's histograms (fed by its samples). */
  private readonly auditMetrics: ReuseAuditMetrics;

  static async open(options: EngineOptions): Promise<GenerationEngine> {
    const source = resolveModelSource(options.model);
    const dir = source.path;
    const log = options.log ?? (() => {});
    const device = options.device ?? "cpu";
    const model = await loadModel(source);
    const tokenizer = model.tokenizer;
    const executable = options.runner ?? (await findRunner(device, { log }));
    const runner = await RunnerProcess.start({
      executable,
      model: dir,
      blocks: options.kvBlocks,
      ...(options.kvSlidingBlocks !== undefined ? { slidingBlocks: options.kvSlidingBlocks } : {}),
      ...(options.kvGroups !== undefined ? { kvGroups: options.kvGroups } : {}),
      blockSize: options.blockSize,
      threads: options.threads,
      ...(options.kvDtype !== undefined ? { kvDtype: options.kvDtype } : {}),
      device,
      log: (line) => log(`ctxr-runner: ${line}`),
    });
    const identity = await model.identity();
    const disk = options.kvDir ? new DiskKvTier({ dir: options.kvDir, capacityBytes: options.kvDiskBytes ?? 16 * 2 ** 30, modelIdentity: identity, layers: runner.info.layers, kvWidth: runner.info.kv_heads * runner.info.head_dim, pageSize: runner.info.block_size, log }) : null;
    const remote = options.kvRemote
      ? new RemoteKvTier({
          url: options.kvRemote,
          capacityBytes: options.kvRemoteBytes ?? DEFAULT_REMOTE_KV_BYTES,
          modelIdentity: identity,
          // Authenticated entries live apart: instances with and without a secret never discard each other's.
          namespace: remoteNamespace(identity, remoteKvSettings(runner.info) + (options.kvRemoteSecret ? "|mac=hmac-sha256" : "")),
          secret: options.kvRemoteSecret ?? null,
          tls: options.redisTls,
          layers: runner.info.layers,
          kvWidth: runner.info.kv_heads * runner.info.head_dim,
          pageSize: runner.info.block_size,
          log,
        })
      : null;
    if (remote !== null && !(await remote.start())) log(`ctxr: the remote chunk cache ${remote.display} is not reachable now; serving without it until it is`);
    const chunkCache = new ChunkCache(runner, { deviceBlocks: options.kvDeviceBlocks, hostBytes: options.kvHostBytes, disk, remote, log });
    const tokenizerThread = new TokenizerThread(source, log);
    const prompts = new OffThreadTokenizer(tokenizer, tokenizerThread);
    const chatTurns = new RememberedChatTurns(new GeneratedTokenMemory(), { tokenizer, encode: (text) => prompts.encode(text), exactText: (ids) => prompts.exactText(ids) }, log);
    const modelId = options.servedModelName ?? source.name;
    const reuseTarget = options.reuseTarget ? new ReuseTarget(modelId, options.reuseTarget, options.recomputeRatio ?? DEFAULT_RECOMPUTE_RATIO) : null;
    let scheduler: GenerationScheduler;
    try {
      scheduler = new GenerationScheduler(runner, tokenizer, {
        prefillChunk: options.prefillChunk,
        maxBatch: options.maxBatch,
        maxWaiting: options.maxWaitingRequests,
        requestTimeoutMs: options.requestTimeoutMs ?? null,
        log,
        chunkCache,
        kvPolicy: options.kvPolicy,
        recomputeRatio: options.recomputeRatio,
        ...(reuseTarget === null ? {} : { recomputeRatioFor: (policy: RecomputePolicy) => reuseTarget.ratioFor(policy) }),
        focusWindow: options.focusWindow,
        contextScores: options.contextScores,
        prophetSpanDecay: options.prophetSpanDecay,
        prophetQueryRows: options.prophetQueryRows,
        prophetScores: options.prophetScores,
        prefixCache: options.prefixCache ?? true,
        ...(options.reuseScoringBudget !== undefined ? { backgroundBudget: options.reuseScoringBudget } : {}),
        ...(options.reuseScoring !== undefined ? { reuseScoring: options.reuseScoring } : {}),
        reuseAudit: {
          // A quality target needs samples: its audit rate unless the audit's own was given.
          rate: options.reuseAuditRate ?? options.reuseTarget?.auditRate ?? 0,
          ...(options.reuseAuditTokens !== undefined ? { tokens: options.reuseAuditTokens } : {}),
          ...(options.reuseAuditWarnBelow !== undefined ? { warnBelow: options.reuseAuditWarnBelow } : {}),
          model: options.servedModelName ?? source.name,
        },
        prefixSeed: prefixSeed(identity, runner.info),
        ...(options.prefixEvents !== undefined ? { prefixEvents: options.prefixEvents } : {}),
        ...(options.latency !== undefined ? { latency: options.latency } : {}),
        sparseTrigger: options.sparseTrigger,
        ...(options.sparseAnchor !== undefined ? { sparseAnchor: options.sparseAnchor } : {}),
        finished: (request, tokens) => chatTurns.remember(request, tokens),
      });
    } catch (error) {
      // Settings the runner's model cannot run with (a sliding-window pool too small): no orphan runner.
      await runner.shutdown();
      throw error;
    }
    const restored = await chunkCache.loadFromDisk();
    if (restored > 0) log(`ctxr: ${restored} chunk caches restored from ${options.kvDir}`);
    runner.onCrash((error) => {
      log(`ctxr: ${error.message}`);
      scheduler.runnerCrashed();
    });
    const engine = new GenerationEngine(modelId, dir, tokenizer, runner, scheduler, model.addBos, device, chunkCache, prompts, tokenizerThread, chatTurns);
    engine.grammarLimits = { ...DEFAULT_GRAMMAR_LIMITS, ...options.grammarLimits };
    engine.reuseTarget = reuseTarget;
    if (reuseTarget !== null) scheduler.reuseAudit.onSample((sample) => reuseTarget.observe(sample));
    engine.log = log;
    engine.toolCallFormat = options.toolCallParser ?? null;
    engine.reasoningParser = resolveReasoningParser(options.reasoningParser ?? "auto", tokenizer.chatTemplateSource);
    const capacities = chunkCache.capacities;
    const kvSettings: KvSettings = {
      policy: options.kvPolicy ?? DEFAULT_KV_POLICY,
      recomputeRatio: options.recomputeRatio ?? DEFAULT_RECOMPUTE_RATIO,
      deviceBlocks: capacities.deviceBlocks,
      hostBytes: capacities.hostBytes,
      disk: capacities.disk,
      remote: capacities.remote,
      focusWindow: options.focusWindow ?? 0,
      contextScores: options.contextScores ?? "shift",
      prophetSpanDecay: options.prophetSpanDecay ?? DEFAULT_PROPHET_SPAN_DECAY,
      prophetQueryRows: options.prophetQueryRows ?? "all",
      prophetScores: options.prophetScores ?? DEFAULT_PROPHET_SCORES,
      trigger: options.sparseTrigger ?? {},
      reuseTarget: options.reuseTarget ?? null,
      ...(options.sparseAnchor !== undefined ? { sparseAnchor: options.sparseAnchor } : {}),
    };
    engine.kvSettings = describeKvSettings(kvSettings);
    engine.kvTuning = describeKvTuning(kvSettings);
    return engine;
  }

  private grammarCompiler: GrammarCompiler | null = null;
  /** --reuse-target-agreement: the recompute ratio per policy, fed by the audit's samples (null: off). */
  reuseTarget: ReuseTarget | null = null;
  /** The server's --tool-call-parser (null: detect from the chat template). */
  toolCallFormat: ToolCallFormat | null = null;
  /** The server's --reasoning-parser (null: answers are not split into reasoning and content). */
  reasoningParser: ReasoningParserName | null = null;
  private reasoningTokens: ReasoningVocabulary | null = null;

  /** The vocabulary as the reasoning tracker reads it (built on first use). */
  get reasoningVocabulary(): ReasoningVocabulary {
    this.reasoningTokens ??= reasoningVocabulary(this.tokenizer);
    return this.reasoningTokens;
  }

  /** Structured outputs' grammar compiler for this model (xgrammar loads on first use). */
  get grammar(): GrammarCompiler {
    this.grammarCompiler ??= new GrammarCompiler(this.tokenizer, this.runner.info.vocab, this.tokenizer.eosTokenIds, this.grammarLimits, (line) => this.log(line));
    return this.grammarCompiler;
  }

  get info(): RunnerInfo {
    return this.runner.info;
  }

  /** Longest prompt + completion, in tokens. */
  get maxModelLen(): number {
    return this.scheduler.maxModelLen;
  }

  /** A plain-text completion prompt's ids (with BOS when the tokenizer adds one). */
  completionPromptIds(text: string): number[] {
    return completionIds(this.tokenizer, this.addBos, text);
  }

  /** A chat's prompt ids through the chat template (which writes its own BOS). */
  chatPromptIds(messages: readonly ChatTemplateMessage[], options?: ChatTemplateOptions): number[] {
    return this.tokenizer.encode(this.tokenizer.applyChatTemplate(messages, options));
  }

  /** completionPromptIds without holding up the request thread: a long prompt is tokenized on the tokenizer thread. */
  tokenizeCompletionPrompt(text: string): Promise<number[]> {
    return this.prompts.encode(text, this.addBos ? this.tokenizer.bosTokenId : null);
  }

  /** tokenizer.encode (no BOS added) without holding up the request thread. */
  tokenizeText(text: string): Promise<number[]> {
    return this.prompts.encode(text);
  }

  /** chatPromptIds without holding up the request thread; `addBos` adds BOS as completions do (/tokenize's add_special_tokens). */
  tokenizeChatPrompt(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions = {}, addBos = false): Promise<number[]> {
    return this.prompts.encodeChat(messages, options, addBos && this.addBos ? this.tokenizer.bosTokenId : null);
  }

  /** A request's prompt ids (and segments, with documents or segments) in one trip; long pieces are tokenized on the tokenizer thread. */
  prepare(request: PromptRequest): Promise<PreparedPrompt> {
    this.promptTokenizing ??= {
      tokenizer: this.tokenizer,
      completionBos: this.addBos ? this.tokenizer.bosTokenId : null,
      encode: (text, bos) => this.prompts.encode(text, bos ?? null),
      encodeChat: (messages, options, cacheSalt) => this.rememberedChatPromptIds(messages, options, cacheSalt),
    };
    return preparePrompt(this.promptTokenizing, request);
  }

  private promptTokenizing: PromptTokenizing | null = null;

  /** A chat's prompt ids, starting with the ids of an earlier turn and its answer where the chat resends them (rememberedChatPrompt.ts). */
  private async rememberedChatPromptIds(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions, cacheSalt?: string): Promise<number[]> {
    if (this.chatTurns.empty) return this.prompts.encodeChat(messages, options);
    return this.chatTurns.promptIds(await this.prompts.renderChat(messages, options), cacheSalt);
  }

  /** Queues a request (see GenerationScheduler.submit); eos ids are added to stopTokenIds unless ignoreEos. */
  generate(request: GenerationRequest & { ignoreEos?: boolean }): GenerationHandle {
    const stopTokenIds = request.ignoreEos ? (request.stopTokenIds ?? []) : [...this.tokenizer.eosTokenIds, ...(request.stopTokenIds ?? [])];
    return this.scheduler.submit({ ...request, stopTokenIds });
  }

  get stats(): SchedulerStats {
    return this.scheduler.stats;
  }

  /** Each finished request's prompt usage: tokens, cached, recomputed (read by the saved-tokens report). */
  get tokenAccount(): EngineTokenAccount {
    return this.scheduler.tokenAccount;
  }

  /** Prometheus text of the scheduler's counters and gauges. */
  metrics(): string {
    const stats = this.stats;
    let out = "";
    const metric = (name: string, type: "counter" | "gauge", help: string, value: number) => {
      out += singleMetric(name, type, help, value);
    };
    metric("ctxr_generation_forwards_total", "counter", "FORWARD calls to the model runner.", stats.forwards);
    metric("ctxr_generation_decode_steps_total", "counter", "Steps that decoded at least one sequence.", stats.decodeSteps);
    metric("ctxr_generation_batched_decode_steps_total", "counter", "Steps that decoded two or more sequences together.", stats.batchedDecodeSteps);
    metric("ctxr_generation_greedy_row_steps_total", "counter", "Steps whose logits came back as the argmax token only (greedy, no logprobs, penalties or grammar).", stats.greedyRowSteps);
    metric("ctxr_generation_decode_tokens_total", "counter", "Tokens decoded (sequences per step, summed).", stats.decodeTokens);
    metric("ctxr_generation_max_decode_batch", "gauge", "The most sequences decoded in one step so far.", stats.maxDecodeBatch);
    metric("ctxr_generation_prefill_tokens_total", "counter", "Prompt tokens run (recomputed ones included).", stats.prefillTokens);
    metric("ctxr_generation_requests_finished_total", "counter", "Generation requests completed.", stats.finished);
    metric("ctxr_generation_requests_failed_total", "counter", "Generation requests failed (runner crash, shutdown).", stats.failed);
    metric("ctxr_generation_requests_cancelled_total", "counter", "Generation requests cancelled (client gone).", stats.cancelled);
    metric("ctxr_generation_requests_timed_out_total", "counter", "Generation requests cancelled at their deadline (ctxr.deadline_ms, --request-timeout).", stats.timedOut);
    metric("ctxr_generation_requests_rejected_total", "counter", "Generation requests refused with 429 because --max-waiting-requests were waiting.", stats.rejected);
    metric("ctxr_generation_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.", stats.preemptions);
    metric("ctxr_generation_runner_restarts_total", "counter", "Model runner restarts.", stats.runnerRestarts);
    metric("ctxr_generation_running", "gauge", "Sequences in the running batch.", stats.running);
    metric("ctxr_generation_waiting", "gauge", "Requests waiting for admission.", stats.waiting);
    metric("ctxr_generation_max_waiting", "gauge", "Requests that may wait for admission (--max-waiting-requests).", stats.maxWaiting);
    metric("ctxr_generation_kv_blocks_used", "gauge", "KV-cache blocks allocated.", stats.kvBlocksUsed);
    metric("ctxr_generation_kv_blocks_total", "gauge", "KV-cache blocks.", stats.kvBlocksTotal);
    if (stats.kvSlidingBlocksTotal > 0) {
      metric("ctxr_generation_kv_sliding_blocks_used", "gauge", "Blocks of the sliding-window layers' KV group in use (windows and window checkpoints).", stats.kvSlidingBlocksUsed);
      metric("ctxr_generation_kv_sliding_blocks_total", "gauge", "Blocks of the sliding-window layers' KV group.", stats.kvSlidingBlocksTotal);
    }
    metric("ctxr_prefix_cache_blocks", "gauge", "KV blocks the automatic prefix cache holds (part of kv_blocks_used).", stats.kvBlocksPrefixCached);
    metric("ctxr_prefix_cache_referenced_blocks", "gauge", "Prefix-cache blocks running sequences use.", stats.kvBlocksPrefixReferenced);
    metric("ctxr_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache (full blocks; a request waiting for room is looked up again: per-request figures are ctxr_engine_*_tokens_total).", stats.prefixBlocksQueried * stats.blockSize);
    metric("ctxr_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.", stats.prefixBlocksHit * stats.blockSize);
    metric("ctxr_prefix_cache_evicted_blocks_total", "counter", "Prefix-cache blocks evicted for room.", stats.prefixBlocksEvicted);
    const cache = this.chunkCache.stats;
    metric("ctxr_kv_chunk_variants", "gauge", "Chunk-cache variants held (all tiers).", cache.variants);
    metric("ctxr_kv_device_variants", "gauge", "Chunk-cache variants in the runner's KV blocks.", cache.deviceVariants);
    metric("ctxr_kv_device_blocks", "gauge", "KV blocks the chunk cache holds in the runner (part of kv_blocks_used).", cache.deviceBlocks);
    metric("ctxr_kv_host_variants", "gauge", "Chunk-cache variants in host memory.", cache.hostVariants);
    metric("ctxr_kv_disk_variants", "gauge", "Chunk-cache variants on disk (--kv-dir).", cache.diskVariants);
    for (const tier of ["device", "host", "disk"] as const) metric(`ctxr_kv_${tier}_hits_total`, "counter", `Chunk-cache hits served from the ${tier} tier.`, cache.hits[tier]);
    const remote = cache.remote;
    if (remote !== null) {
      metric("ctxr_kv_remote_hits_total", "counter", "Chunk-cache hits served from the remote tier (--kv-remote).", cache.hits.remote);
      metric("ctxr_kv_remote_up", "gauge", "1 while the remote tier's Redis answers, 0 while it is skipped.", remote.up ? 1 : 0);
      metric("ctxr_kv_remote_lookups_total", "counter", "Chunks looked up in the remote tier.", remote.lookups);
      metric("ctxr_kv_remote_fetched_total", "counter", "Variants fetched from the remote tier and kept here.", cache.remoteFetched);
      metric("ctxr_kv_remote_writes_total", "counter", "Variants written through to the remote tier.", remote.writes);
      metric("ctxr_kv_remote_evicted_total", "counter", "Remote variants evicted by this instance's writes to keep --kv-remote-bytes.", remote.evicted);
      metric("ctxr_kv_remote_discarded_total", "counter", "Damaged or foreign remote entries deleted.", remote.discarded);
      metric("ctxr_kv_remote_unauthenticated_total", "counter", "Remote entries deleted because their MAC was missing or wrong (--kv-remote-secret).", remote.unauthenticated);
      metric("ctxr_kv_remote_failures_total", "counter", "Remote-tier operations that failed (unreachable, timed out, error reply).", remote.failures);
      metric("ctxr_kv_remote_skipped_total", "counter", "Remote-tier operations skipped while its Redis was unreachable.", remote.skipped);
      metric("ctxr_kv_remote_bytes", "gauge", "Bytes the remote tier holds for this model, as the last write saw them.", remote.bytes);
    }
    out += backgroundWorkMetrics(this.scheduler.background.stats, this.scheduler.reuseScoring.stats);
    out += this.auditMetrics.render(this.scheduler.reuseAudit.stats, this.scheduler.background.stats);
    if (this.reuseTarget !== null) out += this.reuseTarget.metrics();
    metric("ctxr_kv_stored_total", "counter", "Chunk-cache variants stored.", cache.stored);
    metric("ctxr_kv_evicted_total", "counter", "Chunk-cache variants dropped.", cache.evicted);
    metric("ctxr_kv_discarded_total", "counter", "Damaged or foreign cache files discarded.", cache.discarded);
    return out;
  }

  /** Fails queued requests and shuts the runner down. */
  async close(): Promise<void> {
    await this.scheduler.close();
    this.grammarCompiler?.close();
    this.tokenizerThread?.close();
    await this.chunkCache.closeRemote();
    await this.runner.shutdown();
  }
}
