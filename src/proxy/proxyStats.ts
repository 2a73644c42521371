/**
 * Per-upstream counters of the proxy, as /v1/stats reports them and as
 * Prometheus series (label `upstream`: the URL without credentials).
 * Documents are counted for requests the upstream accepted (status below 400).
 * The token figures are the upstream's token account (accounting/tokenAccounts.ts),
 * whose Prometheus series savedTokensMetrics.ts writes.
 */
import type { UpstreamTokenAccount } from "../accounting/tokenAccounts.ts";
import { metricFamily } from "../http/prometheus.ts";
import { FirstTokenTimes, type FirstTokenReuse, type FirstTokenTotals } from "./firstTokenTimes.ts";
import type { CacheSyncStats, UpstreamCacheSync } from "./upstreamCacheSync.ts";
import type { KvEventSubscriberStats } from "./kvEventSubscriber.ts";

export class UpstreamCounters {
  /** Requests sent (rewritten and passed through), whatever the answer. */
  requests = 0;
  /** Requests that failed: connection errors, timeouts, error statuses (>= 400). */
  errors = 0;
  documents = 0;
  documentsDeduplicated = 0;
  /** Prompt tokens the engine's cache mirror (KV events) showed cached where the request went. */
  mirroredCachedTokens = 0;
  /** Time to first token of the streamed answers, by reuse. */
  readonly firstToken = new FirstTokenTimes();
}

export interface UpstreamState {
  readonly url: string;
  readonly healthy: boolean;
  readonly inFlight: number;
  readonly consecutiveFailures: number;
  /** When an unhealthy upstream is tried again (ms since epoch), else null. */
  readonly retryAt: number | null;
  readonly lastError: string | null;
  readonly counters: UpstreamCounters;
  /** Prompt tokens received, forwarded, estimated and reported cached (what ctxr saved). */
  readonly account: UpstreamTokenAccount;
  /** The engine's cache kept from its KV events (null: none). */
  readonly sync: UpstreamCacheSync | null;
  /** The subscriber that feeds it (--kv-events). */
  readonly subscriber?: { readonly stats: KvEventSubscriberStats } | null;
}

/** The KV events subscriber's counters, /v1/stats' kv_events.subscriber. */
export interface SubscriberStats {
  endpoint: string;
  replay_endpoint: string | null;
  connections: number;
  batches: number;
  events: number;
  replayed_batches: number;
  gaps: number;
  replays: number;
  recovered_gaps: number;
  resyncs: number;
  resync_reasons: Record<string, number>;
  duplicates: number;
  malformed: Record<string, number>;
  unknown_events: number;
  last_seq: number | string | null;
  layout: string | null;
}

function subscriberStats(s: KvEventSubscriberStats): SubscriberStats {
  return {
    endpoint: s.endpoint,
    replay_endpoint: s.replayEndpoint,
    connections: s.connections,
    batches: s.batches,
    events: s.events,
    replayed_batches: s.replayedBatches,
    gaps: s.gaps,
    replays: s.replays,
    recovered_gaps: s.recoveredGaps,
    resyncs: s.resyncs,
    resync_reasons: s.resyncReasons,
    duplicates: s.duplicates,
    malformed: s.malformed,
    unknown_events: s.unknownEvents,
    last_seq: s.lastSeq,
    layout: s.layout,
  };
}

export interface UpstreamStats {
  url: string;
  healthy: boolean;
  in_flight: number;
  requests: number;
  errors: number;
  prompt_tokens_received: number;
  prompt_tokens_forwarded: number;
  documents: number;
  documents_deduplicated: number;
  estimated_cached_tokens: number;
  cached_tokens: number;
  cached_tokens_reports: number;
  first_token: Record<FirstTokenReuse, FirstTokenTotals>;
  consecutive_failures: number;
  retry_in_ms: number | null;
  last_error: string | null;
  /** With --kv-events: the mirror of the engine's cache and what it predicted. */
  kv_events?: CacheSyncStats & { predicted_cached_tokens: number; subscriber?: SubscriberStats };
}

export function upstreamStats(state: UpstreamState, now: number): UpstreamStats {
  const c = state.counters;
  const a = state.account;
  return {
    url: state.url,
    healthy: state.healthy,
    in_flight: state.inFlight,
    requests: c.requests,
    errors: c.errors,
    prompt_tokens_received: a.promptTokensReceived,
    prompt_tokens_forwarded: a.promptTokensForwarded,
    documents: c.documents,
    documents_deduplicated: c.documentsDeduplicated,
    estimated_cached_tokens: a.estimatedCachedTokens,
    cached_tokens: a.cachedTokens,
    cached_tokens_reports: a.cachedTokensReports,
    first_token: c.firstToken.snapshot(),
    consecutive_failures: state.consecutiveFailures,
    retry_in_ms: state.retryAt === null ? null : Math.max(0, state.retryAt - now),
    last_error: state.lastError,
    ...(state.sync !== null
      ? { kv_events: { ...state.sync.stats, predicted_cached_tokens: c.mirroredCachedTokens, ...(state.subscriber ? { subscriber: subscriberStats(state.subscriber.stats) } : {}) } }
      : {}),
  };
}

const SERIES: [name: string, type: "counter" | "gauge", help: string, value: (s: UpstreamState) => number][] = [
  ["ctxr_upstream_healthy", "gauge", "1 while the upstream is in rotation, 0 while it is out after a failure.", (s) => (s.healthy ? 1 : 0)],
  ["ctxr_upstream_in_flight", "gauge", "Requests the upstream is answering now.", (s) => s.inFlight],
  ["ctxr_upstream_requests_total", "counter", "Requests sent to the upstream.", (s) => s.counters.requests],
  ["ctxr_upstream_errors_total", "counter", "Requests to the upstream that failed (connection, timeout, status >= 400).", (s) => s.counters.errors],
  ["ctxr_upstream_documents_total", "counter", "Documents found in the requests' new turns.", (s) => s.counters.documents],
  ["ctxr_upstream_documents_deduplicated_total", "counter", "Documents replaced by a note pointing to an earlier turn.", (s) => s.counters.documentsDeduplicated],
];

/** Series of upstreams that publish KV events. */
const SYNC_SERIES: [name: string, type: "counter" | "gauge", help: string, value: (s: UpstreamState & { sync: UpstreamCacheSync }) => number][] = [
  ["ctxr_upstream_kv_events_connected", "gauge", "1 while the KV-event subscriber is connected to the engine's publisher.", (s) => (s.sync.live ? 1 : 0)],
  ["ctxr_upstream_mirrored_blocks", "gauge", "Blocks of the engine's prefix cache, as its KV events tell.", (s) => s.sync.stats.blocks],
  ["ctxr_upstream_mirrored_tokens", "gauge", "Tokens of the engine's prefix cache, as its KV events tell.", (s) => s.sync.stats.tokens],
  ["ctxr_upstream_mirror_predicted_cached_tokens_total", "counter", "Prompt tokens the mirror showed cached where requests went (compare ctxr_upstream_cached_tokens_total).", (s) => s.counters.mirroredCachedTokens],
  ["ctxr_upstream_kv_event_lag_seconds", "gauge", "Arrival time minus the engine's timestamp of the last live batch.", (s) => (s.sync.stats.lagMs ?? 0) / 1000],
  ["ctxr_upstream_mirror_contexts_evicted_total", "counter", "Contexts that left the live index because the engine dropped one of their blocks.", (s) => s.sync.stats.contextsEvicted],
];

/** Series of the KV events subscribers (--kv-events). */
const SUBSCRIBER_SERIES: [name: string, type: "counter", help: string, value: (s: KvEventSubscriberStats) => number][] = [
  ["ctxr_upstream_kv_event_batches_total", "counter", "KV event batches applied, live and replayed.", (s) => s.batches],
  ["ctxr_upstream_kv_events_total", "counter", "KV events applied (BlockStored, BlockRemoved, AllBlocksCleared).", (s) => s.events],
  ["ctxr_upstream_kv_event_gaps_total", "counter", "Gaps seen in the KV events' sequence numbers.", (s) => s.gaps],
  ["ctxr_upstream_kv_event_replays_total", "counter", "Replay requests sent to the engine's replay socket.", (s) => s.replays],
  ["ctxr_upstream_kv_event_resyncs_total", "counter", "Times the engine's cache could no longer be followed and its mirror was dropped (gap, restart, reconnect, malformed batch).", (s) => s.resyncs],
  ["ctxr_upstream_kv_event_malformed_total", "counter", "KV event messages that could not be used (every kind).", (s) => Object.values(s.malformed).reduce((sum, n) => sum + (n ?? 0), 0)],
];

export function renderUpstreamMetrics(states: readonly UpstreamState[]): string {
  let out = "";
  for (const [name, type, help, value] of SERIES) {
    out += metricFamily(name, type, help, states.map((state) => ({ labels: { upstream: state.url }, value: value(state) })));
  }
  const byReuse = (value: (totals: FirstTokenTotals) => number) =>
    states.flatMap((state) => (["reused", "not_reused", "unknown"] as const).map((reuse) => ({ labels: { upstream: state.url, reuse }, value: value(state.counters.firstToken[reuse]) })));
  out +=
    metricFamily("ctxr_upstream_first_token_seconds_total", "counter", "Summed time to first token of streamed answers (sent to first event carrying a token), by reuse: reused (the upstream reported cached prompt tokens), not_reused, unknown.", byReuse((t) => t.seconds)) +
    metricFamily("ctxr_upstream_first_token_requests_total", "counter", "Streamed answers whose first token was timed, by reuse (as ctxr_upstream_first_token_seconds_total).", byReuse((t) => t.requests));
  const synced = states.filter((state): state is UpstreamState & { sync: UpstreamCacheSync } => state.sync !== null);
  if (synced.length === 0) return out;
  for (const [name, type, help, value] of SYNC_SERIES) {
    out += metricFamily(name, type, help, synced.map((state) => ({ labels: { upstream: state.url }, value: value(state) })));
  }
  const subscribed = states.filter((state) => state.subscriber);
  for (const [name, type, help, value] of SUBSCRIBER_SERIES) {
    if (subscribed.length === 0) break;
    out += metricFamily(name, type, help, subscribed.map((state) => ({ labels: { upstream: state.url }, value: value(state.subscriber!.stats) })));
  }
  return out;
}

/** The proxy's own state against its byte budgets. */
export interface ProxyState {
  history_conversations: number;
  history_bytes: number;
  history_bytes_limit: number | null;
  history_budget_evicted_conversations: number;
  routing_bytes: number;
  routing_bytes_limit: number | null;
  routing_budget_evicted_contexts: number;
  /** Engine blocks the KV-event cache mirrors forgot to stay within their share of the budget. */
  routing_budget_evicted_mirror_blocks: number;
  routing_key_table_restarts: number;
  /** Choices among several upstreams, by how they were made (UpstreamPool.decisions). */
  routing_decisions: { events: number; estimate: number; round_robin: number; events_unavailable: number };
  /** Answers being relayed now, the limit, and requests refused with 429 at the limit. */
  relaying: number;
  relaying_limit: number;
  refused_busy: number;
}

export function renderProxyStateMetrics(state: ProxyState): string {
  const series: [name: string, type: "counter" | "gauge", help: string, value: number | null][] = [
    ["ctxr_proxy_history_conversations", "gauge", "Conversations whose forwarded history the proxy remembers.", state.history_conversations],
    ["ctxr_proxy_history_bytes", "gauge", "Estimated heap bytes of the remembered histories.", state.history_bytes],
    ["ctxr_proxy_history_bytes_limit", "gauge", "Byte budget of the remembered histories (--max-history-bytes).", state.history_bytes_limit],
    ["ctxr_proxy_history_budget_evictions_total", "counter", "Conversation histories forgotten to stay within --max-history-bytes.", state.history_budget_evicted_conversations],
    ["ctxr_proxy_routing_bytes", "gauge", "Estimated heap bytes of the routing indexes, their key table and the engines' KV-event cache mirrors.", state.routing_bytes],
    ["ctxr_proxy_routing_bytes_limit", "gauge", "Byte budget of the routing state (--max-routing-bytes).", state.routing_bytes_limit],
    ["ctxr_proxy_routing_budget_evictions_total", "counter", "Routing contexts forgotten to stay within --max-routing-bytes.", state.routing_budget_evicted_contexts],
    ["ctxr_proxy_routing_budget_evicted_mirror_blocks_total", "counter", "Engine blocks the KV-event cache mirrors forgot to stay within their share of --max-routing-bytes.", state.routing_budget_evicted_mirror_blocks],
    ["ctxr_proxy_routing_key_table_restarts_total", "counter", "Times the routing key table was full and routing started afresh.", state.routing_key_table_restarts],
    ["ctxr_proxy_relaying", "gauge", "Answers being relayed now, all upstreams together.", state.relaying],
    ["ctxr_proxy_relaying_limit", "gauge", "Answers relayed at once at most (--max-upstream-requests).", state.relaying_limit],
    ["ctxr_proxy_refused_busy_total", "counter", "Requests refused with 429 because --max-upstream-requests answers were being relayed.", state.refused_busy],
  ];
  let out = "";
  for (const [name, type, help, value] of series) {
    if (value === null) continue;
    out += metricFamily(name, type, help, [{ value }]);
  }
  const decisions = "ctxr_proxy_routing_decisions_total";
  out += metricFamily(
    decisions,
    "counter",
    "Choices among several upstreams, by how they were made: events (the engines' KV events), estimate, round_robin, and events_unavailable (estimate choices made while KV events are followed but could not decide).",
    Object.entries(state.routing_decisions).map(([by, count]) => ({ labels: { by }, value: count })),
  );
  return out;
}
