/**
 * Prometheus metrics in the text exposition format 0.0.4: request counts by
 * route, method and status, a latency histogram per route, and the service's
 * index size and prefix-hit counters read from its stats at scrape time.
 */

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Upper bounds (seconds) of the request-duration histogram buckets. */
export const DURATION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

type Labels = Record<string, string>;

function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

export function labelText(labels: Labels, extra?: [string, string]): string {
  const parts = Object.entries(labels).map(([name, value]) => `${name}="${escapeLabelValue(value)}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabelValue(extra[1])}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

export function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

export function metricHeader(name: string, help: string, type: "counter" | "gauge" | "histogram"): string {
  return `# HELP ${name} ${help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n# TYPE ${name} ${type}\n`;
}

/** A counter family with labels. */
export class LabeledCounter {
  private readonly series = new Map<string, { labels: Labels; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  inc(labels: Labels, by = 1): void {
    const key = labelText(labels);
    const entry = this.series.get(key);
    if (entry === undefined) this.series.set(key, { labels, value: by });
    else entry.value += by;
  }

  get(labels: Labels): number {
    return this.series.get(labelText(labels))?.value ?? 0;
  }

  render(): string {
    let out = metricHeader(this.name, this.help, "counter");
    for (const [key, { value }] of this.series) out += `${this.name}${key} ${formatNumber(value)}\n`;
    return out;
  }
}

/** A histogram family with labels and fixed buckets. */
export class LabeledHistogram {
  private readonly series = new Map<string, { labels: Labels; counts: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[] = DURATION_BUCKETS,
  ) {}

  /** Exposes a series at zero before its first observation. */
  start(labels: Labels): void {
    this.entry(labels);
  }

  observe(labels: Labels, value: number): void {
    const entry = this.entry(labels);
    // Buckets are stored non-cumulative; render accumulates.
    const bucket = this.buckets.findIndex((bound) => value <= bound);
    if (bucket >= 0) entry.counts[bucket]!++;
    entry.sum += value;
    entry.count++;
  }

  private entry(labels: Labels) {
    const key = labelText(labels);
    let entry = this.series.get(key);
    if (entry === undefined) {
      entry = { labels, counts: new Float64Array(this.buckets.length), sum: 0, count: 0 };
      this.series.set(key, entry);
    }
    return entry;
  }

  render(): string {
    let out = metricHeader(this.name, this.help, "histogram");
    for (const { labels, counts, sum, count } of this.series.values()) {
      let cumulative = 0;
      this.buckets.forEach((bound, i) => {
        cumulative += counts[i]!;
        out += `${this.name}_bucket${labelText(labels, ["le", formatNumber(bound)])} ${cumulative}\n`;
      });
      out += `${this.name}_bucket${labelText(labels, ["le", "+Inf"])} ${count}\n`;
      out += `${this.name}_sum${labelText(labels)} ${formatNumber(sum)}\n`;
      out += `${this.name}_count${labelText(labels)} ${count}\n`;
    }
    return out;
  }
}

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

import type { SharedStateFigures } from "../online/serviceChanges.ts";

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
  readonly durations = new LabeledHistogram("ctxr_http_request_duration_seconds", "Time to answer an HTTP request, by route.");

  /** Records one answered request (route: the route pattern, or "unmatched"). */
  observeRequest(route: string, method: string, status: number, seconds: number): void {
    this.requests.inc({ route, method, status: String(status) });
    this.durations.observe({ route }, seconds);
  }

  render(figures: ServiceFigures): string {
    const gauge = (name: string, help: string, value: number) => `${metricHeader(name, help, "gauge")}${name} ${formatNumber(value)}\n`;
    const counter = (name: string, help: string, value: number) => `${metricHeader(name, help, "counter")}${name} ${formatNumber(value)}\n`;
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
