/**
 * What scripts/bench-soak.ts reports: the tally of outcomes (by traffic kind and by HTTP status),
 * p50/p99 of samples, the KV-block check read from a /metrics text, and the summary table. Pure.
 */
import { percentile } from "./benchKit.ts";
import type { Outcome } from "./soakOutcome.ts";
import type { TrafficKind } from "./soakMix.ts";

export interface Quantiles {
  n: number;
  p50: number;
  p99: number;
}

/** p50 and p99 by nearest rank; null without samples (reported as n/a). */
export function quantiles(samples: readonly number[]): Quantiles | null {
  if (samples.length === 0) return null;
  return { n: samples.length, p50: percentile(samples, 0.5), p99: percentile(samples, 0.99) };
}

/** One finished request as the tally needs it. */
export interface RequestRecord {
  kind: TrafficKind;
  outcome: Outcome;
  /** The HTTP status (null when the connection failed before one came). */
  status: number | null;
  expectStatus: number;
  ttftMs: number | null;
  queueMs: number | null;
}

export interface OutcomeCounts {
  requests: number;
  completed: number;
  cut: number;
  hangup: number;
  error_event: number;
  /** Aborted by the benchmark at the end of its drain time. */
  unfinished: number;
  /** Answers with a 4xx status, and each status apart. */
  four_xx: number;
  five_xx: number;
  statuses: Record<string, number>;
  /** Answers whose status was not the one the kind expects (a 200 for a malformed body, a 400 for a good one). */
  unexpected_status: number;
}

export function emptyCounts(): OutcomeCounts {
  return { requests: 0, completed: 0, cut: 0, hangup: 0, error_event: 0, unfinished: 0, four_xx: 0, five_xx: 0, statuses: {}, unexpected_status: 0 };
}

export function countRecord(counts: OutcomeCounts, record: RequestRecord): void {
  counts.requests++;
  if (record.status !== null) counts.statuses[String(record.status)] = (counts.statuses[String(record.status)] ?? 0) + 1;
  if (record.status !== null && record.status !== record.expectStatus) counts.unexpected_status++;
  if (record.outcome === "status") {
    if (record.status! >= 500) counts.five_xx++;
    else if (record.status! >= 400) counts.four_xx++;
  } else {
    counts[record.outcome]++;
  }
}

export interface Tally {
  all: OutcomeCounts;
  byKind: Partial<Record<TrafficKind, OutcomeCounts>>;
  ttft: Quantiles | null;
  queue: Quantiles | null;
  /** Completed requests whose answer carried no usage.ctxr.queue_ms (all of them while the server does not report it). */
  queueMissing: number;
}

export function tally(records: readonly RequestRecord[]): Tally {
  const all = emptyCounts();
  const byKind: Tally["byKind"] = {};
  for (const record of records) {
    countRecord(all, record);
    countRecord((byKind[record.kind] ??= emptyCounts()), record);
  }
  const completed = records.filter((r) => r.outcome === "completed");
  const queue = completed.flatMap((r) => (r.queueMs === null ? [] : [r.queueMs]));
  return {
    all,
    byKind,
    ttft: quantiles(records.flatMap((r) => (r.ttftMs === null ? [] : [r.ttftMs]))),
    queue: quantiles(queue),
    queueMissing: completed.length - queue.length,
  };
}

/** Prometheus text exposition: the value of every sample without labels, by name. */
export function parseMetrics(text: string): Record<string, number> {
  const values: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\s+(\S+)/.exec(line);
    if (match === null) continue;
    const value = Number(match[2]);
    if (!Number.isNaN(value)) values[match[1]!] = value;
  }
  return values;
}

export interface KvCheck {
  blocks_total: number;
  blocks_used: number;
  prefix_cache_blocks: number;
  /** The chunk cache's blocks in the runner; null when /metrics does not say. */
  chunk_cache_blocks: number | null;
  /** used minus both caches: what requests still hold. */
  held_by_requests: number | null;
  running: number;
  waiting: number;
  /** true: every block free or cached, nothing running; null: the figures are missing. */
  ok: boolean | null;
}

/** The engine's KV blocks from its /metrics; null when the text has no engine figures. */
export function kvCheck(metrics: Readonly<Record<string, number>>): KvCheck | null {
  const used = metrics.ctxr_generation_kv_blocks_used;
  const total = metrics.ctxr_generation_kv_blocks_total;
  if (used === undefined || total === undefined) return null;
  const prefix = metrics.ctxr_prefix_cache_blocks ?? 0;
  const chunk = metrics.ctxr_kv_device_blocks ?? null;
  const held = chunk === null ? null : used - prefix - chunk;
  const running = metrics.ctxr_generation_running ?? 0;
  const waiting = metrics.ctxr_generation_waiting ?? 0;
  return {
    blocks_total: total,
    blocks_used: used,
    prefix_cache_blocks: prefix,
    chunk_cache_blocks: chunk,
    held_by_requests: held,
    running,
    waiting,
    ok: held === null ? null : held === 0 && running === 0 && waiting === 0,
  };
}

const ms = (q: Quantiles | null, key: "p50" | "p99") => (q === null ? "n/a" : `${q[key].toFixed(0)} ms`);

export interface TargetSummary {
  target: string;
  tally: Tally;
  peakRss: Record<string, number | null>;
  kv: KvCheck | null;
}

/** A markdown table, one row per target. */
export function summaryTable(targets: readonly TargetSummary[]): string {
  const mib = (bytes: number | null) => (bytes === null ? "n/a" : `${Math.round(bytes / 2 ** 20)}`);
  const header = "| target | requests | completed | cut | hang-ups | error events | unfinished at drain | 4xx (by status) | 5xx | unexpected status | TTFT p50 / p99 | queue p50 / p99 | peak RSS MiB | KV held after |";
  const rows = targets.map(({ target, tally: t, peakRss, kv }) => {
    const four = Object.entries(t.all.statuses)
      .filter(([status]) => status.startsWith("4"))
      .map(([status, count]) => `${status}: ${count}`)
      .join(", ");
    const rss = Object.entries(peakRss)
      .map(([name, bytes]) => `${name} ${mib(bytes)}`)
      .join(", ");
    const kvText = kv === null ? "n/a" : kv.held_by_requests === null ? `used ${kv.blocks_used} (split n/a)` : `${kv.held_by_requests} of ${kv.blocks_total} (${kv.ok ? "ok" : "LEAK"})`;
    return `| ${target} | ${t.all.requests} | ${t.all.completed} | ${t.all.cut} | ${t.all.hangup} | ${t.all.error_event} | ${t.all.unfinished} | ${t.all.four_xx}${four ? ` (${four})` : ""} | ${t.all.five_xx} | ${t.all.unexpected_status} | ${ms(t.ttft, "p50")} / ${ms(t.ttft, "p99")} | ${ms(t.queue, "p50")} / ${ms(t.queue, "p99")} | ${rss} | ${kvText} |`;
  });
  return [header, `|${" --- |".repeat(14)}`, ...rows].join("\n");
}
