/**
 * The HTTP API of the context-reuse service as a Hono app (web-standard
 * Request/Response; serve.ts puts it on Bun.serve). Handlers are thin:
 * validation happens in the route's zod schemas, the work in ContextService.
 */
import { OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { VERSION } from "../version.ts";
import type { ContextService } from "../online/contextService.ts";
import { RequestError } from "../http/requestError.ts";
import { ContextProxy, type ProxyOptions } from "../proxy/contextProxy.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import type { ChunkCacheStats } from "../kv/chunkCache.ts";
import type { RemoteKvStats } from "../kv/remoteKvTier.ts";
import { applyEvictBody } from "../proxy/kvEvents.ts";
import { mountProxyRoutes, proxyRouteLabel } from "../proxy/proxyRoutes.ts";
import { requireApiKey } from "./auth.ts";
import { BODY_FIELD, createErrorHandler, errorResponse, validationErrorResponse } from "../http/errors.ts";
import { withDefaultLimits, type ServerLimits } from "../http/limits.ts";
import { CollectAfterBytes } from "./garbageCollection.ts";
import { PROMETHEUS_CONTENT_TYPE } from "../http/prometheus.ts";
import { ServerMetrics } from "./metrics.ts";
import { renderSavedTokensMetrics } from "../accounting/savedTokensMetrics.ts";
import { serverSavedTokens } from "./savedTokens.ts";
import { GENERATION_PATHS, mountGenerationRoutes } from "./openai/generationRoutes.ts";
import { MODEL_PATH_PREFIX, mountNoModelRoutes } from "./openai/modelsRoutes.ts";
import { readiness } from "./readiness.ts";
import { createRoutes, routeTable } from "./routes.ts";
import { refuseWhileStateQueueFull, stateWritingPaths } from "./stateWriteGuard.ts";
import { mountResponsesRoute } from "./responses/responsesRoute.ts";
import { ResponseStore } from "./responses/responseStore.ts";
import { DEFAULT_BUDGETS } from "../online/stateBudgets.ts";
import { createSchemas } from "./schemas.ts";
import { mountNoModelTokenizeRoutes, mountTokenizeRoutes, TOKENIZE_PATHS } from "./tokenizeRoutes.ts";
import { collectGarbage } from "../runtime/garbageCollector.ts";
import { engineStatsBody, reuseScoringBody } from "./engineStatsBody.ts";
import type { FirstTokenTotals } from "./latencyMetrics.ts";
import { mountStatusPageRoutes, STATUS_PAGE_PATHS } from "./statusPage/statusPageRoutes.ts";
import { StatusHistory, statusSampleFailed } from "./statusPage/statusHistory.ts";

export interface AppOptions {
  limits?: Partial<ServerLimits>;
  /** Required on mutating routes when set (null or "": open). */
  apiKey?: string | null;
  metrics?: ServerMetrics;
  /** Where internal errors are logged (default: stderr). */
  log?: (text: string) => void;
  /** With upstreams: the proxy routes (/v1/chat/completions, /v1/completions, other /v1/* passed through). */
  proxy?: ProxyOptions | null;
  /** With --model: the built-in engine behind /v1/chat/completions, /v1/completions and /v1/models. */
  engine?: GenerationEngine | null;
  /** With --kv-events-publish: the publisher, whose counters /metrics adds. */
  kvEvents?: { metrics(): string | Promise<string> } | null;
  /** Told the proxy once it exists (to feed it KV events; tests reach it through this). */
  onProxy?: (proxy: ContextProxy) => void;
  /** With --model: the engine's latency histograms (latencyMetrics.ts), which /metrics adds (and /v1/stats their first-token totals). */
  latency?: { metrics(): string; firstTokenTotals?(): FirstTokenTotals } | null;
  /** Samples of the status page's figures that GET /v1/stats/history returns (default: one sampled at each request of it). */
  statusHistory?: StatusHistory;
  /** A streamed answer that wrote nothing for this long writes a keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS). */
  sseKeepAliveMs?: number;
  /** With --model: estimated heap bytes of the stored /v1/responses responses (default DEFAULT_BUDGETS.responseBytes; null: unlimited). */
  maxResponseBytes?: number | null;
}

/** Bodies of 1 MiB or more between two full garbage collections (see garbageCollection.ts). */
const GARBAGE_COLLECTION_EVERY_BYTES = 64 * 1024 * 1024;
const GARBAGE_COLLECTION_MIN_BODY_BYTES = 1024 * 1024;

const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** The metrics label of a path no fixed route has: /v1/models/{model} for a model card, else "unmatched". */
function generationRouteLabel(path: string): string {
  return path.startsWith(MODEL_PATH_PREFIX) && path.length > MODEL_PATH_PREFIX.length ? `${MODEL_PATH_PREFIX}{model}` : "unmatched";
}

export function createApp(service: ContextService, options: AppOptions = {}): OpenAPIHono {
  const limits = withDefaultLimits(options.limits);
  const metrics = options.metrics ?? new ServerMetrics();
  const log = options.log ?? ((text: string) => void process.stderr.write(text));
  const apiKey = options.apiKey ? options.apiKey : null;

  const app = new OpenAPIHono({
    defaultHook: (result, c) => {
      if (!result.success) return validationErrorResponse(c, result.error.issues);
    },
  });

  const sizeLimit = bodyLimit({
    maxSize: limits.maxBodyBytes,
    onError: (c) => errorResponse(c, 413, `${BODY_FIELD}: request body larger than ${limits.maxBodyBytes} bytes`, BODY_FIELD),
  });
  const mutating = apiKey === null ? [sizeLimit] : [requireApiKey(apiKey), sizeLimit];
  const schemas = createSchemas(limits);
  const routes = createRoutes(schemas, { mutating, secured: apiKey !== null });
  const table = routeTable(routes);
  const proxy = options.proxy ? new ContextProxy(service, { sseKeepAliveMs: options.sseKeepAliveMs, ...options.proxy }, apiKey !== null, log) : null;
  if (proxy !== null) options.onProxy?.(proxy);
  const engine = options.engine ?? null;
  if (proxy !== null && engine !== null) throw new Error("a server either proxies upstreams or serves a model, not both");
  if (proxy === null) for (const [path, methods] of [...GENERATION_PATHS, ...TOKENIZE_PATHS]) table.set(path, methods);

  const collector = new CollectAfterBytes(GARBAGE_COLLECTION_EVERY_BYTES, GARBAGE_COLLECTION_MIN_BODY_BYTES);
  app.use("*", async (c, next) => {
    const started = performance.now();
    await next();
    collector.handled(Number(c.req.header("content-length")) || 0);
    const route = table.has(c.req.path) ? c.req.path : proxy === null ? generationRouteLabel(c.req.path) : (proxyRouteLabel(c.req.path) ?? "unmatched");
    const method = KNOWN_METHODS.has(c.req.method) ? c.req.method : "OTHER";
    metrics.observeRequest(route, method, c.res.status, (performance.now() - started) / 1000);
  });
  app.onError(createErrorHandler(log));
  if (service.sharedWithOtherInstances) for (const path of stateWritingPaths(proxy !== null)) app.use(path, refuseWhileStateQueueFull(service));
  const notAllowed = (c: Context) => {
    const allowed = table.get(c.req.path);
    if (allowed === undefined) return errorResponse(c, 404, `no route ${c.req.method} ${c.req.path}`);
    return errorResponse(c, 405, `method ${c.req.method} not allowed on ${c.req.path}; use ${allowed.join(", ")}`, "", { Allow: allowed.join(", ") });
  };
  app.notFound(notAllowed);

  if (apiKey !== null) {
    app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", { type: "http", scheme: "bearer", description: "Authorization: Bearer KEY" });
    app.openAPIRegistry.registerComponent("securitySchemes", "apiKeyHeader", { type: "apiKey", in: "header", name: "x-api-key" });
  }

  app.openapi(routes.health, (c) => {
    const failure = service.failure;
    if (failure !== null) return c.json({ status: "failing" as const, error: failure }, 503);
    const degraded = service.degradedReason;
    return degraded === null ? c.json({ status: "ok" as const }, 200) : c.json({ status: "degraded" as const, error: degraded }, 200);
  });

  // vLLM's: an empty 200 while everything this server serves works.
  app.openapi(routes.vllmHealth, ((c: Context) => {
    const failure = service.failure ?? (engine !== null && !engine.runner.alive ? "the model runner is not running" : null);
    return failure === null ? c.body(null, 200) : errorResponse(c, 503, failure);
  }) as never);

  app.openapi(routes.ready, (c) => {
    const state = readiness({ journalFailure: service.failure, runnerAlive: engine === null ? null : engine.runner.alive, upstreams: proxy?.pool.upstreams ?? null });
    const body = { status: state.ready ? ("ready" as const) : ("not_ready" as const), ...(state.reason === null ? {} : { reason: state.reason }), ...(state.upstreams === undefined ? {} : { upstreams: state.upstreams }) };
    return state.ready ? c.json(body, 200) : c.json(body, 503);
  });

  let document: unknown = null;
  app.openapi(routes.openapi, (c) => {
    document ??= app.getOpenAPIDocument({
      openapi: "3.0.3",
      info: {
        title: "ctxr",
        version: VERSION,
        description: "Context reuse for long-context LLM inference: reorder, schedule, dedup and evict over a live context index.",
      },
    });
    return c.json(document as Record<string, unknown>, 200);
  });

  app.openapi(routes.metrics, async (c) => {
    // The KV events publisher's counters come from its own thread (kvEventsPublishThread.ts): asked first.
    const kvEvents = (await options.kvEvents?.metrics()) ?? "";
    const saved = renderSavedTokensMetrics(serverSavedTokens(engine, proxy));
    return c.text(metrics.render(service.stats()) + saved + (proxy?.metrics() ?? "") + (engine?.metrics() ?? "") + (options.latency?.metrics() ?? "") + kvEvents, 200, { "Content-Type": PROMETHEUS_CONTENT_TYPE });
  });

  const statsBody = () => {
    const remote = engine?.chunkCache.stats.remote ?? null;
    return {
      ...service.stats(),
      saved_tokens: serverSavedTokens(engine, proxy),
      recovery: service.recovery,
      ...(proxy === null ? {} : { upstreams: proxy.stats(), proxy: proxy.state() }),
      ...(engine === null ? {} : { engine: engineStatsBody(engine.stats, options.latency?.firstTokenTotals?.() ?? null, reuseScoringBody(engine.scheduler.background.stats, engine.scheduler.reuseScoring.stats), engine.reuseTarget?.body()) }),
      ...(remote === null ? {} : { kv_remote: remoteKvStatsBody(remote, engine!.chunkCache.stats, engine!.chunkCache.capacities.remote?.url ?? "") }),
    };
  };
  app.openapi(routes.stats, (c) => c.json(statsBody(), 200));

  for (const [path, methods] of STATUS_PAGE_PATHS) table.set(path, methods);
  mountStatusPageRoutes(app, { history: options.statusHistory ?? new StatusHistory({ onError: statusSampleFailed(log) }), statsBody, errorSchema: schemas.ErrorResponse });

  app.openapi(routes.reorder, async (c) => {
    const body = c.req.valid("json");
    await service.catchUp();
    return c.json(await service.reorder(body.contexts, body.conversation_id, body.templates), 200);
  });

  app.openapi(routes.schedule, (c) => {
    const body = c.req.valid("json");
    return c.json(service.schedule(body.contexts, { method: body.method, alpha: body.alpha, linkage: body.linkage }), 200);
  });

  app.openapi(routes.dedup, async (c) => {
    const body = c.req.valid("json");
    await service.catchUp();
    return c.json(await service.dedup(body.conversation_id, body.blocks, body.templates), 200);
  });

  app.openapi(routes.evict, async (c) => {
    const evicted = await applyEvictBody(c.req.valid("json"), {
      evict: async (ids) => {
        proxy?.forgetRouted(ids);
        return (await service.evict(ids)).evicted;
      },
      clearEngine: async (selector, field) => {
        if (proxy !== null) return proxy.clearEngine(selector, field);
        if (selector !== undefined) throw new RequestError(field, "no upstreams are configured (ctxr serve --upstream)");
        return (await service.evictAll()).evicted;
      },
    });
    return c.json({ evicted }, 200);
  });

  app.openapi(routes.reset, async (c) => {
    await service.reset();
    proxy?.pool.clear();
    proxy?.rewriter.reset();
    // What was dropped goes back to the system now, not at the next collection.
    collectGarbage();
    return c.json({ reset: true as const }, 200);
  });

  if (proxy !== null) {
    // The proxy reads bodies itself and checks their size as it does (Hono's bodyLimit would make Bun stream the body).
    mountProxyRoutes(app, proxy, {
      middleware: apiKey === null ? [] : [requireApiKey(apiKey)],
      maxBodyBytes: limits.maxBodyBytes,
      maxJsonDepth: limits.maxJsonDepth,
      ownPaths: table,
      notAllowed,
      secured: apiKey !== null,
      errorSchema: schemas.ErrorResponse,
    });
  }

  if (engine !== null) {
    mountGenerationRoutes(app, engine, { middleware: mutating, secured: apiKey !== null, errorSchema: schemas.ErrorResponse, maxJsonDepth: limits.maxJsonDepth, log, sseKeepAliveMs: options.sseKeepAliveMs });
    const responses = new ResponseStore({ maxBytes: options.maxResponseBytes === undefined ? DEFAULT_BUDGETS.responseBytes : options.maxResponseBytes });
    mountResponsesRoute(app, engine, { middleware: mutating, secured: apiKey !== null, errorSchema: schemas.ErrorResponse, store: responses, maxJsonDepth: limits.maxJsonDepth, log, sseKeepAliveMs: options.sseKeepAliveMs });
    mountTokenizeRoutes(app, engine, { middleware: mutating, secured: apiKey !== null, errorSchema: schemas.ErrorResponse, maxJsonDepth: limits.maxJsonDepth });
  } else if (proxy === null) {
    mountNoModelRoutes(app);
    mountNoModelTokenizeRoutes(app);
  }

  return app;
}

/** /v1/stats `kv_remote`: the remote chunk-cache tier (--kv-remote). */
function remoteKvStatsBody(remote: RemoteKvStats, cache: ChunkCacheStats, url: string) {
  return {
    url,
    up: remote.up,
    capacity_bytes: remote.capacityBytes,
    bytes: remote.bytes,
    hits: cache.hits.remote,
    fetched: cache.remoteFetched,
    lookups: remote.lookups,
    found: remote.found,
    writes: remote.writes,
    writes_skipped: remote.writesSkipped,
    evicted: remote.evicted,
    discarded: remote.discarded,
    authenticated: remote.authenticated,
    unauthenticated: remote.unauthenticated,
    failures: remote.failures,
    skipped: remote.skipped,
  };
}
