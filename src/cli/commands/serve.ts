/**
 * `ctxr serve`: the online context-reuse service over HTTP (src/server/),
 * with its state journaled in a data directory unless --in-memory.
 */
import { readFileSync } from "node:fs";
import { DEFAULT_UPSTREAM_TIMEOUT_MS } from "../../proxy/contextProxy.ts";
import { ENGINES, type Engine } from "../../proxy/engineRequestId.ts";
import { parseKvEventsSubscribe, type KvEventsSubscribeOptions } from "../../proxy/kvEventSubscriber.ts";
import { DEFAULT_HANDSHAKE_TIMEOUT_MS } from "../../zmq/zmqSockets.ts";
import { parseUpstreamUrl } from "../../proxy/upstreamTarget.ts";
import { DEFAULT_PROBE_INTERVAL_MS } from "../../proxy/upstreamMonitor.ts";
import { parseKvEventsPublish, type KvEventsPublishOptions } from "../../server/kvEventPublisher.ts";
import { DEFAULT_LIMITS } from "../../http/limits.ts";
import { MAX_DEADLINE_MS } from "../../server/openaiSchemas.ts";
import { DEFAULT_HOST, DEFAULT_PORT, LOG_LEVELS, runServer, type LogLevel, type SharedStateConfig } from "../../server/serve.ts";
import { DEFAULT_STATS_INTERVAL_MS } from "../../server/statsLog.ts";
import { DEFAULT_STATUS_SAMPLE_EVERY_MS } from "../../server/statusPage/statusHistory.ts";
import { DEFAULT_PROPHET_SCORES, DEFAULT_PROPHET_SPAN_DECAY, PROPHET_QUERY_ROWS, PROPHET_SCORES, RECOMPUTE_POLICIES, type ProphetQueryRows, type ProphetScores, type RecomputePolicy } from "../../kv/recomputeSelection.ts";
import { CONTEXT_SCORES, type ContextScores } from "../../kv/reuseScores.ts";
import { SHARED_READS } from "../../state/sharedState.ts";
import { parseRedisUrl, type RedisUrl } from "../../state/redisUrl.ts";
import type { RedisTlsSettings } from "../../state/redisDiagnosis.ts";
import { remoteSecretBytes } from "../../kv/remoteEntryMac.ts";
import { EXIT_OK, UsageError, byteSizeFlag, choiceFlag, integerFlag, numberFlag } from "../args.ts";
import type { FlagSpec, ParsedFlags } from "../args.ts";
import {
  MAX_TRIGGER_WINDOW,
  type UncertaintyTriggerOptions,
} from "../../kv/uncertaintyTrigger.ts";
import { DEFAULT_ANCHOR_TOKENS, DEFAULT_SPARSE_ANCHOR, MAX_ANCHOR_TOKENS, SPARSE_ANCHORS, type SparseAnchorKind, type SparseAnchorOptions, usesNewestKeys } from "../../kv/sparseAnchor.ts";
import { DEFAULT_REFINE_FACTOR, DEFAULT_REFINE_LOOKBACK, MAX_REFINE_FACTOR, MAX_REFINE_LOOKBACK, type TokenRefinementOptions } from "../../kv/sparseTokenRefinement.ts";
import type { CommandIo } from "./types.ts";
import { isHubReference } from "../../model/hub/hubReference.ts";
import { loadHubModel } from "../hubModelLoader.ts";
import type { FlagAliases, SourcedFlags } from "../flagSources.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { TOOL_CALL_FORMATS, type ToolCallFormat } from "../../engine/toolCalls/toolCallFormat.ts";
import { REASONING_PARSER_CHOICES, type ReasoningParserChoice } from "../../engine/reasoning/reasoningParser.ts";
import { EnginePromptTokenizer } from "../../proxy/enginePromptTokens.ts";
import { DEFAULT_OVERLAP_WEIGHT, ROUTING_MODES, type RoutingMode } from "../../proxy/upstreamPool.ts";
import { KV_DTYPES, type KvDtypeChoice } from "../../runner/runnerProcess.ts";
import { DEFAULT_BACKGROUND_BUDGET } from "../../engine/backgroundWork.ts";
import { DEFAULT_AUDIT_TOKENS, DEFAULT_AUDIT_WARN_BELOW, MAX_AUDIT_TOKENS } from "../../engine/reuseAudit.ts";
import { REUSE_SCORING_MODES, type ReuseScoringMode } from "../../engine/schedulerTypes.ts";

import { DEFAULT_DATA_DIR, SERVE_HELP } from "./serveHelp.ts";
import { REUSE_TARGET_FLAGS, reuseTargetFromFlags } from "./reuseTargetFlags.ts";

export { DEFAULT_DATA_DIR };


const COMMAND = "serve";


/** A state budget: a byte size, 0 for unlimited (null), undefined when absent (the default applies). */
function budgetFlag(flags: ParsedFlags, name: string): number | null | undefined {
  const bytes = byteSizeFlag(flags, name, COMMAND, 0);
  return bytes === 0 ? null : bytes;
}

/** Flags that take a value (each parsed and checked where it is used). */
const VALUE_FLAGS = [
  "host", "port", "data-dir", "state", "state-prefix", "state-snapshot-every", "state-reads",
  "state-queue-bytes", "redis-ca", "api-key", "capacity-tokens", "ttl-seconds", "document-tokens",
  "max-body-bytes", "max-contexts", "max-documents", "config", "stats-interval", "status-sample-interval", "max-index-bytes", "max-dedup-bytes",
  "max-history-bytes", "max-response-bytes", "max-routing-bytes", "max-annotation-bytes",
  "max-template-placeholders", "max-upstream-requests", "client-stall-seconds", "upstream-key",
  "engine", "probe-interval", "upstream-timeout", "document-template", "kv-events-max-bytes", "tokenizer", "routing",
  "kv-overlap-weight", "model", "device", "kv-blocks", "kv-sliding-blocks", "block-size", "threads", "kv-dtype",
  "served-model-name", "max-waiting-requests", "request-timeout", "max-grammar-step-ms",
  "max-grammar-compile-ms", "max-grammar-tools", "kv-policy", "recompute-ratio",
  "kv-device-blocks", "kv-host-bytes", "kv-dir", "kv-disk-bytes", "kv-remote", "kv-remote-bytes",
  "kv-remote-secret", "kv-remote-secret-file", "focus-window", "context-scores",
  "prophet-span-decay", "prophet-query-rows", "prophet-scores", "tool-call-parser", "reasoning-parser", "kv-events-publish",
  "kv-events-max-connections", "kv-events-handshake-timeout", "sparse-entropy-threshold",
  "sparse-varentropy-threshold", "sparse-trigger-window", "log-level", "reuse-scoring-budget", "reuse-scoring",
  "reuse-audit-rate", "reuse-audit-tokens", "reuse-audit-warn-below",
  ...REUSE_TARGET_FLAGS,
  "sparse-anchor", "sparse-anchor-tokens", "sparse-refine", "sparse-refine-lookback",
] as const;

/** Old option names, still accepted (with a note): "block" alone now means only a KV block. */
const ALIASES: FlagAliases = { "block-tokens": "document-tokens", "max-blocks": "max-documents" };

const FLAGS = {
  ...Object.fromEntries(VALUE_FLAGS.map((name) => [name, { type: "string" as const }])),
  "in-memory": { type: "boolean" },
  // Repeatable: parseArgs collects every --upstream (FlagSpec has no "multiple", so the spec is not annotated).
  upstream: { type: "string", multiple: true },
  // Repeatable, like --upstream: one per upstream, in order.
  "kv-events": { type: "string", multiple: true },
  "no-prefix-cache": { type: "boolean" },
  offline: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} satisfies Record<string, FlagSpec[string] & { multiple?: boolean }>;

/** A positive finite number, or undefined when the flag is absent. */
function positiveNumberFlag(flags: ParsedFlags, name: string, unit: string): number | undefined {
  const raw = flags.values[name];
  if (typeof raw !== "string") return undefined;
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!(Number.isFinite(value) && value > 0)) throw new UsageError(`--${name} must be a positive number (${unit}), got '${raw}'`, COMMAND);
  return value;
}

/** Sparse decode's trigger from --sparse-*; the fields not given keep uncertaintyTrigger.ts's defaults. */
function sparseTriggerFromFlags(flags: ParsedFlags): UncertaintyTriggerOptions {
  const window = integerFlag(flags, "sparse-trigger-window", COMMAND, 1);
  if (window !== undefined && window > MAX_TRIGGER_WINDOW) {
    throw new UsageError(`--sparse-trigger-window must be at most ${MAX_TRIGGER_WINDOW} steps, got '${flags.values["sparse-trigger-window"]}'`, COMMAND);
  }
  // Flags not given stay unset: the trigger's defaults apply, and the server says they are uncalibrated.
  const entropy = positiveNumberFlag(flags, "sparse-entropy-threshold", "nats");
  const varentropy = positiveNumberFlag(flags, "sparse-varentropy-threshold", "nats²");
  return {
    ...(entropy !== undefined ? { entropyThreshold: entropy } : {}),
    ...(varentropy !== undefined ? { varentropyThreshold: varentropy } : {}),
    ...(window !== undefined ? { windowSteps: window } : {}),
  };
}

/** What sparse decode ranks pages against, from --sparse-anchor and --sparse-anchor-tokens. */
function sparseAnchorFromFlags(flags: ParsedFlags): SparseAnchorOptions {
  const kind = choiceFlag<SparseAnchorKind>(flags, "sparse-anchor", COMMAND, SPARSE_ANCHORS, DEFAULT_SPARSE_ANCHOR);
  const tokens = integerFlag(flags, "sparse-anchor-tokens", COMMAND, 1);
  if (tokens !== undefined && tokens > MAX_ANCHOR_TOKENS) {
    throw new UsageError(`--sparse-anchor-tokens must be at most ${MAX_ANCHOR_TOKENS}, got '${flags.values["sparse-anchor-tokens"]}'`, COMMAND);
  }
  if (tokens !== undefined && !usesNewestKeys(kind)) throw new UsageError(`--sparse-anchor-tokens needs --sparse-anchor newest or newest-centered (got ${kind})`, COMMAND);
  return { kind, tokens: tokens ?? DEFAULT_ANCHOR_TOKENS, refinement: sparseRefinementFromFlags(flags) };
}

/** Sparse decode's fine stage, from --sparse-refine and --sparse-refine-lookback. */
function sparseRefinementFromFlags(flags: ParsedFlags): TokenRefinementOptions {
  const factor = integerFlag(flags, "sparse-refine", COMMAND, 0) ?? DEFAULT_REFINE_FACTOR;
  if (factor > MAX_REFINE_FACTOR) throw new UsageError(`--sparse-refine must be at most ${MAX_REFINE_FACTOR}, got '${flags.values["sparse-refine"]}'`, COMMAND);
  const lookback = integerFlag(flags, "sparse-refine-lookback", COMMAND, 0);
  if (lookback !== undefined && lookback > MAX_REFINE_LOOKBACK) throw new UsageError(`--sparse-refine-lookback must be at most ${MAX_REFINE_LOOKBACK}, got '${flags.values["sparse-refine-lookback"]}'`, COMMAND);
  if (lookback !== undefined && factor === 0) throw new UsageError("--sparse-refine-lookback needs the fine stage on (--sparse-refine 0 turns it off)", COMMAND);
  return { factor, lookback: lookback ?? DEFAULT_REFINE_LOOKBACK };
}

function sharedStateFlags(flags: ParsedFlags, tls: RedisTlsSettings | undefined): SharedStateConfig | null {
  const url = flags.values.state;
  const prefix = flags.values["state-prefix"];
  if (url === undefined) {
    for (const name of ["state-prefix", "state-snapshot-every", "state-reads", "state-queue-bytes"]) if (flags.values[name] !== undefined) throw new UsageError(`--${name} needs --state`, COMMAND);
    return null;
  }
  if (prefix === "") throw new UsageError("--state-prefix must not be empty", COMMAND);
  const snapshotEvery = integerFlag(flags, "state-snapshot-every", COMMAND, 1);
  const reads = choiceFlag(flags, "state-reads", COMMAND, SHARED_READS, "log");
  const queueBytes = byteSizeFlag(flags, "state-queue-bytes", COMMAND, 1);
  try {
    return {
      url: parseRedisUrl(String(url), "--state"),
      ...(typeof prefix === "string" ? { prefix } : {}),
      ...(snapshotEvery === undefined ? {} : { snapshotEvery }),
      ...(queueBytes === undefined ? {} : { queueBytes }),
      ...(tls === undefined ? {} : { tls }),
      reads,
    };
  } catch (error) {
    throw new UsageError((error as Error).message, COMMAND);
  }
}

export async function serveCommand(args: string[], io: CommandIo & { err?(text: string): void }): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, process.env, ALIASES);
  if (flags.values.help) {
    io.out(SERVE_HELP);
    return EXIT_OK;
  }
  const err = io.err ?? ((text: string) => void process.stderr.write(text));
  for (const note of flags.notes) err(note);
  return withFlagSources(flags, () => serveWithFlags(flags, io, err));
}

async function serveWithFlags(flags: SourcedFlags, io: CommandIo, err: (text: string) => void): Promise<number> {
  const host = typeof flags.values.host === "string" ? flags.values.host : DEFAULT_HOST;
  if (host === "") throw new UsageError("--host must not be empty", COMMAND);
  const port = integerFlag(flags, "port", COMMAND, 0) ?? DEFAULT_PORT;
  if (port > 65535) throw new UsageError(`--port must be from 0 to 65535, got '${flags.values.port}'`, COMMAND);
  if (flags.values["in-memory"] && flags.values["data-dir"] !== undefined) throw new UsageError("give --data-dir or --in-memory, not both", COMMAND);
  const redisTls = redisCaFlag(flags);
  const state = sharedStateFlags(flags, redisTls);
  if (state !== null && (flags.values["in-memory"] || flags.values["data-dir"] !== undefined)) {
    throw new UsageError("--state keeps the state in Redis: give it without --data-dir or --in-memory", COMMAND);
  }
  const dataDir = flags.values["in-memory"] || state !== null ? null : typeof flags.values["data-dir"] === "string" ? flags.values["data-dir"] : DEFAULT_DATA_DIR;
  if (dataDir === "") throw new UsageError("--data-dir must not be empty", COMMAND);
  const flagKey = flags.values["api-key"];
  if (flagKey === "") throw new UsageError("--api-key must not be empty", COMMAND);
  const apiKey = typeof flagKey === "string" ? flagKey : null;
  const ttlSeconds = flags.values["ttl-seconds"] === undefined ? null : numberFlag(flags, "ttl-seconds", COMMAND, 0, { min: 0 });
  if (ttlSeconds !== null && ttlSeconds <= 0) throw new UsageError(`--ttl-seconds must be a positive number, got '${flags.values["ttl-seconds"]}'`, COMMAND);

  const logLevel = choiceFlag<LogLevel>(flags, "log-level", COMMAND, LOG_LEVELS, "info");
  const blockTokens = integerFlag(flags, "document-tokens", COMMAND, 1) ?? 256;
  if (blockTokens > DEFAULT_LIMITS.maxBlockTokens) throw new UsageError(`--document-tokens must be at most ${DEFAULT_LIMITS.maxBlockTokens}`, COMMAND);

  const upstreams = (flags.values.upstream as unknown as string[] | undefined) ?? [];
  for (const upstream of upstreams) {
    try {
      parseUpstreamUrl(upstream);
    } catch (error) {
      throw new UsageError(`--upstream: ${(error as Error).message}`, COMMAND);
    }
  }
  const proxyOnly = ["upstream-key", "engine", "probe-interval", "upstream-timeout", "document-template", "kv-events", "kv-events-max-bytes", "tokenizer", "routing", "kv-overlap-weight", "max-history-bytes", "max-routing-bytes", "max-upstream-requests", "client-stall-seconds"].find((name) => flags.values[name] !== undefined && !(name === "upstream-key" && flags.origins[name]?.startsWith("CTXR_")));
  if (upstreams.length === 0 && proxyOnly !== undefined) throw new UsageError(`--${proxyOnly} needs --upstream`, COMMAND);
  if (flags.values["upstream-key"] === "") throw new UsageError("--upstream-key must not be empty", COMMAND);
  // CTXR_UPSTREAM_KEY may sit in an environment shared with servers that proxy nothing: it alone is no error.
  const upstreamKey = upstreams.length > 0 && typeof flags.values["upstream-key"] === "string" ? flags.values["upstream-key"] : null;
  const engine = choiceFlag<Engine | "auto">(flags, "engine", COMMAND, ["auto", ...ENGINES], "auto");
  const probeSeconds = numberFlag(flags, "probe-interval", COMMAND, DEFAULT_PROBE_INTERVAL_MS / 1000, { min: 0 });
  if (!(probeSeconds >= 0.1)) throw new UsageError(`--probe-interval must be at least 0.1 seconds, got '${flags.values["probe-interval"]}'`, COMMAND);
  const timeoutSeconds = numberFlag(flags, "upstream-timeout", COMMAND, DEFAULT_UPSTREAM_TIMEOUT_MS / 1000, { min: 0 });
  if (timeoutSeconds <= 0) throw new UsageError(`--upstream-timeout must be a positive number, got '${flags.values["upstream-timeout"]}'`, COMMAND);
  const statsIntervalSeconds = numberFlag(flags, "stats-interval", COMMAND, DEFAULT_STATS_INTERVAL_MS / 1000, { min: 0, max: 86400 });
  const statusSampleSeconds = numberFlag(flags, "status-sample-interval", COMMAND, DEFAULT_STATUS_SAMPLE_EVERY_MS / 1000, { min: 0.1, max: 3600 });
  const stallSeconds = flags.values["client-stall-seconds"] === undefined ? undefined : numberFlag(flags, "client-stall-seconds", COMMAND, 0, { min: 0 });
  const template = flags.values["document-template"];
  if (template === "") throw new UsageError("--document-template must not be empty", COMMAND);

  const model = typeof flags.values.model === "string" ? flags.values.model : null;
  if (model === "") throw new UsageError("--model must not be empty", COMMAND);
  const modelOnly = ["max-response-bytes", "device", "kv-blocks", "kv-sliding-blocks", "threads", "kv-dtype", "served-model-name", "max-waiting-requests", "request-timeout", "max-grammar-step-ms", "max-grammar-compile-ms", "max-grammar-tools", "kv-policy", "recompute-ratio", "kv-device-blocks", "kv-host-bytes", "kv-dir", "kv-disk-bytes", "kv-remote", "kv-remote-bytes", "kv-remote-secret", "kv-remote-secret-file", "focus-window", "context-scores", "prophet-span-decay", "prophet-query-rows", "prophet-scores", "no-prefix-cache", "tool-call-parser", "reasoning-parser", "kv-events-publish", "sparse-entropy-threshold", "sparse-varentropy-threshold", "sparse-trigger-window", "kv-events-max-connections", "kv-events-handshake-timeout", "reuse-scoring-budget", "reuse-scoring", "reuse-audit-rate", "reuse-audit-tokens", "reuse-audit-warn-below", ...REUSE_TARGET_FLAGS, "sparse-anchor", "sparse-anchor-tokens", "sparse-refine", "sparse-refine-lookback"].find((name) => flags.values[name] !== undefined);
  if (model === null && modelOnly !== undefined) throw new UsageError(`--${modelOnly} needs --model`, COMMAND);
  if (model !== null && upstreams.length > 0) throw new UsageError("give --model (serve a model) or --upstream (proxy engines), not both", COMMAND);
  // From the environment or a config file, --offline is a standing setting that a local model (or the proxy) satisfies.
  if (flags.values.offline && flags.origins.offline === undefined && (model === null || !isHubReference(model))) throw new UsageError("--offline applies to a model by name: it needs --model hf:ORG/REPO[:QUANT|FILE][@REV]", COMMAND);
  const device = typeof flags.values.device === "string" ? flags.values.device : "cpu";
  if (!/^(cpu|cuda(:\d+)?)$/.test(device)) throw new UsageError(`--device must be cpu, cuda or cuda:N, got '${device}'`, COMMAND);
  const blockSize = integerFlag(flags, "block-size", COMMAND, 1);
  // The runner's blocks are 16 or 32 tokens; engines behind the proxy may use any size.
  if (model !== null && blockSize !== undefined && blockSize !== 16 && blockSize !== 32) throw new UsageError(`--block-size must be 16 or 32, got '${flags.values["block-size"]}'`, COMMAND);
  const kvDtype = choiceFlag<KvDtypeChoice>(flags, "kv-dtype", COMMAND, KV_DTYPES, "auto");
  if (kvDtype === "f16" && device !== "cpu") throw new UsageError(`--kv-dtype f16 needs --device cpu: the CUDA runner keeps its KV cache in f32`, COMMAND);
  const requestTimeoutSeconds = flags.values["request-timeout"] === undefined ? null : numberFlag(flags, "request-timeout", COMMAND, 0, { min: 0 });
  if (requestTimeoutSeconds !== null && !(requestTimeoutSeconds > 0 && requestTimeoutSeconds <= MAX_DEADLINE_MS / 1000)) {
    throw new UsageError(`--request-timeout must be a positive number of seconds, at most ${MAX_DEADLINE_MS / 1000}, got '${flags.values["request-timeout"]}'`, COMMAND);
  }
  const servedName = flags.values["served-model-name"];
  if (servedName === "") throw new UsageError("--served-model-name must not be empty", COMMAND);
  const kvPolicy = choiceFlag<RecomputePolicy>(flags, "kv-policy", COMMAND, RECOMPUTE_POLICIES, "prophet");
  const recomputeRatio = numberFlag(flags, "recompute-ratio", COMMAND, 0.2, { min: 0 });
  if (recomputeRatio > 1) throw new UsageError(`--recompute-ratio must be from 0 to 1, got '${flags.values["recompute-ratio"]}'`, COMMAND);
  const reuseScoringBudget = numberFlag(flags, "reuse-scoring-budget", COMMAND, DEFAULT_BACKGROUND_BUDGET, { min: 0, max: 1 });
  const reuseScoring = choiceFlag<ReuseScoringMode>(flags, "reuse-scoring", COMMAND, REUSE_SCORING_MODES, "idle");
  const reuseTarget = reuseTargetFromFlags(flags, COMMAND);
  // With a target and no rate of its own, the audit runs at the target's rate.
  const reuseAuditRate = numberFlag(flags, "reuse-audit-rate", COMMAND, reuseTarget?.auditRate ?? 0, { min: 0, max: 1 });
  if (reuseAuditRate > 0 && reuseScoringBudget === 0) throw new UsageError("--reuse-audit-rate needs background work: its audits run within --reuse-scoring-budget, which is 0", COMMAND);
  const reuseAuditTokens = integerFlag(flags, "reuse-audit-tokens", COMMAND, 1) ?? DEFAULT_AUDIT_TOKENS;
  if (reuseAuditTokens > MAX_AUDIT_TOKENS) throw new UsageError(`--reuse-audit-tokens must be a positive integer, at most ${MAX_AUDIT_TOKENS}, got '${flags.values["reuse-audit-tokens"]}'`, COMMAND);
  const reuseAuditWarnBelow = numberFlag(flags, "reuse-audit-warn-below", COMMAND, DEFAULT_AUDIT_WARN_BELOW, { min: 0, max: 1 });
  const spanDecay = numberFlag(flags, "prophet-span-decay", COMMAND, DEFAULT_PROPHET_SPAN_DECAY, { min: 0 });
  if (spanDecay >= 1) throw new UsageError(`--prophet-span-decay must be at least 0 and below 1, got '${flags.values["prophet-span-decay"]}'`, COMMAND);
  const kvDir = flags.values["kv-dir"];
  if (kvDir === "") throw new UsageError("--kv-dir must not be empty", COMMAND);
  if (flags.values["kv-disk-bytes"] !== undefined && kvDir === undefined) throw new UsageError("--kv-disk-bytes needs --kv-dir", COMMAND);
  const kvRemote = kvRemoteFlag(flags);
  if (flags.values["kv-remote-bytes"] !== undefined && kvRemote === null) throw new UsageError("--kv-remote-bytes needs --kv-remote", COMMAND);
  const kvRemoteSecret = kvRemoteSecretFlag(flags, kvRemote !== null);
  if (redisTls !== undefined && state === null && kvRemote === null) throw new UsageError("--redis-ca needs --state or --kv-remote (a rediss:// URL)", COMMAND);
  const sparseTrigger = sparseTriggerFromFlags(flags);
  const sparseAnchor = sparseAnchorFromFlags(flags);
  const kvEventsPublish = kvEventsPublishFlag(flags);
  const kvEventsSubscribe = kvEventsFlags(flags, upstreams.length);
  for (const name of ["kv-events-max-connections", "kv-events-handshake-timeout"]) {
    if (flags.values[name] !== undefined && kvEventsPublish === null) throw new UsageError(`--${name} needs --kv-events-publish`, COMMAND);
  }
  if (flags.values["kv-events-max-bytes"] !== undefined && kvEventsSubscribe.every((events) => events === null)) throw new UsageError("--kv-events-max-bytes needs --kv-events", COMMAND);
  if (model === null && upstreams.length === 0 && blockSize !== undefined) throw new UsageError("--block-size needs --model or --upstream", COMMAND);
  const tokenizerDir = flags.values.tokenizer;
  if (tokenizerDir !== undefined && kvEventsSubscribe.every((events) => events === null)) throw new UsageError("--tokenizer counts the prompt blocks engines report in their KV events: it needs --kv-events", COMMAND);
  let promptTokenizer: EnginePromptTokenizer | null = null;
  if (typeof tokenizerDir === "string") {
    try {
      promptTokenizer = await EnginePromptTokenizer.load(tokenizerDir);
    } catch (error) {
      throw new UsageError(`--tokenizer ${tokenizerDir}: ${(error as Error).message}`, COMMAND);
    }
  }
  for (const warning of shortSecretWarnings(upstreamKey, upstreams)) err(warning);
  // A model by name: fetched (or found in the cache) once every flag is known to be good.
  let modelPath = model;
  let modelName: string | undefined;
  if (model !== null && isHubReference(model)) {
    const hubModel = await loadHubModel(model, { offline: Boolean(flags.values.offline), command: COMMAND, terminal: io.progress, err: err });
    modelPath = hubModel.path;
    modelName = hubModel.name;
  }

  await runServer(
    {
      host,
      port,
      logLevel,
      dataDir,
      createDataDirOnFirstWrite: dataDir === DEFAULT_DATA_DIR,
      state,
      apiKey,
      capacityTokens: integerFlag(flags, "capacity-tokens", COMMAND, 1) ?? null,
      ttlMs: ttlSeconds === null ? null : ttlSeconds * 1000,
      blockTokens,
      statsIntervalMs: Math.round(statsIntervalSeconds * 1000),
      statusSampleEveryMs: Math.round(statusSampleSeconds * 1000),
      maxIndexBytes: budgetFlag(flags, "max-index-bytes"),
      maxDedupBytes: budgetFlag(flags, "max-dedup-bytes"),
      maxResponseBytes: budgetFlag(flags, "max-response-bytes"),
      maxAnnotationBytes: byteSizeFlag(flags, "max-annotation-bytes", COMMAND, 1),
      limits: {
        maxBodyBytes: byteSizeFlag(flags, "max-body-bytes", COMMAND, 1),
        maxContexts: integerFlag(flags, "max-contexts", COMMAND, 1),
        maxBlocks: integerFlag(flags, "max-documents", COMMAND, 1),
        maxTemplatePlaceholders: integerFlag(flags, "max-template-placeholders", COMMAND, 1),
      },
      proxy:
        upstreams.length === 0
          ? null
          : {
              upstreams,
              upstreamKey,
              engine,
              probeIntervalMs: Math.round(probeSeconds * 1000),
              timeoutMs: timeoutSeconds * 1000,
              documentTemplate: typeof template === "string" ? template : undefined,
              maxHistoryBytes: budgetFlag(flags, "max-history-bytes"),
              maxRoutingBytes: budgetFlag(flags, "max-routing-bytes"),
              maxUpstreamRequests: integerFlag(flags, "max-upstream-requests", COMMAND, 1),
              clientStallMs: stallSeconds === undefined ? undefined : stallSeconds === 0 ? null : stallSeconds * 1000,
              promptTokenizer,
              routing: choiceFlag<RoutingMode>(flags, "routing", COMMAND, ROUTING_MODES, "auto"),
              overlapWeight: numberFlag(flags, "kv-overlap-weight", COMMAND, DEFAULT_OVERLAP_WEIGHT, { min: 0 }),
              ...(blockSize !== undefined ? { blockSize } : {}),
            },
      model:
        modelPath === null
          ? null
          : {
              model: modelPath,
              device,
              kvBlocks: integerFlag(flags, "kv-blocks", COMMAND, 1),
              kvSlidingBlocks: integerFlag(flags, "kv-sliding-blocks", COMMAND, 1),
              blockSize,
              threads: integerFlag(flags, "threads", COMMAND, 1),
              kvDtype,
              servedModelName: typeof servedName === "string" ? servedName : modelName,
              maxWaitingRequests: integerFlag(flags, "max-waiting-requests", COMMAND, 1),
              requestTimeoutMs: requestTimeoutSeconds === null ? null : requestTimeoutSeconds * 1000,
              grammarLimits: definedOnly({
                stepMs: integerFlag(flags, "max-grammar-step-ms", COMMAND, 1),
                compileMs: integerFlag(flags, "max-grammar-compile-ms", COMMAND, 1),
                maxTools: integerFlag(flags, "max-grammar-tools", COMMAND, 1),
              }),
              kvPolicy,
              recomputeRatio,
              kvDeviceBlocks: integerFlag(flags, "kv-device-blocks", COMMAND, 0),
              kvHostBytes: byteSizeFlag(flags, "kv-host-bytes", COMMAND, 0),
              kvDir: typeof kvDir === "string" ? kvDir : null,
              kvDiskBytes: byteSizeFlag(flags, "kv-disk-bytes", COMMAND, 1),
              kvRemote,
              kvRemoteBytes: byteSizeFlag(flags, "kv-remote-bytes", COMMAND, 1),
              kvRemoteSecret,
              ...(redisTls === undefined ? {} : { redisTls }),
              focusWindow: integerFlag(flags, "focus-window", COMMAND, 0),
              contextScores: choiceFlag<ContextScores>(flags, "context-scores", COMMAND, CONTEXT_SCORES, "shift"),
              prophetSpanDecay: spanDecay,
              reuseScoringBudget,
              reuseScoring,
              reuseAuditRate,
              reuseAuditTokens,
              reuseAuditWarnBelow,
              reuseTarget,
              prefixCache: flags.values["no-prefix-cache"] !== true,
              ...(flags.values["tool-call-parser"] !== undefined ? { toolCallParser: choiceFlag<ToolCallFormat>(flags, "tool-call-parser", COMMAND, TOOL_CALL_FORMATS, "hermes") } : {}),
              reasoningParser: choiceFlag<ReasoningParserChoice>(flags, "reasoning-parser", COMMAND, REASONING_PARSER_CHOICES, "auto"),
              prophetQueryRows: choiceFlag<ProphetQueryRows>(flags, "prophet-query-rows", COMMAND, PROPHET_QUERY_ROWS, "all"),
              prophetScores: choiceFlag<ProphetScores>(flags, "prophet-scores", COMMAND, PROPHET_SCORES, DEFAULT_PROPHET_SCORES),
              sparseTrigger,
              sparseAnchor,
            },
      kvEventsPublish,
      kvEventsSubscribe,
      ...(flags.values["kv-events-max-bytes"] === undefined ? {} : { kvEventsSettings: { maxMessageBytes: byteSizeFlag(flags, "kv-events-max-bytes", COMMAND, 1)! } }),
    },
    { out: io.out, err },
  );
  return EXIT_OK;
}

/** --redis-ca FILE: the PEM CA(s) for rediss:// connections. */
function redisCaFlag(flags: ParsedFlags): RedisTlsSettings | undefined {
  const file = flags.values["redis-ca"];
  if (file === undefined) return undefined;
  if (typeof file !== "string" || file === "") throw new UsageError("--redis-ca needs a file", COMMAND);
  let ca: string;
  try {
    ca = readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`--redis-ca ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, COMMAND);
  }
  if (!ca.includes("-----BEGIN CERTIFICATE-----")) throw new UsageError(`--redis-ca ${file}: not a PEM certificate (no "-----BEGIN CERTIFICATE-----" line)`, COMMAND);
  return { ca, caFile: file };
}

/** --kv-remote-secret S or --kv-remote-secret-file FILE: the key of the remote tier's MACs. */
function kvRemoteSecretFlag(flags: ParsedFlags, remote: boolean): Uint8Array | null {
  const inline = flags.values["kv-remote-secret"];
  const file = flags.values["kv-remote-secret-file"];
  if (inline === undefined && file === undefined) return null;
  if (inline !== undefined && file !== undefined) throw new UsageError("give --kv-remote-secret or --kv-remote-secret-file, not both", COMMAND);
  if (!remote) throw new UsageError(`--${inline !== undefined ? "kv-remote-secret" : "kv-remote-secret-file"} needs --kv-remote`, COMMAND);
  try {
    if (inline !== undefined) return remoteSecretBytes(String(inline), "--kv-remote-secret");
    let text: string;
    try {
      text = readFileSync(String(file), "utf8");
    } catch (error) {
      throw new Error(`--kv-remote-secret-file ${String(file)}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
    }
    return remoteSecretBytes(text, `--kv-remote-secret-file ${String(file)}`);
  } catch (error) {
    throw new UsageError((error as Error).message, COMMAND);
  }
}

function kvRemoteFlag(flags: ParsedFlags): RedisUrl | null {
  const value = flags.values["kv-remote"];
  if (typeof value !== "string") return null;
  try {
    return parseRedisUrl(value, "--kv-remote");
  } catch (error) {
    throw new UsageError((error as Error).message, COMMAND);
  }
}

function kvEventsPublishFlag(flags: ParsedFlags): KvEventsPublishOptions | null {
  const value = flags.values["kv-events-publish"];
  if (typeof value !== "string") return null;
  if (flags.values["no-prefix-cache"] === true) throw new UsageError("--kv-events-publish publishes the prefix cache's changes: it cannot go with --no-prefix-cache", COMMAND);
  try {
    const options = parseKvEventsPublish(value);
    const maxConnections = integerFlag(flags, "kv-events-max-connections", COMMAND, 1);
    const handshakeSeconds = flags.values["kv-events-handshake-timeout"] === undefined ? undefined : numberFlag(flags, "kv-events-handshake-timeout", COMMAND, DEFAULT_HANDSHAKE_TIMEOUT_MS / 1000, { min: 0 });
    if (handshakeSeconds !== undefined && handshakeSeconds <= 0) throw new UsageError(`--kv-events-handshake-timeout must be a positive number, got '${flags.values["kv-events-handshake-timeout"]}'`, COMMAND);
    return { ...options, ...(maxConnections === undefined ? {} : { maxConnections }), ...(handshakeSeconds === undefined ? {} : { handshakeTimeoutMs: Math.round(handshakeSeconds * 1000) }) };
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError(`--kv-events-publish: ${(error as Error).message}`, COMMAND);
  }
}

/** --kv-events, one per --upstream (null for `none`). */
function kvEventsFlags(flags: ParsedFlags, upstreams: number): (KvEventsSubscribeOptions | null)[] {
  const values = (flags.values["kv-events"] as unknown as string[] | undefined) ?? [];
  if (values.length === 0) return [];
  if (values.length !== upstreams) {
    throw new UsageError(`give one --kv-events per --upstream, in the same order ('none' for an upstream without events): ${upstreams} --upstream, ${values.length} --kv-events`, COMMAND);
  }
  return values.map((value) => {
    try {
      return parseKvEventsSubscribe(value);
    } catch (error) {
      throw new UsageError(`--kv-events: ${(error as Error).message}`, COMMAND);
    }
  });
}

/** Below this length a secret is likely to occur in ordinary answer text too. */
const SHORT_SECRET_CHARS = 16;

/**
 * Warnings about short upstream secrets: ctxr redacts its secrets from every
 * answer whatever their length (src/proxy/redact.ts), so a short key also
 * turns matching ordinary text into "[redacted]". The secrets are not shown.
 */
function shortSecretWarnings(upstreamKey: string | null, upstreams: readonly string[]): string[] {
  const warnings: string[] = [];
  const advice = `ctxr replaces it with [redacted] wherever an upstream's answer contains it, so ordinary text that matches it is replaced too; use a secret of ${SHORT_SECRET_CHARS} characters or more`;
  if (upstreamKey !== null && upstreamKey.length < SHORT_SECRET_CHARS) {
    warnings.push(`ctxr serve: warning: the upstream key is ${upstreamKey.length} characters long: ${advice}\n`);
  }
  for (const upstream of upstreams) {
    const parsed = new URL(upstream);
    for (const [what, value] of [["user name", parsed.username], ["password", parsed.password]] as const) {
      if (value !== "" && decodeURIComponentSafe(value).length < SHORT_SECRET_CHARS) {
        warnings.push(`ctxr serve: warning: the ${what} in --upstream ${parseUpstreamUrl(upstream).url} is ${decodeURIComponentSafe(value).length} characters long: ${advice}\n`);
      }
    }
  }
  return warnings;
}

function decodeURIComponentSafe(component: string): string {
  try {
    return decodeURIComponent(component);
  } catch {
    return component;
  }
}

/** The entries that are set. */
function definedOnly<T extends Record<string, number | undefined>>(values: T): Partial<{ [K in keyof T]: number }> {
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined)) as Partial<{ [K in keyof T]: number }>;
}
