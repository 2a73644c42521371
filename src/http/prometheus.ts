/**
 * Prometheus text exposition format 0.0.4: every /metrics writer of ctxr (server, proxy, engine,
 * KV-event publisher, latency histograms) renders through here, so label values are escaped
 * (backslash, double quote, line feed), special values are written as Prometheus reads them
 * (`NaN`, `+Inf`, `-Inf`), and every histogram ends with its `le="+Inf"` bucket.
 */

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type MetricType = "counter" | "gauge" | "histogram";

export type Labels = Readonly<Record<string, string>>;

/** One sample of a counter or gauge family. */
export interface Sample {
  labels?: Labels;
  value: number;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Backslash, double quote and line feed escaped, as the format requires inside a label value. */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`));
}

/** A HELP text escapes backslash and line feed only (a double quote stays as it is). */
function escapeHelp(help: string): string {
  return help.replace(/[\\\n]/g, (c) => (c === "\n" ? "\\n" : "\\\\"));
}

function checkMetricName(name: string): void {
  if (!METRIC_NAME.test(name)) throw new Error(`prometheus: invalid metric name ${JSON.stringify(name)}`);
}

/** `{name="value",…}`, or "" without labels; `extra` is appended last (a histogram's `le`). */
export function labelText(labels: Labels, extra?: readonly [name: string, value: string]): string {
  const pairs = Object.entries(labels);
  if (extra !== undefined) pairs.push([extra[0], extra[1]]);
  if (pairs.length === 0) return "";
  const parts = pairs.map(([name, value]) => {
    // Names are ours (code constants), values may come from anywhere (routes, upstream URLs).
    if (!LABEL_NAME.test(name) || name.startsWith("__")) throw new Error(`prometheus: invalid label name ${JSON.stringify(name)}`);
    return `${name}="${escapeLabelValue(value)}"`;
  });
  return `{${parts.join(",")}}`;
}

/** A sample value as Prometheus parses it (JavaScript's "Infinity" is not a Prometheus number). */
export function sampleValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

/** The `# HELP` and `# TYPE` lines that open a family. */
export function metricHeader(name: string, help: string, type: MetricType): string {
  checkMetricName(name);
  return `# HELP ${name} ${escapeHelp(help)}\n# TYPE ${name} ${type}\n`;
}

/** A counter or gauge family: its header and one line per sample. */
export function metricFamily(name: string, type: "counter" | "gauge", help: string, samples: readonly Sample[]): string {
  let out = metricHeader(name, help, type);
  for (const sample of samples) out += `${name}${labelText(sample.labels ?? {})} ${sampleValue(sample.value)}\n`;
  return out;
}

/** A family of one unlabelled sample. */
export function singleMetric(name: string, type: "counter" | "gauge", help: string, value: number): string {
  return metricFamily(name, type, help, [{ value }]);
}

/** A counter family with labels, counted in process and rendered at scrape time. */
export class LabeledCounter {
  private readonly series = new Map<string, { labels: Labels; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
  ) {
    checkMetricName(name);
  }

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
    return metricFamily(this.name, "counter", this.help, [...this.series.values()]);
  }
}

/** A histogram family with labels and fixed finite bucket bounds; the `+Inf` bucket is always added. */
export class LabeledHistogram {
  private readonly series = new Map<string, { labels: Labels; counts: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
  ) {
    checkMetricName(name);
    for (let i = 0; i < buckets.length; i++) {
      if (!Number.isFinite(buckets[i]!) || (i > 0 && !(buckets[i]! > buckets[i - 1]!))) {
        throw new Error(`prometheus: ${name}: bucket bounds must be finite and increasing (the +Inf bucket is added), got ${buckets.join(", ")}`);
      }
    }
  }

  /** Exposes a series at zero before its first observation. */
  start(labels: Labels): void {
    this.entry(labels);
  }

  observe(labels: Labels, value: number): void {
    const entry = this.entry(labels);
    // Counts are kept per bucket; render accumulates them. A value above every bound is only in +Inf.
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
        out += `${this.name}_bucket${labelText(labels, ["le", sampleValue(bound)])} ${cumulative}\n`;
      });
      out += `${this.name}_bucket${labelText(labels, ["le", "+Inf"])} ${count}\n`;
      out += `${this.name}_sum${labelText(labels)} ${sampleValue(sum)}\n`;
      out += `${this.name}_count${labelText(labels)} ${count}\n`;
    }
    return out;
  }
}
