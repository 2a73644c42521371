/**
 * The status page's time series, from the history's samples: counters become figures per
 * interval (tokens, requests, mean TTFT between two samples), gauges are taken as they are.
 *
 * Runs in the browser too (statusPageHtml.ts ships its source): self-contained, no imports used at
 * run time.
 */
import type { StatusFigures } from "./statusFigures.ts";

export interface ChartSeries {
  name: string;
  /** One per chart time; null where there is nothing to show (no request in that interval). */
  values: (number | null)[];
}

export interface StatusChart {
  title: string;
  unit: string;
  series: ChartSeries[];
}

export interface StatusCharts {
  /** Milliseconds since the epoch, one per point. */
  times: number[];
  tokens: StatusChart;
  ttft: StatusChart;
  queue: StatusChart;
  kvBlocks: StatusChart;
  upstreams: StatusChart;
}

export function statusCharts(samples: readonly { time_ms: number; figures: StatusFigures }[]): StatusCharts {
  // A counter that went down (a reset, a restart) counts from zero again.
  const delta = (now: number, before: number) => (now >= before ? now - before : now);
  const pairs = samples.slice(1).map((sample, i) => ({ time: sample.time_ms, now: sample.figures, before: samples[i]!.figures }));
  const meanMs = (now: { requests: number; seconds: number } | null, before: { requests: number; seconds: number } | null) => {
    if (now === null || before === null) return null;
    const requests = delta(now.requests, before.requests);
    return requests === 0 ? null : (delta(now.seconds, before.seconds) / requests) * 1000;
  };
  // A series whose figure this mode does not measure (null in the latest sample) is left out.
  const last = pairs.length === 0 ? null : pairs[pairs.length - 1]!.now;
  const measured = (figure: (figures: StatusFigures) => unknown) => last === null || figure(last) !== null;
  const only = (series: (ChartSeries | null)[]) => series.filter((entry): entry is ChartSeries => entry !== null);
  const urls: string[] = [];
  for (const pair of pairs) for (const upstream of pair.now.upstreams) if (!urls.includes(upstream.url)) urls.push(upstream.url);
  return {
    times: pairs.map((pair) => pair.time),
    tokens: {
      title: "Prompt tokens per interval",
      unit: "tokens",
      series: [
        { name: "cached", values: pairs.map((pair) => delta(pair.now.cached_tokens, pair.before.cached_tokens)) },
        { name: "computed", values: pairs.map((pair) => delta(pair.now.computed_tokens, pair.before.computed_tokens)) },
      ],
    },
    ttft: {
      title: "Time to first token (mean per interval)",
      unit: "ms",
      series: only([
        measured((f) => f.ttft_reused) ? { name: "with reuse", values: pairs.map((pair) => meanMs(pair.now.ttft_reused, pair.before.ttft_reused)) } : null,
        measured((f) => f.ttft_not_reused) ? { name: "without reuse", values: pairs.map((pair) => meanMs(pair.now.ttft_not_reused, pair.before.ttft_not_reused)) } : null,
      ]),
    },
    queue: {
      title: "Queue depth",
      unit: "requests",
      series: only([
        measured((f) => f.queue_depth) ? { name: last?.mode === "proxy" ? "in flight" : "waiting", values: pairs.map((pair) => pair.now.queue_depth) } : null,
        measured((f) => f.running) ? { name: "running", values: pairs.map((pair) => pair.now.running) } : null,
      ]),
    },
    kvBlocks: {
      title: "KV blocks",
      unit: "blocks",
      series: only([
        measured((f) => f.kv_blocks_used) ? { name: "used", values: pairs.map((pair) => pair.now.kv_blocks_used) } : null,
        measured((f) => f.kv_blocks_total) ? { name: "total", values: pairs.map((pair) => pair.now.kv_blocks_total) } : null,
      ]),
    },
    upstreams: {
      title: "Requests per upstream per interval",
      unit: "requests",
      series: urls.map((url) => ({
        name: url,
        values: pairs.map((pair) => {
          const now = pair.now.upstreams.find((upstream) => upstream.url === url);
          if (now === undefined) return null;
          const before = pair.before.upstreams.find((upstream) => upstream.url === url);
          return delta(now.requests, before?.requests ?? 0);
        }),
      })),
    },
  };
}
