import { describe, expect, test } from "bun:test";
import { statusCharts } from "../../../src/server/statusPage/statusCharts.ts";
import { statusFigures, type StatusFigures } from "../../../src/server/statusPage/statusFigures.ts";

const engine = (cached: number, computed: number, reused: [number, number], notReused: [number, number], waiting: number): StatusFigures =>
  statusFigures({
    engine: {
      running: 1,
      waiting,
      kv_blocks_used: waiting * 2,
      kv_blocks_total: 64,
      first_token: { reused: { requests: reused[0], seconds: reused[1] }, not_reused: { requests: notReused[0], seconds: notReused[1] }, prompt_tokens_cached: cached, prompt_tokens_computed: computed },
    },
  });

describe("statusCharts: samples to time series", () => {
  test("counters become figures per interval, gauges stay, mean TTFT per interval (null without requests)", () => {
    const samples = [
      { time_ms: 0, figures: engine(0, 0, [0, 0], [0, 0], 0) },
      { time_ms: 2000, figures: engine(32, 100, [0, 0], [2, 0.4], 3) },
      { time_ms: 4000, figures: engine(96, 120, [2, 0.1], [2, 0.4], 1) },
    ];
    const charts = statusCharts(samples);
    expect(charts.times).toEqual([2000, 4000]);
    expect(charts.tokens.series).toEqual([
      { name: "cached", values: [32, 64] },
      { name: "computed", values: [100, 20] },
    ]);
    expect(charts.ttft.series.map((series) => series.values)).toEqual([
      [null, 50],
      [200, null],
    ]);
    expect(charts.queue.series).toEqual([
      { name: "waiting", values: [3, 1] },
      { name: "running", values: [1, 1] },
    ]);
    expect(charts.kvBlocks.series.map((series) => series.values)).toEqual([
      [6, 2],
      [64, 64],
    ]);
    expect(charts.upstreams.series).toEqual([]);
  });

  test("a counter that went down (reset, restart) counts from zero again", () => {
    const charts = statusCharts([
      { time_ms: 0, figures: engine(500, 500, [0, 0], [0, 0], 0) },
      { time_ms: 1, figures: engine(20, 30, [0, 0], [0, 0], 0) },
    ]);
    expect(charts.tokens.series.map((series) => series.values)).toEqual([[20], [30]]);
  });

  test("proxy: one series per upstream (an upstream seen later starts from zero); TTFT from its first_token; what the mode does not measure is left out", () => {
    // Each upstream's first tokens so far: `requests` reused ones of 0.1 s each, none without reuse.
    const firstToken = (requests: number) => ({ reused: { requests, seconds: requests * 0.1 }, not_reused: { requests: 0, seconds: 0 } });
    const proxy = (a: number, b: number | null) =>
      statusFigures({ upstreams: [{ url: "http://a", requests: a, first_token: firstToken(a) }, ...(b === null ? [] : [{ url: "http://b", requests: b, first_token: firstToken(b) }])] });
    const charts = statusCharts([
      { time_ms: 0, figures: proxy(1, null) },
      { time_ms: 1, figures: proxy(4, null) },
      { time_ms: 2, figures: proxy(4, 2) },
    ]);
    expect(charts.upstreams.series).toEqual([
      { name: "http://a", values: [3, 0] },
      { name: "http://b", values: [null, 2] },
    ]);
    expect(charts.ttft.series.map((series) => series.name)).toEqual(["with reuse", "without reuse"]);
    expect(charts.ttft.series[0]!.values.map((v) => (v === null ? null : Math.round(v)))).toEqual([100, 100]);
    expect(charts.ttft.series[1]!.values).toEqual([null, null]);
    expect(charts.queue.series.map((series) => series.name)).toEqual(["in flight"]);
    expect(charts.kvBlocks.series).toEqual([]);
  });

  test("fewer than two samples give no points", () => {
    expect(statusCharts([]).times).toEqual([]);
    expect(statusCharts([{ time_ms: 5, figures: engine(1, 1, [0, 0], [0, 0], 0) }]).tokens.series[0]!.values).toEqual([]);
  });
});
