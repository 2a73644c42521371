/**
 * The proxy in front of OpenAI-compatible engines: chat, completion and
 * Responses API requests are rewritten (PromptRewriter: documents reordered, deduplicated and
 * annotated), tagged with the request id the engine will report, routed to the
 * upstream most likely to hold their prefix, and relayed back as they stream;
 * every other request to the engine (/v1/*, /tokenize, /health, ...) passes
 * through unchanged.
 *
 * A request the upstream did not accept (unreachable, timed out, error status)
 * is removed from the live index again: the engine does not cache it.
 */
import { UpstreamTokenAccount } from "../accounting/tokenAccounts.ts";
import type { Context } from "hono";
import type { ContextService } from "../online/contextService.ts";
import { RequestError } from "../http/requestError.ts";
import { errorResponse } from "../http/errors.ts";
import { holdIdleTimeout } from "../http/idleTimeout.ts";
import { depthProblem } from "../http/jsonDepth.ts";
import { DEFAULT_LIMITS } from "../http/limits.ts";
import { requestIdField, requestIdHeader, setEngineRequestId, type Engine } from "./engineRequestId.ts";
import { UpstreamMonitor } from "./upstreamMonitor.ts";
import { relayBody, relayedResponseHeaders, sendToUpstream, upstreamRequestHeaders } from "./forwarder.ts";
import { DEFAULT_SSE_KEEP_ALIVE_MS } from "../http/sseKeepAlive.ts";
import type { HistoryStore } from "../online/historyStore.ts";
import { PromptRewriter, type RewriteResult } from "./promptRewriter.ts";
import { requestShapeProblem } from "./requestShape.ts";
import { responsesChatView } from "./responsesView.ts";
import { renderProxyStateMetrics, renderUpstreamMetrics, upstreamStats, type ProxyState, type UpstreamStats } from "./proxyStats.ts";
import { undecodedEncoding } from "./answerDecoding.ts";
import { redactText, usableSecrets } from "./redact.ts";
import { chatRoutingPlan, completionRoutingPlan, EMPTY_PLAN, type RoutingPlan } from "./routingKeys.ts";
import { UpstreamPool, type RoutingMode, type Upstream } from "./upstreamPool.ts";
import { parseUpstreamUrl, upstreamRequestUrl } from "./upstreamTarget.ts";
import { mirrorBlockKeys } from "./engineCacheMirror.ts";
import type { ContentKey } from "./contentKey.ts";
import type { EnginePromptTokenizer } from "./enginePromptTokens.ts";
import { UpstreamCacheSync } from "./upstreamCacheSync.ts";
import { refusesStreamOptions, withUsageRequested } from "./streamUsage.ts";
import { firstTokenReuse } from "./firstTokenTimes.ts";
import type { KvEventSubscriberStats } from "./kvEventSubscriber.ts";

export interface ProxyOptions {
  /** Upstream base URLs (at least one). */
  upstreams: string[];
  /** Sent as `Authorization: Bearer KEY` to every upstream. */
  upstreamKey?: string | null;
  /** Which request-id field to set (default "openai": none); "auto": each upstream's, detected from its endpoints (upstreamMonitor.ts). */
  engine?: Engine | "auto";
  /** How often each upstream's /v1/models (and, with engine "auto", its engine) is checked (default null: never; readiness then follows routing failures only). */
  probeIntervalMs?: number | null;
  /** One probe request's time limit (default 2000 ms). */
  probeTimeoutMs?: number;
  /** Whose KV events are followed (--kv-events), by upstream position: said in the detection line. */
  followedKvEvents?: readonly boolean[];
  /** Time allowed until an upstream's response headers arrive (default 600 000 ms). */
  timeoutMs?: number;
  /** Template of one `documents` entry ({id}, {title}, {text}); default an XML element. */
  documentTemplate?: string;
  /** First delay before an unreachable upstream is tried again (default 5000 ms), doubling up to maxBackoffMs (60 000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Share of a request's prefix an upstream must hold to win over load (default 0.5). */
  cacheThreshold?: number;
  /** Tokens each upstream's routing index models (default: the service's capacity, else 4,000,000). */
  routingCapacityTokens?: number | null;
  /** Estimated heap bytes of the remembered conversation histories (default DEFAULT_BUDGETS.historyBytes; null: unlimited). */
  maxHistoryBytes?: number | null;
  /** The remembered histories when they are shared with other instances (--state); else the proxy keeps its own. */
  histories?: HistoryStore;
  /** Estimated heap bytes of the routing indexes and the engines' cache mirrors (default DEFAULT_BUDGETS.routingBytes; null: unlimited). */
  maxRoutingBytes?: number | null;
  /** How many upstreams' KV events are followed (--kv-events): their cache mirrors share half of maxRoutingBytes. */
  mirroredUpstreams?: number;
  /** Answers relayed at once, all upstreams together (default 128: each unread answer can hold ~5 MB in the runtime's fetch buffers); beyond, 429 with Retry-After. */
  maxUpstreamRequests?: number;
  /** A client that reads nothing of an answer for this long is cut off (default 30 000 ms; null: never). */
  clientStallMs?: number | null;
  /** A relayed event stream whose upstream sent nothing for this long gets a keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS; null: never). */
  sseKeepAliveMs?: number | null;
  /** Tokenizes forwarded prompts as the engines do (--tokenizer DIR), for routing on their KV events. */
  promptTokenizer?: EnginePromptTokenizer | null;
  /** The engines' KV block size until their events tell it (--block-size; default 16). */
  blockSize?: number;
  /** How requests are spread over the upstreams (--routing; default "auto"). */
  routing?: RoutingMode;
  /** Event-driven routing's weight of blocks to prefill against blocks in flight (--kv-overlap-weight; default DEFAULT_OVERLAP_WEIGHT, 8). */
  overlapWeight?: number;
}

/** vLLM's and SGLang's default KV block size. */
export const DEFAULT_ENGINE_BLOCK_SIZE = 16;

export const DEFAULT_MAX_UPSTREAM_REQUESTS = 128;
export const DEFAULT_CLIENT_STALL_MS = 30_000;

export const DEFAULT_UPSTREAM_TIMEOUT_MS = 600_000;

type Kind = "chat" | "completion" | "responses";

interface Dispatch {
  method: string;
  /** The engine's path (the client's, or the rest of an /engine/ path). */
  path: string;
  body: Uint8Array | string | null;
  /**
   * The body for the engine of the upstream it goes to (instead of `body`): rewritten, and with
   * `askUsage` asking for the streamed answer's usage (streamUsage.ts).
   */
  bodyFor?: (engine: Engine, askUsage: boolean) => Uint8Array | string;
  /** A streamed request whose client did not ask for usage: the proxy asks for it (unless the upstream refuses) and hides it. */
  asksUsage?: boolean;
  /** Rewritten routes: decompressed, scanned for usage; passthrough: bytes as they come unless there are secrets to redact. */
  rewrite: RewriteResult | null;
  plan: RoutingPlan;
}

/**
 * The request body, or null when it is larger than the limit: by its
 * Content-Length (nothing read), or, chunked, as soon as the bytes read pass
 * it (Bun's own cap is far above the limit, so this is what bounds memory).
 */
async function readBody(c: Context, maxBytes: number): Promise<Uint8Array | null> {
  const length = c.req.header("content-length");
  if (length !== undefined) {
    if (Number(length) > maxBytes) return null;
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    return bytes.length > maxBytes ? null : bytes;
  }
  const stream = c.req.raw.body;
  if (stream === null) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const part of stream) {
    size += part.length;
    // Leaving the loop cancels the rest of the stream.
    if (size > maxBytes) return null;
    parts.push(part);
  }
  if (parts.length === 1) return parts[0]!;
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return bytes;
}

/** The request's path as sent (Hono's c.req.path is percent-decoded). */
export function rawPath(c: Context): string {
  return new URL(c.req.url).pathname;
}

function tooLarge(c: Context, maxBytes: number): Response {
  return errorResponse(c, 413, `body: request body larger than ${maxBytes} bytes`, "body");
}

export class ContextProxy {
  readonly pool: UpstreamPool;
  readonly rewriter: PromptRewriter;
  /** The --engine given: one for every upstream, or "auto" (each upstream's own, Upstream.engine). */
  readonly engine: Engine | "auto";
  /** Probes the upstreams (null: no probes). */
  readonly monitor: UpstreamMonitor | null;
  private readonly secrets: string[];
  private readonly timeoutMs: number;
  private readonly upstreamKey: string | null;
  private readonly log: (text: string) => void;
  private readonly decoder = new TextDecoder();
  private readonly maxUpstreamRequests: number;
  private readonly clientStallMs: number | null;
  private readonly sseKeepAliveMs: number | null;
  private refusedBusy = 0;
  /** Tokenizes forwarded prompts as the engines do (--tokenizer), for their cache mirrors. */
  private readonly promptTokenizer: EnginePromptTokenizer | null;
  /** The engines' block size when their events have not told it yet (--block-size). */
  private readonly blockSize: number;

  constructor(
    private readonly service: ContextService,
    options: ProxyOptions,
    /** Whether clients authenticate to ctxr (their credentials are then not forwarded). */
    private readonly clientKeyRequired: boolean,
    log: (text: string) => void,
  ) {
    const targets = options.upstreams.map(parseUpstreamUrl);
    this.upstreamKey = options.upstreamKey ? options.upstreamKey : null;
    this.secrets = usableSecrets([this.upstreamKey, ...targets.flatMap((t) => t.secrets)]);
    this.log = (text) => log(redactText(text, this.secrets));
    this.engine = options.engine ?? "openai";
    this.maxUpstreamRequests = options.maxUpstreamRequests ?? DEFAULT_MAX_UPSTREAM_REQUESTS;
    this.clientStallMs = options.clientStallMs === undefined ? DEFAULT_CLIENT_STALL_MS : options.clientStallMs;
    this.sseKeepAliveMs = options.sseKeepAliveMs === undefined ? DEFAULT_SSE_KEEP_ALIVE_MS : options.sseKeepAliveMs;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS;
    const stats = service.stats();
    this.pool = new UpstreamPool(targets, {
      backoffMs: options.backoffMs,
      maxBackoffMs: options.maxBackoffMs,
      cacheThreshold: options.cacheThreshold,
      capacityTokens: options.routingCapacityTokens === undefined ? (stats.capacity_tokens ?? undefined) : options.routingCapacityTokens,
      ttlMs: stats.ttl_ms,
      maxBytes: options.maxRoutingBytes,
      mirrors: options.mirroredUpstreams ?? 0,
      ...(options.routing !== undefined ? { routing: options.routing } : {}),
      ...(options.overlapWeight !== undefined ? { overlapWeight: options.overlapWeight } : {}),
    });
    this.promptTokenizer = options.promptTokenizer ?? null;
    // Received and forwarded prompts are counted in one unit: the served model's tokens where its tokenizer is known.
    const tokenizer = this.promptTokenizer?.tokenizer ?? null;
    const countTokens = tokenizer === null ? undefined : (text: string) => tokenizer.encode(text).length;
    for (const upstream of this.pool.upstreams) upstream.account = new UpstreamTokenAccount(tokenizer === null ? "estimate" : "tokenizer");
    this.rewriter = new PromptRewriter(service, { documentTemplate: options.documentTemplate, maxHistoryBytes: options.maxHistoryBytes, histories: options.histories, countTokens });
    this.blockSize = options.blockSize ?? DEFAULT_ENGINE_BLOCK_SIZE;
    if (this.engine !== "auto") for (const upstream of this.pool.upstreams) upstream.engine = this.engine as Engine;
    const probeIntervalMs = options.probeIntervalMs ?? null;
    this.monitor =
      probeIntervalMs === null && this.engine !== "auto"
        ? null
        : new UpstreamMonitor(this.pool, {
            intervalMs: probeIntervalMs,
            detect: this.engine === "auto",
            authorizationFor: (upstream) => this.authorizationFor(upstream),
            followsKvEvents: (position) => options.followedKvEvents?.[position] === true,
            ...(options.probeTimeoutMs === undefined ? {} : { timeoutMs: options.probeTimeoutMs }),
            log: this.log,
          });
  }

  /**
   * The consumer of the KV events of the upstream at `position` (0-based, as listed): its cache
   * mirror routes requests and evicts contexts the engine dropped.
   */
  cacheSync(position: number): UpstreamCacheSync {
    const upstream = this.pool.upstreams[position];
    if (upstream === undefined) throw new RangeError(`ContextProxy.cacheSync: no upstream ${position}`);
    if (upstream.sync === null) {
      upstream.sync = new UpstreamCacheSync((ids) => void this.evictDropped(ids));
      upstream.sync.maxMirrorBytes = this.pool.mirrorBytesEach;
    }
    return upstream.sync;
  }

  /** Feeds `subscriber`'s KV events to the cache mirror of the upstream at `position` (its counters join the upstream's stats). */
  followKvEvents(position: number, subscriber: { start(sync: UpstreamCacheSync, limits?: { maxMirrorBytes: number | null }): void; readonly stats: KvEventSubscriberStats }): void {
    const sync = this.cacheSync(position);
    this.pool.upstreams[position]!.subscriber = subscriber;
    subscriber.start(sync, { maxMirrorBytes: this.pool.mirrorBytesEach });
  }

  /** Contexts whose blocks an engine dropped leave the live index (and routing). */
  private async evictDropped(requestIds: string[]): Promise<void> {
    this.pool.evict(requestIds);
    try {
      await this.service.evict(requestIds);
    } catch (error) {
      this.log(`ctxr serve: evicting contexts an engine dropped failed: ${(error as Error).message}\n`);
    }
  }

  /** The forwarded prompt's block keys for the engines' cache mirrors (none without --tokenizer or KV events). */
  private promptBlockKeys(kind: Kind, forwarded: Record<string, unknown>): ContentKey[] | undefined {
    if (this.promptTokenizer === null) return undefined;
    const synced = this.pool.upstreams.filter((u) => u.sync !== null);
    if (synced.length === 0) return undefined;
    const ids = this.promptTokenizer.promptIds(kind === "completion" ? "completions" : "chat", forwarded);
    if (ids === null) return undefined;
    const blockSize = synced.find((u) => u.sync!.blockSize !== null)?.sync!.blockSize ?? this.blockSize;
    return mirrorBlockKeys(ids, blockSize);
  }

  /** The upstreams as stats name them (no credentials). */
  get upstreamUrls(): string[] {
    return this.pool.upstreams.map((u) => u.url);
  }

  /** POST /v1/chat/completions, /v1/completions and /v1/responses: rewrite, tag, route, relay. */
  async generate(c: Context, kind: Kind, maxBodyBytes: number, maxJsonDepth = DEFAULT_LIMITS.maxJsonDepth): Promise<Response> {
    const bytes = await readBody(c, maxBodyBytes);
    if (bytes === null) return tooLarge(c, maxBodyBytes);
    let body: unknown;
    try {
      body = JSON.parse(this.decoder.decode(bytes));
    } catch {
      return errorResponse(c, 400, "body: invalid JSON", "body", undefined, "invalid_json");
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) return errorResponse(c, 400, "body: expected a JSON object", "body");
    // Before anything recursive (hashing, JSON.stringify) sees it, and before the rewriter reads the messages.
    const problem = depthProblem(body, maxJsonDepth) ?? requestShapeProblem(kind, body as Record<string, unknown>);
    if (problem !== null) return errorResponse(c, 400, problem.message, problem.field);
    const received = body as Record<string, unknown>;
    await this.service.catchUp();
    // A Responses request is rewritten as the chat request it amounts to, then put back in its own shape.
    const view = kind === "responses" ? responsesChatView(received) : null;
    const result = view !== null ? await this.rewriter.rewriteChat(view.chat) : kind === "chat" ? await this.rewriter.rewriteChat(received) : await this.rewriter.rewriteCompletion(received);
    const asChat = result.body;
    if (view !== null) result.body = view.restore(asChat);
    // Nothing to change: the client's bytes go out as they came.
    const unchanged = result.documents === 0 && result.requestId === null && !("ctxr" in received) && !("documents" in received);
    const estimate = !this.pool.routes ? EMPTY_PLAN : kind === "completion" ? completionRoutingPlan(result) : chatRoutingPlan(asChat, result);
    const blockKeys = this.promptBlockKeys(kind, asChat);
    const plan = blockKeys === undefined ? estimate : { ...estimate, blockKeys };
    // A streamed answer's usage is asked for even when the client did not (the accounting needs it); Responses streams always end with theirs.
    const asksUsage = kind !== "responses" && withUsageRequested(received) !== null;
    // The request id goes in the field of the engine the request is routed to (engines differ with --engine auto).
    const bodies = new Map<string, string>();
    const bodyFor = (engine: Engine, askUsage: boolean): Uint8Array | string => {
      if (unchanged && !askUsage) return bytes;
      const field = requestIdField(engine) ?? "";
      const key = `${field}|${askUsage}`;
      let text = bodies.get(key);
      if (text === undefined) {
        const base = unchanged ? received : result.body;
        const sent = askUsage ? (withUsageRequested(base) ?? { ...base }) : field === "" ? base : { ...base };
        setEngineRequestId(sent, engine, result.requestId);
        text = JSON.stringify(sent);
        bodies.set(key, text);
      }
      return text;
    };
    return this.dispatch(c, { method: "POST", path: rawPath(c), body: unchanged ? bytes : null, bodyFor, asksUsage, rewrite: result, plan });
  }

  /** Any other request: method, path (default the client's), query, headers and body as they came. */
  async passthrough(c: Context, maxBodyBytes: number, path = rawPath(c)): Promise<Response> {
    const method = c.req.method;
    const body = method === "GET" || method === "HEAD" ? null : await readBody(c, maxBodyBytes);
    if (body === null && method !== "GET" && method !== "HEAD") return tooLarge(c, maxBodyBytes);
    return this.dispatch(c, { method, path, body, rewrite: null, plan: EMPTY_PLAN });
  }

  stats(): UpstreamStats[] {
    const now = this.pool.now();
    return this.pool.upstreams.map((u) => upstreamStats(u, now));
  }

  metrics(): string {
    return renderUpstreamMetrics(this.pool.upstreams) + renderProxyStateMetrics(this.state());
  }

  /** The proxy's own state against its byte budgets (/v1/stats "proxy", /metrics). */
  state(): ProxyState {
    const histories = this.rewriter.histories;
    const evictions = this.pool.budgetEvictions;
    return {
      history_conversations: histories.size,
      history_bytes: histories.bytes,
      history_bytes_limit: histories.byteLimit,
      history_budget_evicted_conversations: histories.evictedForByteBudget,
      routing_bytes: this.pool.bytes,
      routing_bytes_limit: this.pool.byteLimit,
      routing_budget_evicted_contexts: evictions.contexts,
      routing_budget_evicted_mirror_blocks: this.pool.upstreams.reduce((total, u) => total + (u.sync?.stats.evictedForBytes ?? 0), 0),
      routing_key_table_restarts: evictions.restarts,
      routing_decisions: { ...this.pool.decisions },
      relaying: this.pool.upstreams.reduce((total, u) => total + u.inFlight, 0),
      relaying_limit: this.maxUpstreamRequests,
      refused_busy: this.refusedBusy,
    };
  }

  /** The engine reported these request ids evicted: forget them for routing too. */
  forgetRouted(requestIds: readonly string[]): void {
    this.pool.evict(requestIds);
  }

  /**
   * An engine cleared its whole cache: removes from the live index every
   * context routed to it (`selector`: its URL or 0-based position; without
   * one, or with a single upstream, every context).
   */
  async clearEngine(selector: string | number | undefined, field: string): Promise<number> {
    const upstream = selector === undefined ? undefined : this.pool.find(selector);
    if (selector !== undefined && upstream === undefined) {
      throw new RequestError(field, `no upstream ${JSON.stringify(selector)} (upstreams: ${this.upstreamUrls.join(", ")})`);
    }
    if (upstream === undefined || this.pool.upstreams.length === 1) {
      this.pool.clear();
      return (await this.service.evictAll()).evicted;
    }
    const ids = this.pool.requestIdsOf(upstream);
    this.pool.clear(upstream);
    return (await this.service.evict(ids)).evicted;
  }

  private authorizationFor(upstream: Upstream): string | null {
    if (this.upstreamKey !== null) return `Bearer ${this.upstreamKey}`;
    return upstream.target.basicAuthorization;
  }

  private async dispatch(c: Context, request: Dispatch): Promise<Response> {
    const url = new URL(c.req.url);
    const query = url.search.replace(/^\?/, "");
    const requestId = request.rewrite?.requestId ?? null;
    const tried = new Set<Upstream>();
    // Checked where the count goes up, so clients arriving together cannot all slip past the limit.
    const relaying = this.pool.upstreams.reduce((total, u) => total + u.inFlight, 0);
    if (relaying >= this.maxUpstreamRequests) {
      this.refusedBusy++;
      await this.undeliverable(request.rewrite);
      return errorResponse(c, 429, `busy: ${relaying} answers are being relayed, the server's limit (--max-upstream-requests ${this.maxUpstreamRequests}); retry shortly`, "", { "Retry-After": "1" });
    }
    for (;;) {
      const upstream = this.pool.choose(request.plan, tried);
      if (upstream === null) {
        await this.undeliverable(request.rewrite);
        const down = this.pool.upstreams.filter((u) => !u.healthy).length;
        return errorResponse(c, 502, `no upstream available: ${down} of ${this.pool.upstreams.length} out of rotation after failures${tried.size > 0 ? `, ${tried.size} tried now` : ""}`);
      }
      tried.add(upstream);
      const idHeader = requestIdHeader(upstream.engine);
      const override: [string, string][] = idHeader === null || requestId === null ? [] : [[idHeader, requestId]];
      const askUsage = request.asksUsage === true && !upstream.refusesStreamOptions;
      const sentBody = request.bodyFor === undefined ? request.body : request.bodyFor(upstream.engine, askUsage);
      upstream.inFlight++;
      upstream.counters.requests++;
      const keys = request.plan.blockKeys;
      const blocks = keys?.length ?? 0;
      upstream.activeBlocks += blocks;
      // What the mirror shows cached when the request leaves: once the engine has taken it in, its
      // events make the whole prompt look cached.
      const predictedTokens = upstream.sync !== null && keys !== undefined ? upstream.sync.cachedBlocks(keys) * (upstream.sync.blockSize ?? this.blockSize) : 0;
      const settle = () => {
        upstream.inFlight--;
        upstream.activeBlocks -= blocks;
      };
      // An answer is read decoded where it is scanned: for usage (rewritten routes), or for secrets to
      // redact (an encoded answer would carry an echoed key past the redactor). Without either, the
      // client's Accept-Encoding goes upstream and the bytes come back as encoded.
      const decode = request.rewrite !== null || this.secrets.length > 0;
      // Until the upstream's headers come (bounded by timeoutMs), nothing is written to the client:
      // a request without a body would otherwise be cut by the server's idle timeout.
      const releaseIdleTimeout = holdIdleTimeout(c.req.raw);
      const sentAt = performance.now();
      const outcome = await sendToUpstream(upstreamRequestUrl(upstream.target, request.path, query), {
        method: request.method,
        headers: upstreamRequestHeaders(c.req.raw.headers, {
          dropClientCredentials: this.clientKeyRequired,
          authorization: this.authorizationFor(upstream),
          acceptEncoding: decode ? "identity" : undefined,
          defaultContentType: request.rewrite === null ? undefined : "application/json",
          override,
        }),
        body: sentBody,
        decompress: decode,
        timeoutMs: this.timeoutMs,
        clientSignal: c.req.raw.signal,
      });
      releaseIdleTimeout();

      if (!outcome.ok) {
        settle();
        upstream.counters.errors++;
        if (outcome.failure === "aborted") {
          await this.undeliverable(request.rewrite);
          return new Response(null, { status: 499 });
        }
        const delay = this.pool.markDown(upstream, outcome.message);
        this.log(`ctxr serve: upstream ${upstream.url} ${outcome.failure === "timeout" ? "timed out" : "unreachable"} (${outcome.message}); out of rotation for ${delay / 1000} s\n`);
        if (outcome.failure === "timeout") {
          // The upstream may still be working on it: not sent again elsewhere.
          await this.undeliverable(request.rewrite);
          return errorResponse(c, 504, `upstream ${upstream.url} sent no answer within ${this.timeoutMs} ms`);
        }
        continue;
      }

      if (upstream.markUp()) this.log(`ctxr serve: upstream ${upstream.url} is back in rotation\n`);
      let response = outcome.response;
      // Asked for identity, the upstream may still answer encoded: fetch decodes the usual codings; any other cannot be scanned.
      const undecoded = decode ? undecodedEncoding(response.headers.get("content-encoding")) : null;
      if (undecoded !== null && this.secrets.length > 0) {
        settle();
        upstream.counters.errors++;
        await response.body?.cancel().catch(() => undefined);
        await this.undeliverable(request.rewrite);
        const message = `upstream ${upstream.url} answered in Content-Encoding ${JSON.stringify(undecoded)}, which ctxr cannot decode to keep the upstream credentials out of it; the answer was not relayed`;
        this.log(`ctxr serve: ${message}\n`);
        return errorResponse(c, 502, redactText(message, this.secrets));
      }
      const decoded = decode && undecoded === null;
      if (askUsage && (response.status === 400 || response.status === 422)) {
        const text = await response.text();
        if (refusesStreamOptions(response.status, text)) {
          // Remembered: every later request goes to this upstream as its client sent it, and this one again now.
          settle();
          upstream.refusesStreamOptions = true;
          this.log(`ctxr serve: upstream ${upstream.url} refused stream_options (${response.status}); streamed requests now go to it as clients send them, and their token usage is counted only when a client asks for it\n`);
          tried.delete(upstream);
          continue;
        }
        response = new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
      }
      const accepted = response.status < 400;
      const rewrite = request.rewrite;
      if (!accepted) {
        upstream.counters.errors++;
        await this.undeliverable(rewrite);
      } else if (rewrite !== null) {
        const counters = upstream.counters;
        upstream.account.recordForwarded({
          receivedTokens: rewrite.receivedTokens,
          forwardedTokens: rewrite.forwardedTokens,
          estimatedCachedTokens: rewrite.estimatedCachedTokens,
          inputOrderCachedTokens: rewrite.inputOrderCachedTokens,
        });
        counters.documents += rewrite.documents;
        counters.documentsDeduplicated += rewrite.deduplicated;
        this.pool.record(upstream, request.plan, rewrite.requestId);
        if (upstream.sync !== null && keys !== undefined) {
          counters.mirroredCachedTokens += predictedTokens;
          if (rewrite.requestId !== null) upstream.sync.track(rewrite.requestId, keys);
        }
        // The index changes were journaled while the engine worked: on disk before the answer starts.
        // The turn's conversation record follows within one group commit, not awaited, unless the
        // state is shared (--state): the next turn may reach another instance the moment this
        // answer ends, so the record must be in Redis before it starts.
        const shared = this.service.sharedWithOtherInstances;
        if (shared) rewrite.commit();
        await rewrite.durable();
        if (!shared) rewrite.commit();
      }
      const eventStream = (response.headers.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream");
      const scanned = accepted && rewrite !== null && decoded;
      let firstTokenAt: number | null = null;
      const body = relayBody(response.body, {
        scan: scanned ? (eventStream ? "sse" : "json") : null,
        secrets: this.secrets,
        stallMs: this.clientStallMs,
        sse: eventStream ? { keepAliveMs: this.sseKeepAliveMs } : null,
        hideUsage: scanned && eventStream && askUsage,
        ...(scanned && eventStream ? { onFirstToken: () => void (firstTokenAt = performance.now()) } : {}),
        onDone: ({ usage, error }) => {
          settle();
          // Only answers to rewritten requests are scanned for usage: the same requests recordForwarded counted.
          if (usage !== null) upstream.account.recordUsage(usage);
          if (firstTokenAt !== null) upstream.counters.firstToken.record((firstTokenAt - sentAt) / 1000, firstTokenReuse(usage));
          if (error) this.log(`ctxr serve: upstream ${upstream.url}: answer broke off: ${error instanceof Error ? error.message : String(error)}\n`);
        },
      });
      return new Response(body, {
        status: response.status,
        statusText: redactText(response.statusText, this.secrets),
        headers: relayedResponseHeaders(response.headers, { decompressed: decoded, secrets: this.secrets }),
      });
    }
  }

  /** A rewritten request no engine accepted: its context is not cached anywhere. */
  private async undeliverable(rewrite: RewriteResult | null): Promise<void> {
    if (rewrite?.requestId) await this.service.evict([rewrite.requestId]);
  }
}
