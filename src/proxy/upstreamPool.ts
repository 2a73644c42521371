/**
 * The upstreams of the proxy: their health and their routing indexes.
 *
 * Routing: each upstream keeps a LiveContextIndex of the chunk sequences
 * (routingKeys.ts) sent to it — what its prefix cache probably holds. A
 * request goes to the available upstream whose index matches the longest
 * prefix of its lookup sequence, in tokens, when that match covers at least
 * `cacheThreshold` of the sequence and that upstream is not overloaded (at most
 * `balanceSlack` more requests in flight than the least busy one); otherwise,
 * and on ties, to the upstream with the fewest requests in flight (then the
 * fewest requests so far, then the first listed). With the threshold, a short
 * shared prefix (a common system prompt, one popular document) does not pull
 * every request onto one engine.
 *
 * The routing indexes forget a context when the engine reports its request id
 * evicted (/v1/evict), when an engine reports clearing its cache, and under a
 * capacity model: least-recently-used contexts beyond `capacityTokens` per
 * upstream (and the service's TTL). Memory is bounded by `maxBytes`: half of it
 * shared by the upstreams' indexes (each evicts its least recently used
 * contexts beyond its share), half for the routing-key table, which starts
 * afresh (with every index) when it is full. With KV events followed for `mirrors` upstreams,
 * their cache mirrors (engine hash → content key, and the keys held) take half of `maxBytes`,
 * shared evenly, and the indexes and key table the other half.
 *
 * With KV events (issue 13): when every candidate's cache mirror is live and the plan carries the
 * prompt's block keys, a request goes to the upstream of least cost, NVIDIA Dynamo's:
 *   cost = overlapWeight × (prompt blocks not cached there) + blocks of the prompts in flight there
 * (prefill it must do, plus the load it has; lower is better; overlapWeight 8 by default, where
 * Dynamo's is 1: see DEFAULT_OVERLAP_WEIGHT; ties: fewer requests in flight, then the first
 * listed). Otherwise the estimate above.
 *
 * Health: a connection error or timeout takes an upstream out of rotation;
 * it is tried again after a backoff (5 s, doubling up to 60 s by default), and
 * is back in rotation as soon as it answers.
 */
import { UpstreamTokenAccount } from "../accounting/tokenAccounts.ts";
import type { DetectedEngine } from "./engineDetection.ts";
import type { Engine } from "./engineRequestId.ts";
import { LiveContextIndex } from "../online/liveIndex.ts";
import { estimatedStringBytes, KEY_ENTRY_BYTES } from "../online/memoryEstimates.ts";
import { DEFAULT_BUDGETS } from "../online/stateBudgets.ts";
import { requestIdCandidates } from "../online/requestIds.ts";
import { UpstreamCounters, type UpstreamState } from "./proxyStats.ts";
import type { RouteKey, RoutingPlan } from "./routingKeys.ts";
import { parseUpstreamUrl, type UpstreamTarget } from "./upstreamTarget.ts";
import type { UpstreamCacheSync } from "./upstreamCacheSync.ts";
import type { ContentKey } from "./contentKey.ts";
import type { KvEventSubscriberStats } from "./kvEventSubscriber.ts";

export interface PoolOptions {
  /** First delay before an unreachable upstream is tried again (default 5000 ms); doubles per failure. */
  backoffMs?: number;
  /** Longest delay (default 60 000 ms). */
  maxBackoffMs?: number;
  /** Share of a request's lookup tokens an upstream must already hold to be preferred over load (default 0.5). */
  cacheThreshold?: number;
  /** How many more requests in flight than the least busy upstream a cache match may cost (default 32). */
  balanceSlack?: number;
  /** Tokens each routing index models (least recently used contexts forgotten beyond; default 4,000,000). */
  capacityTokens?: number | null;
  /** Contexts unused this long are forgotten (default: never). */
  ttlMs?: number | null;
  /** Estimated heap bytes of the routing indexes, key table and cache mirrors together (default DEFAULT_BUDGETS.routingBytes; null: unlimited). */
  maxBytes?: number | null;
  /** Upstreams whose KV events are followed, each with a cache mirror (default 0). */
  mirrors?: number;
  /** Clock (ms), replaceable in tests. */
  now?: () => number;
  /**
   * How requests are spread (default "auto": by engines' KV events where every candidate has a
   * live mirror, else by the estimate); "estimate" ignores KV events; "round-robin" ignores
   * caches altogether (a baseline for benchmarks).
   */
  routing?: RoutingMode;
  /** Event-driven routing's weight of blocks still to prefill against blocks in flight (default DEFAULT_OVERLAP_WEIGHT, 8; Dynamo's is 1). */
  overlapWeight?: number;
}

export const ROUTING_MODES = ["auto", "estimate", "round-robin"] as const;
export type RoutingMode = (typeof ROUTING_MODES)[number];

export const DEFAULT_ROUTING_CAPACITY_TOKENS = 4_000_000;
/** Distinct routing keys kept before the routing indexes start afresh (bounds memory without a byte budget). */
const MAX_ROUTING_KEYS = 1 << 20;
/** Suffix of the request id under which a chat request's whole message list is recorded. */
const TURN_SUFFIX = "#turn";

export class Upstream implements UpstreamState {
  inFlight = 0;
  /** Prompt blocks of the requests in flight (the load term of event-driven routing). */
  activeBlocks = 0;
  /** The engine's cache kept from its KV events (null: it publishes none). */
  sync: UpstreamCacheSync | null = null;
  /** The subscriber to its KV events (--kv-events), which feeds `sync`. */
  subscriber: { readonly stats: KvEventSubscriberStats } | null = null;
  healthy = true;
  /** How ctxr talks to it: --engine, or what detection found ("openai" until then). */
  engine: Engine = "openai";
  /** What its endpoints said it is (--engine auto), null before it answered. */
  detected: DetectedEngine | null = null;
  /** The latest probe of its /v1/models (upstreamMonitor.ts), null before the first. */
  probe: { serving: boolean; reason: string | null; at: number } | null = null;
  consecutiveFailures = 0;
  retryAt: number | null = null;
  lastError: string | null = null;
  readonly counters = new UpstreamCounters();
  /** It refused the stream_options the proxy adds to streamed requests: they go to it as the client sent them. */
  refusesStreamOptions = false;
  /** Its token account; the proxy gives it one in the unit it counts in. */
  account = new UpstreamTokenAccount();
  index: LiveContextIndex;
  private backoff = 0;
  private evictedBefore = 0;

  constructor(
    readonly target: UpstreamTarget,
    readonly position: number,
    private readonly indexOptions: { capacityTokens: number | null; ttlMs: number | null; maxBytes: number | null },
  ) {
    this.index = new LiveContextIndex(indexOptions);
  }

  get url(): string {
    return this.target.url;
  }

  /** In rotation, or out but due for another try. */
  available(now: number): boolean {
    return this.healthy || (this.retryAt !== null && now >= this.retryAt);
  }

  /** Takes the upstream out of rotation; returns the delay before it is tried again. */
  markDown(reason: string, now: number, initialMs: number, maxMs: number): number {
    this.backoff = this.consecutiveFailures === 0 ? initialMs : Math.min(maxMs, Math.max(initialMs, this.backoff * 2));
    this.consecutiveFailures++;
    this.healthy = false;
    this.retryAt = now + this.backoff;
    this.lastError = reason;
    return this.backoff;
  }

  /** Back in rotation; true when it had been out. */
  markUp(): boolean {
    const wasDown = !this.healthy;
    this.healthy = true;
    this.consecutiveFailures = 0;
    this.retryAt = null;
    this.backoff = 0;
    return wasDown;
  }

  /** Routing contexts this upstream forgot for the byte budget (across index resets). */
  get evictedForBytes(): number {
    return this.evictedBefore + this.index.evictedForByteBudget;
  }

  resetIndex(): void {
    this.evictedBefore += this.index.evictedForByteBudget;
    this.index = new LiveContextIndex(this.indexOptions);
  }
}

export class UpstreamPool {
  readonly upstreams: Upstream[];
  private readonly keyIds = new Map<string, number>();
  private keyBytes = 0;
  private readonly maxKeyBytes: number | null;
  /** The byte budget of the indexes and the key table together (null: unlimited). */
  readonly byteLimit: number | null;
  private readonly options: Required<Omit<PoolOptions, "capacityTokens" | "ttlMs" | "maxBytes" | "routing" | "mirrors">>;
  /** The byte budget of each upstream's cache mirror (null: unlimited). */
  readonly mirrorBytesEach: number | null;
  private internalIds = 0;
  private restarts = 0;
  private readonly routing: RoutingMode;
  private nextInTurn = 0;

  constructor(targets: readonly UpstreamTarget[], options: PoolOptions = {}) {
    if (targets.length === 0) throw new Error("a proxy needs at least one upstream");
    this.options = {
      backoffMs: options.backoffMs ?? 5000,
      maxBackoffMs: options.maxBackoffMs ?? 60_000,
      cacheThreshold: options.cacheThreshold ?? 0.5,
      balanceSlack: options.balanceSlack ?? 32,
      now: options.now ?? Date.now,
      overlapWeight: options.overlapWeight ?? DEFAULT_OVERLAP_WEIGHT,
    };
    const maxBytes = options.maxBytes === undefined ? DEFAULT_BUDGETS.routingBytes : options.maxBytes;
    this.byteLimit = maxBytes;
    const mirrors = options.mirrors ?? 0;
    const routingShare = maxBytes === null ? null : mirrors > 0 ? maxBytes / 2 : maxBytes;
    this.mirrorBytesEach = maxBytes === null || mirrors === 0 ? null : Math.floor(maxBytes / 2 / mirrors);
    this.maxKeyBytes = routingShare === null ? null : routingShare / 2;
    const indexOptions = {
      capacityTokens: options.capacityTokens === undefined ? DEFAULT_ROUTING_CAPACITY_TOKENS : options.capacityTokens,
      ttlMs: options.ttlMs ?? null,
      maxBytes: routingShare === null ? null : Math.floor(routingShare / 2 / targets.length),
    };
    this.upstreams = targets.map((target, i) => new Upstream(target, i, indexOptions));
    this.routing = options.routing ?? "auto";
  }

  now(): number {
    return this.options.now();
  }

  /** Estimated heap bytes of the routing indexes, key table and cache mirrors. */
  get bytes(): number {
    return this.keyBytes + this.upstreams.reduce((total, u) => total + u.index.bytes + (u.sync?.stats.bytes ?? 0), 0);
  }

  /** Routing contexts forgotten for the byte budget (index evictions), and fresh starts of the key table. */
  get budgetEvictions(): { contexts: number; restarts: number } {
    return { contexts: this.upstreams.reduce((total, u) => total + u.evictedForBytes, 0), restarts: this.restarts };
  }

  /** Whether routing compares prefixes at all (only with several upstreams). */
  get routes(): boolean {
    return this.upstreams.length > 1;
  }

  /**
   * How choices among several candidates were made: by the engines' KV events, by the estimate
   * (the routing indexes), in turn; `events_unavailable` counts the estimate's choices made while
   * events are followed but could not decide (a mirror not live, an upstream without events, a
   * prompt without block keys): routing quietly degraded, as operators need to see.
   */
  readonly decisions = { events: 0, estimate: 0, round_robin: 0, events_unavailable: 0 };

  /** The upstream for a request, among those available and not in `exclude`; null when none is. */
  choose(plan: RoutingPlan, exclude: ReadonlySet<Upstream> = new Set()): Upstream | null {
    const now = this.now();
    const candidates = this.upstreams.filter((u) => !exclude.has(u) && u.available(now));
    if (candidates.length <= 1) return candidates[0] ?? null;
    if (this.routing === "round-robin") {
      const upstream = candidates.find((u) => u.position >= this.nextInTurn) ?? candidates[0]!;
      this.nextInTurn = upstream.position + 1;
      this.decisions.round_robin++;
      return upstream;
    }
    if (this.routing === "auto" && candidates.some((u) => u.sync !== null)) {
      if (plan.blockKeys !== undefined && candidates.every((u) => u.sync?.live === true)) {
        this.decisions.events++;
        return leastCost(candidates, plan.blockKeys, this.options.overlapWeight);
      }
      // KV events are followed, but not for every candidate, or a mirror is not live, or the prompt has no keys (no --tokenizer).
      this.decisions.events_unavailable++;
    }
    this.decisions.estimate++;

    const leastLoaded = (pool: Upstream[]) =>
      pool.reduce((best, u) => (u.inFlight < best.inFlight || (u.inFlight === best.inFlight && u.counters.requests < best.counters.requests) ? u : best));
    const total = plan.lookup.reduce((sum, k) => sum + k.tokens, 0);
    if (total === 0) return leastLoaded(candidates);

    const dense = plan.lookup.map((k) => this.keyIds.get(k.key) ?? -1);
    let bestTokens = 0;
    let matching: Upstream[] = [];
    for (const u of candidates) {
      if (u.index.options.ttlMs !== null) u.index.expire(now);
      const tokens = matchedTokens(u.index, dense, plan.lookup);
      if (tokens > bestTokens) {
        bestTokens = tokens;
        matching = [u];
      } else if (tokens === bestTokens && tokens > 0) matching.push(u);
    }
    const idlest = leastLoaded(candidates);
    if (matching.length === 0 || bestTokens < this.options.cacheThreshold * total) return idlest;
    const best = leastLoaded(matching);
    return best.inFlight <= idlest.inFlight + this.options.balanceSlack ? best : idlest;
  }

  /** Records what was sent to `upstream` (its cache now probably holds it). */
  record(upstream: Upstream, plan: RoutingPlan, requestId: string | null): void {
    if (!this.routes || (plan.lookup.length === 0 && plan.turn === null)) return;
    if (this.keyIds.size > MAX_ROUTING_KEYS || (this.maxKeyBytes !== null && this.keyBytes > this.maxKeyBytes)) this.restartIndexes();
    const id = requestId ?? `route-${++this.internalIds}`;
    const now = this.now();
    if (plan.lookup.length > 0) this.insert(upstream, plan.lookup, id, now);
    if (plan.turn !== null) this.insert(upstream, plan.turn, id + TURN_SUFFIX, now);
    upstream.index.evictOverCapacity();
  }

  /** Forgets contexts by the request ids engines report (all upstreams). */
  evict(reportedIds: readonly string[]): void {
    if (!this.routes) return;
    for (const reported of reportedIds) {
      for (const candidate of requestIdCandidates(reported)) {
        for (const u of this.upstreams) {
          u.index.remove(candidate);
          u.index.remove(candidate + TURN_SUFFIX);
        }
      }
    }
  }

  /** The ctxr request ids routed to `upstream` that its routing index still holds. */
  requestIdsOf(upstream: Upstream): string[] {
    const ids: string[] = [];
    for (const [id] of upstream.index.contexts()) if (id.startsWith("ctxr-") && !id.endsWith(TURN_SUFFIX)) ids.push(id);
    return ids;
  }

  /** Forgets everything routed to `upstream` (or to every upstream; then the key table too). */
  clear(upstream?: Upstream): void {
    for (const u of upstream === undefined ? this.upstreams : [upstream]) u.resetIndex();
    if (upstream === undefined) {
      this.keyIds.clear();
      this.keyBytes = 0;
    }
  }

  /** An upstream by its URL as stats show it, or by its 0-based position. */
  find(selector: string | number): Upstream | undefined {
    if (typeof selector === "number") return this.upstreams[selector];
    let wanted = selector.replace(/\/+$/, "");
    try {
      wanted = parseUpstreamUrl(selector).url;
    } catch {
      // Not a URL: compared as given.
    }
    return this.upstreams.find((u) => u.url === wanted);
  }

  markDown(upstream: Upstream, reason: string): number {
    return upstream.markDown(reason, this.now(), this.options.backoffMs, this.options.maxBackoffMs);
  }

  private insert(upstream: Upstream, keys: readonly RouteKey[], id: string, now: number): void {
    const dense = keys.map((k) => this.intern(k.key));
    upstream.index.insert(dense, keys.map((k) => k.tokens), id, now);
  }

  private intern(key: string): number {
    let id = this.keyIds.get(key);
    if (id === undefined) {
      id = this.keyIds.size;
      this.keyIds.set(key, id);
      this.keyBytes += KEY_ENTRY_BYTES + estimatedStringBytes(key);
    }
    return id;
  }

  private restartIndexes(): void {
    this.restarts++;
    this.clear();
  }
}

/**
 * The weight of blocks still to prefill against blocks in flight (--kv-overlap-weight). NVIDIA
 * Dynamo's default is 1; at 1, with prompts of hundreds of blocks and a few requests in flight per
 * engine, one request more in flight outweighs a whole conversation's cached prefix, and requests
 * leave the engine that holds it. Chosen on fake engines with a load model (prefills queued,
 * decode steps shared by the requests in flight: `scripts/bench-routing.ts --engine-load`),
 * weights 0.5–16 against the estimate and round-robin, 4 engines. 8 requests at a time, medians of
 * 9 runs: on multi-turn chat 1 kept 0.51× the estimate's cached tokens and took 16% longer than 8
 * (makespan, same runs); 8 kept 0.997× of them and 16 1.002×, with the same latency and makespan
 * within the noise; on Zipf RAG 8 cached 1.04× the estimate's. 32 at a time (3 runs): on
 * multi-turn 16 took 29% longer than 8 (TTFT p50 +38%; once 1.30 max/min requests per engine), 8
 * kept 0.98× the estimate's cached tokens. So 8: the cache of the estimate, with load still
 * counted.
 */
export const DEFAULT_OVERLAP_WEIGHT = 8;

/** The candidate of least cost (see the module comment); every candidate has a live mirror. */
function leastCost(candidates: readonly Upstream[], keys: readonly ContentKey[], overlapWeight: number): Upstream {
  let best = candidates[0]!;
  let bestCost = Infinity;
  for (const u of candidates) {
    const cost = overlapWeight * (keys.length - u.sync!.cachedBlocks(keys)) + u.activeBlocks;
    if (cost < bestCost || (cost === bestCost && u.inFlight < best.inFlight)) {
      best = u;
      bestCost = cost;
    }
  }
  return best;
}

/** Tokens of the longest prefix of `dense` (block ids; -1 unknown) found as a path from the index's root. */
function matchedTokens(index: LiveContextIndex, dense: readonly number[], keys: readonly RouteKey[]): number {
  let node = index.root;
  let i = 0;
  let tokens = 0;
  while (i < dense.length) {
    const child = node.children.get(dense[i]!);
    if (child === undefined) break;
    const edge = child.edge;
    let j = 0;
    while (j < edge.length && i + j < dense.length && edge[j] === dense[i + j]) tokens += keys[i + j++]!.tokens;
    i += j;
    if (j < edge.length) break;
    node = child;
  }
  return tokens;
}
