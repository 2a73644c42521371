/**
 * The server's own Prometheus families: request counts by route, method and status, a latency
 * histogram per route, and the service's index size and prefix-hit counters read from its stats
 * at scrape time (the text itself is written by http/prometheus.ts).
 */
import { LabeledCounter, LabeledHistogram, singleMetric } from "../http/prometheus.ts";
import type { SharedStateFigures } from "../online/serviceChanges.ts";

/** Upper bounds (seconds) of the request-duration histogram buckets. */
export const DURATION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The figures of service.stats() that /metrics exposes. */
export interface ServiceFigures {
  contexts: number;
  nodes: number;
  index_tokens: number;
  conversations: number;
  index_bytes: number;
  index_bytes_limit: number | null;
  index_budget_evicted_contexts: number;
  dedup_bytes: number;
  dedup_bytes_limit: number | null;
  dedup_budget_evicted_conversations: number;
  prompt_tokens: number;
  prefix_hit_tokens: number;
  reordered_contexts: number;
  evicted_contexts: number;
  shared_state?: SharedStateFigures;
}

function sharedStateMetrics(figures: SharedStateFigures | undefined, gauge: (name: string, help: string, value: number) => string, counter: (name: string, help: string, value: number) => string): string {
  if (figures === undefined) return "";
  return (
    gauge("ctxr_shared_state_healthy", "1 while the state shared through Redis (--state) is reachable, 0 while degraded.", figures.healthy ? 1 : 0) +
    gauge("ctxr_shared_state_unsent_batches", "Change batches waiting for Redis.", figures.unsent_batches) +
    gauge("ctxr_shared_state_unsent_bytes", "Bytes of changes waiting for Redis (bounded by --state-queue-bytes).", figures.unsent_bytes) +
    counter("ctxr_shared_state_refused_writes_total", "Requests refused (503) because the queue for Redis was full.", figures.refused_writes) +
    counter("ctxr_shared_state_skipped_entries_total", "Shared-log entries skipped because they are not ctxr change batches (dead letters).", figures.skipped_entries) +
    counter("ctxr_shared_state_deleted_gaps_total", "Entries found deleted from the shared log (XDEL) after this instance's position.", figures.deleted_gaps) +
    counter("ctxr_shared_state_garbage_snapshots_total", "Unusable snapshots found in Redis (the log was loaded alone).", figures.garbage_snapshots) +
    counter("ctxr_shared_state_appended_changes_total", "Changes this instance appended to the shared log.", figures.appended_changes) +
    counter("ctxr_shared_state_applied_changes_total", "Other instances' changes applied from the shared log.", figures.applied_changes) +
    counter("ctxr_shared_state_write_errors_total", "Failed appends to the shared log.", figures.write_errors) +
    counter("ctxr_shared_state_read_errors_total", "Failed reads of the shared log.", figures.read_errors) +
    counter("ctxr_shared_state_degraded_acknowledgements_total", "Changes acknowledged while Redis was unreachable.", figures.acknowledged_degraded) +
    counter("ctxr_shared_state_resyncs_total", "Reloads of the replica from the shared snapshot.", figures.resyncs)
  );
}

export class ServerMetrics {
  readonly requests = new LabeledCounter("ctxr_http_requests_total", "HTTP requests answered, by route, method and status.");
  readonly durations = new LabeledHistogram("ctxr_http_request_duration_seconds", "Time to answer an HTTP request, by route.", DURATION_BUCKETS);

  /** Records one answered request (route: the route pattern, or "unmatched"). */
  observeRequest(route: string, method: string, status: number, seconds: number): void {
    this.requests.inc({ route, method, status: String(status) });
    this.durations.observe({ route }, seconds);
  }

  render(figures: ServiceFigures): string {
    const gauge = (name: string, help: string, value: number) => singleMetric(name, "gauge", help, value);
    const counter = (name: string, help: string, value: number) => singleMetric(name, "counter", help, value);
    return (
      this.requests.render() +
      this.durations.render() +
      gauge("ctxr_index_contexts", "Contexts in the live index.", figures.contexts) +
      gauge("ctxr_index_nodes", "Nodes of the live index tree.", figures.nodes) +
      gauge("ctxr_index_tokens", "Tokens held by the live index (each node's blocks counted once).", figures.index_tokens) +
      gauge("ctxr_conversations", "Conversations remembered for dedup.", figures.conversations) +
      gauge("ctxr_index_bytes", "Estimated heap bytes of the live index and its block keys.", figures.index_bytes) +
      (figures.index_bytes_limit === null ? "" : gauge("ctxr_index_bytes_limit", "Byte budget of the live index (--max-index-bytes).", figures.index_bytes_limit)) +
      counter("ctxr_index_budget_evictions_total", "Contexts evicted to stay within --max-index-bytes.", figures.index_budget_evicted_contexts) +
      gauge("ctxr_dedup_bytes", "Estimated heap bytes of the dedup conversation records.", figures.dedup_bytes) +
      (figures.dedup_bytes_limit === null ? "" : gauge("ctxr_dedup_bytes_limit", "Byte budget of the dedup records (--max-dedup-bytes).", figures.dedup_bytes_limit)) +
      counter("ctxr_dedup_budget_evictions_total", "Conversations forgotten to stay within --max-dedup-bytes.", figures.dedup_budget_evicted_conversations) +
      counter("ctxr_prompt_tokens_total", "Tokens of the contexts reordered since start.", figures.prompt_tokens) +
      counter("ctxr_prefix_hit_tokens_total", "Estimated prefix-cache hit tokens of the contexts reordered since start.", figures.prefix_hit_tokens) +
      counter("ctxr_reordered_contexts_total", "Contexts reordered since start.", figures.reordered_contexts) +
      counter("ctxr_evicted_contexts_total", "Contexts evicted (by request, capacity or TTL) since start.", figures.evicted_contexts) +
      sharedStateMetrics(figures.shared_state, gauge, counter)
    );
  }
}
