/**
 * Puts the app on the runtime's HTTP server (src/runtime/httpServer.ts), runs the TTL timer, and shuts
 * down gracefully (stop accepting, let requests in flight finish, close the
 * service, which writes its final snapshot) on SIGINT or SIGTERM.
 */
import type { RedisTlsSettings } from "../state/redisDiagnosis.ts";
import { serveHttp, type HttpServeOptions, type HttpServer } from "../runtime/httpServer.ts";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { GenerationEngine, type EngineOptions } from "../engine/generationEngine.ts";
import { ContextService } from "../online/contextService.ts";
import { DEFAULT_BUDGETS } from "../online/stateBudgets.ts";
import type { RedisUrl } from "../state/redisUrl.ts";
import { SharedState, type SharedReads } from "../state/sharedState.ts";
import type { ContextProxy, ProxyOptions } from "../proxy/contextProxy.ts";
import type { KvEventsSubscribeOptions } from "../proxy/kvEventSubscriber.ts";
import { KvEventsThread } from "../proxy/kvEventsThread.ts";
import type { KvEventsThreadSettings } from "../proxy/kvEventsThreadMessages.ts";
import { parseUpstreamUrl } from "../proxy/upstreamTarget.ts";
import { createApp } from "./app.ts";
import { BODY_FIELD, bodyReadFailure, errorBody } from "../http/errors.ts";
import { withDefaultLimits, type ServerLimits } from "../http/limits.ts";
import type { KvEventsPublishOptions } from "./kvEventPublisher.ts";
import { KvEventsPublishThread } from "./kvEventsPublishThread.ts";
import { LatencyHistograms } from "./latencyMetrics.ts";
import { registerIdleTimeout, SERVER_IDLE_TIMEOUT_S } from "../http/idleTimeout.ts";
import { ServerMetrics } from "./metrics.ts";
import { DEFAULT_STATUS_SAMPLE_EVERY_MS, StatusHistory, statusSampleFailed } from "./statusPage/statusHistory.ts";
import { serverSavedTokens } from "./savedTokens.ts";
import { DEFAULT_STATS_INTERVAL_MS, startStatsLog } from "./statsLog.ts";

export interface ServerOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  apiKey?: string | null;
  limits?: Partial<ServerLimits>;
  /** How often expired contexts are evicted when the service has a TTL (default: a quarter of the TTL, 0.25 to 5 s). */
  expireEveryMs?: number;
  /** Internal errors and timer failures (default: stderr). */
  log?: (text: string) => void;
  /** Proxy to these upstreams (none: the context-reuse API only). */
  proxy?: ProxyOptions | null;
  /** Told the proxy once it exists (KV-event subscribers feed it). */
  onProxy?: (proxy: ContextProxy) => void;
  /** Serve this model (POST /v1/chat/completions, /v1/completions, GET /v1/models). */
  engine?: GenerationEngine | null;
  /** The engine's KV events publisher (a KvEventPublisher or KvEventsPublishThread), whose counters /metrics adds. */
  kvEvents?: { metrics(): string | Promise<string> } | null;
  /** The engine's latency histograms (given to GenerationEngine.open as `latency`), which /metrics adds. */
  latency?: LatencyHistograms | null;
  /** A streamed answer (the engine's or a relayed one) that wrote nothing for this long writes an SSE keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS). */
  sseKeepAliveMs?: number;
  /** With engine: estimated heap bytes of stored /v1/responses responses (--max-response-bytes; null: unlimited). */
  maxResponseBytes?: number | null;
  /** How often the status page's figures are sampled for GET /v1/stats/history (default DEFAULT_STATUS_SAMPLE_EVERY_MS). */
  statusSampleEveryMs?: number;
}

export interface RunningServer {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly metrics: ServerMetrics;
  /** Requests being answered right now. */
  readonly inFlight: number;
  /**
   * Stops accepting connections, waits up to `graceMs` for requests in flight,
   * then closes the remaining connections and stops the TTL timer. The service
   * stays open (close it afterwards).
   */
  stop(graceMs?: number): Promise<void>;
}

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 8765;

/** http://host:port, with an IPv6 host in brackets. */
export function serverUrl(host: string, port: number): string {
  return `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** serveHttp with its bind errors in words. */
function listen(config: HttpServeOptions): HttpServer {
  try {
    return serveHttp(config);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE") throw new Error(`cannot listen on ${serverUrl(config.hostname, config.port)}: the port is in use`);
    if (code === "EADDRNOTAVAIL") throw new Error(`cannot listen on ${serverUrl(config.hostname, config.port)}: no such local address`);
    if (code === "EACCES") throw new Error(`cannot listen on ${serverUrl(config.hostname, config.port)}: permission denied`);
    throw error;
  }
}

export function startServer(service: ContextService, options: ServerOptions = {}): RunningServer {
  const log = options.log ?? ((text: string) => void process.stderr.write(text));
  const limits = withDefaultLimits(options.limits);
  const metrics = new ServerMetrics();
  const statusHistory = new StatusHistory({ everyMs: options.statusSampleEveryMs ?? DEFAULT_STATUS_SAMPLE_EVERY_MS, onError: statusSampleFailed(log) });
  let proxy: ContextProxy | null = null;
  const onProxy = (created: ContextProxy) => {
    proxy = created;
    options.onProxy?.(created);
  };
  const app = createApp(service, { limits, apiKey: options.apiKey, metrics, log, proxy: options.proxy, engine: options.engine, kvEvents: options.kvEvents, latency: options.latency, onProxy, sseKeepAliveMs: options.sseKeepAliveMs, maxResponseBytes: options.maxResponseBytes, statusHistory });
  const host = options.host ?? DEFAULT_HOST;

  let inFlight = 0;
  let idle: (() => void) | null = null;
  const server = listen({
    hostname: host,
    port: options.port ?? DEFAULT_PORT,
    idleTimeoutS: SERVER_IDLE_TIMEOUT_S,
    async fetch(request, setIdleTimeout) {
      registerIdleTimeout(request, setIdleTimeout);
      inFlight++;
      try {
        return await app.fetch(request);
      } finally {
        inFlight--;
        if (inFlight === 0 && idle !== null) idle();
      }
    },
    error(error) {
      const unread = bodyReadFailure(error, false);
      if (unread !== null) return Response.json(errorBody(unread.message, BODY_FIELD, unread.status), { status: unread.status });
      log(`ctxr serve: internal error: ${error.stack ?? error.message}\n`);
      return Response.json(errorBody("internal server error", "", 500), { status: 500 });
    },
  });

  // The upstreams' probes (readiness, --engine auto): the first round starts now; runServer waits for it.
  void (proxy as ContextProxy | null)?.monitor?.start();

  const ttlMs = service.stats().ttl_ms;
  let timer: ReturnType<typeof setInterval> | null = null;
  if (ttlMs !== null && ttlMs > 0) {
    const every = options.expireEveryMs ?? Math.min(5000, Math.max(250, ttlMs / 4));
    let running = false;
    timer = setInterval(() => {
      if (running) return;
      running = true;
      service
        .expire()
        .catch((error) => log(`ctxr serve: expiring contexts failed: ${String(error)}\n`))
        .finally(() => (running = false));
    }, every);
  }

  const port = server.port;
  let stopping: Promise<void> | null = null;
  return {
    url: serverUrl(host, port),
    host,
    port,
    metrics,
    get inFlight() {
      return inFlight;
    },
    stop(graceMs = 10_000) {
      stopping ??= (async () => {
        if (timer !== null) clearInterval(timer);
        statusHistory.stop();
        (proxy as ContextProxy | null)?.monitor?.stop();
        const stopped = server.stop(false);
        if (inFlight > 0) {
          await new Promise<void>((resolveIdle) => {
            const deadline = setTimeout(resolveIdle, graceMs);
            idle = () => {
              clearTimeout(deadline);
              resolveIdle();
            };
          });
        }
        idle = null;
        await server.stop(true);
        await stopped;
      })();
      return stopping;
    },
  };
}

/** --state: the state shared with other instances through Redis. */
export interface SharedStateConfig {
  url: RedisUrl;
  prefix?: string;
  snapshotEvery?: number;
  reads?: SharedReads;
  /** --state-queue-bytes. */
  queueBytes?: number;
  /** --redis-ca. */
  tls?: RedisTlsSettings;
}

export const LOG_LEVELS = ["info", "debug"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface RunOptions extends ServerOptions {
  /** debug: also the tuning details at start (default info). */
  logLevel?: LogLevel;
  /** Journal directory; null keeps state in memory only (or in Redis, with `state`). */
  dataDir: string | null;
  /** Create dataDir only when the first change is written (the default ./ctxr-data), if it does not exist yet. */
  createDataDirOnFirstWrite?: boolean;
  state?: SharedStateConfig | null;
  capacityTokens?: number | null;
  ttlMs?: number | null;
  blockTokens?: number;
  /** Byte budgets of the index and the dedup records, and the annotation limit (defaults: DEFAULT_BUDGETS; null: unlimited). */
  maxIndexBytes?: number | null;
  maxDedupBytes?: number | null;
  maxAnnotationBytes?: number;
  /** --model: load this model and serve the generation API. */
  model?: EngineOptions | null;
  /** --kv-events-publish (with a model): publish its prefix cache's changes. */
  kvEventsPublish?: KvEventsPublishOptions | null;
  /** --stats-interval: ms between the stats lines on stdout, written only after traffic (default DEFAULT_STATS_INTERVAL_MS; 0: none). */
  statsIntervalMs?: number;
  /** --kv-events (with upstreams): follow each upstream's KV events, in their order (null: that one publishes none). */
  kvEventsSubscribe?: readonly (KvEventsSubscribeOptions | null)[];
  /** The subscribers' limits (--kv-events-max-bytes). */
  kvEventsSettings?: KvEventsThreadSettings;
}

export interface RunIo {
  out(text: string): void;
  err(text: string): void;
}

/**
 * `ctxr serve`: opens the service (recovering its journal), serves until
 * SIGINT or SIGTERM, then shuts down gracefully. Prints the recovery report when
 * something was skipped, then `ctxr serve: listening on URL (data: DIR|memory)`.
 */
export async function runServer(options: RunOptions, io: RunIo): Promise<void> {
  const dataDir = options.dataDir === null ? null : resolve(options.dataDir);
  const shared = options.state
    ? new SharedState({ url: options.state.url, prefix: options.state.prefix, snapshotEvery: options.state.snapshotEvery, reads: options.state.reads, queueBytes: options.state.queueBytes, tls: options.state.tls, histories: { maxBytes: options.proxy?.maxHistoryBytes === undefined ? DEFAULT_BUDGETS.historyBytes : options.proxy.maxHistoryBytes }, log: io.err })
    : null;
  const dataDirLater = dataDir !== null && options.createDataDirOnFirstWrite === true && !existsSync(dataDir);
  const service = await ContextService.open({
    dataDir,
    createDataDirOnFirstWrite: options.createDataDirOnFirstWrite,
    sink: shared,
    capacityTokens: options.capacityTokens ?? null,
    ttlMs: options.ttlMs ?? null,
    blockTokens: options.blockTokens,
    maxIndexBytes: options.maxIndexBytes,
    maxDedupBytes: options.maxDedupBytes,
    maxAnnotationBytes: options.maxAnnotationBytes,
  });
  await shared?.start(service);
  const mirroredUpstreams = (options.kvEventsSubscribe ?? []).filter((subscribe) => subscribe !== null).length;
  const followedKvEvents = (options.kvEventsSubscribe ?? []).map((subscribe) => subscribe !== null);
  const proxyOptions = options.proxy ? { ...options.proxy, mirroredUpstreams, followedKvEvents, ...(shared ? { histories: shared.histories } : {}) } : options.proxy;
  let engine: GenerationEngine | null = null;
  let kvEvents: KvEventsPublishThread | null = null;
  // Every upstream's KV events are followed on one thread of their own, off the request path.
  const kvEventsThread = (options.kvEventsSubscribe ?? []).some((subscribe) => subscribe !== null) ? new KvEventsThread(io.err, options.kvEventsSettings) : null;
  const subscribers = (options.kvEventsSubscribe ?? []).map((subscribe) => (subscribe === null ? null : kvEventsThread!.subscribe(subscribe)));
  let runningProxy: ContextProxy | null = null;
  const onProxy = (proxy: ContextProxy) => {
    runningProxy = proxy;
    options.onProxy?.(proxy);
    subscribers.forEach((subscriber, position) => subscriber !== null && proxy.followKvEvents(position, subscriber));
  };
  const closeSubscribers = async () => kvEventsThread?.close();
  const latency = options.model ? new LatencyHistograms() : null;
  let running: RunningServer;
  try {
    if (options.model) {
      if (options.kvEventsPublish) kvEvents = await openKvEvents(options.kvEventsPublish, io.err);
      engine = await GenerationEngine.open({
        ...options.model,
        ...(kvEvents === null ? {} : { prefixEvents: kvEvents }),
        latency: latency!,
        log: options.model.log ?? ((line) => io.err(`${line}\n`)),
      });
    }
    running = startServer(service, { ...options, proxy: proxyOptions, engine, kvEvents, latency, onProxy, log: options.log ?? io.err });
  } catch (error) {
    await closeSubscribers();
    await engine?.close();
    await kvEvents?.close();
    await service.close();
    throw error;
  }

  const report = service.recovery;
  if (report !== null && (report.skipped.length > 0 || report.discardedSnapshots.length > 0)) {
    const bytes = report.skipped.reduce((total, s) => total + s.bytes, 0);
    io.out(
      `ctxr serve: recovery: skipped ${report.skipped.length} damaged log part(s) (${bytes} bytes), discarded ${report.discardedSnapshots.length} snapshot(s), ` +
        `replayed ${report.recordsReplayed} record(s) ${JSON.stringify({ skipped: report.skipped, discardedSnapshots: report.discardedSnapshots })}\n`,
    );
  }
  if (options.proxy) {
    const urls = options.proxy.upstreams.map((u) => parseUpstreamUrl(u).url).join(", ");
    const engine = options.proxy.engine ?? "openai";
    io.out(`ctxr serve: proxying /v1/chat/completions, /v1/completions and every other request (the engine's /health, /metrics... at /engine/PATH) to ${urls} (engine: ${engine === "auto" ? "detected for each upstream" : engine})\n`);
    // The first probe round: its detection lines come before "listening".
    await (runningProxy as ContextProxy | null)?.monitor?.probeAll();
    subscribers.forEach((subscriber, position) => {
      if (subscriber === null) return;
      const replay = subscriber.stats.replayEndpoint === null ? "" : ` (replay: ${subscriber.stats.replayEndpoint})`;
      io.out(`ctxr serve: following the KV events of ${parseUpstreamUrl(options.proxy!.upstreams[position]!).url} from ${subscriber.stats.endpoint}${replay}\n`);
    });
  }
  if (engine !== null) {
    const info = engine.info;
    io.out(
      `ctxr serve: serving model ${engine.modelId} from ${engine.modelDir} on ${info.device} (${info.num_blocks} KV blocks of ${info.block_size} tokens, ` +
        `at most ${engine.maxModelLen} tokens a sequence): POST /v1/chat/completions, /v1/completions, /v1/responses, /tokenize, /detokenize; GET /v1/models\n`,
    );
    io.out(`ctxr serve: ${engine.kvSettings}\n`);
    if (options.logLevel === "debug") io.out(`ctxr serve: debug: ${engine.kvTuning}\n`);
    if (engine.reasoningParser !== null) {
      const what = engine.reasoningParser === "gpt-oss" ? "harmony analysis channel" : "<think>…</think>";
      io.out(`ctxr serve: reasoning parser ${engine.reasoningParser}: answers' ${what} returned apart as reasoning_content\n`);
    }
  }
  if (kvEvents !== null) {
    io.out(`ctxr serve: publishing KV events on ${kvEvents.endpoint}${kvEvents.replayEndpoint === null ? "" : ` (replay: ${kvEvents.replayEndpoint})`}\n`);
  }
  io.out(`ctxr serve: listening on ${running.url} (data: ${shared !== null ? `shared through ${options.state!.url.display}` : (dataDir === null ? "memory" : dataDirLater ? `${dataDir}, created when first written` : dataDir)})\n`);
  const stopStatsLog = startStatsLog(() => serverSavedTokens(engine, runningProxy), options.statsIntervalMs ?? DEFAULT_STATS_INTERVAL_MS, io.out);

  // A second signal while shutting down exits at once. Its handler is added once the first signal's
  // dispatch is over: Deno calls a listener added during a dispatch in that same dispatch.
  const force = () => process.exit(1);
  const signal = await new Promise<NodeJS.Signals>((resolveSignal) => {
    const onSignal = (name: NodeJS.Signals) => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      resolveSignal(name);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
  process.on("SIGINT", force);
  process.on("SIGTERM", force);
  io.err(`ctxr serve: ${signal}: shutting down\n`);
  stopStatsLog();
  try {
    await running.stop();
    await closeSubscribers();
    await engine?.close();
    await kvEvents?.close();
    await service.close();
  } finally {
    process.off("SIGINT", force);
    process.off("SIGTERM", force);
  }
  io.err(`ctxr serve: stopped${dataDir === null || !existsSync(dataDir) ? "" : `; state saved in ${dataDir}`}\n`);
}

/** The KV events publisher on a thread of its own, its bind errors in words naming the flag. */
async function openKvEvents(options: KvEventsPublishOptions, log: (text: string) => void): Promise<KvEventsPublishThread> {
  try {
    return await KvEventsPublishThread.open(options, log);
  } catch (error) {
    throw new Error(`--kv-events-publish: ${(error as Error).message}`);
  }
}
