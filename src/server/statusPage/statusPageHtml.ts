/**
 * The status page served at GET /: one HTML document with its style and script inline, so it
 * needs nothing but this server (the single binary carries it as code; no files, no network). The
 * script is the source of the pure modules it runs (statusFigures, statusCharts, lineChartSvg) and
 * of runStatusPage, as the runtime holds them: the browser runs the same code the tests run.
 */
import { CHART_COLORS, lineChartSvg } from "./lineChartSvg.ts";
import { statusCharts } from "./statusCharts.ts";
import { statusFigures } from "./statusFigures.ts";
import { runStatusPage } from "./statusPageScript.ts";

/** Only this server may be reached: no remote script, style, font, image or connection. */
export const STATUS_PAGE_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'";

export const STATUS_PAGE_POLL_MS = 2000;

const STYLE = `
:root { color-scheme: light dark; --fg: #1d2731; --muted: #5c6b73; --card: #f4f6f8; --line: #d5dbe0; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6eaee; --muted: #9aa7b0; --card: #1f262d; --line: #38424b; } body { background: #14191e; } }
body { font: 14px/1.4 system-ui, sans-serif; color: var(--fg); margin: 0 auto; padding: 16px 24px; max-width: 1120px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 24px 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; }
.card { background: var(--card); border-radius: 6px; padding: 10px 12px; }
.card .label { color: var(--muted); font-size: 12px; } .card .value { font-size: 22px; font-variant-numeric: tabular-nums; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; margin-top: 16px; }
.chart { background: var(--card); border-radius: 6px; padding: 4px; }
svg text { fill: var(--fg); font: 11px system-ui, sans-serif; } svg .chart-title { font-size: 13px; font-weight: 600; }
svg .tick, svg .empty { fill: var(--muted); } svg .axis { stroke: var(--muted); } svg .grid { stroke: var(--line); stroke-dasharray: 3 3; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); } th { color: var(--muted); font-weight: 500; }
td.ok { color: #17a398; } td.bad { color: #e4572e; } td.empty { color: var(--muted); }
`;

const CARDS: readonly [id: string, label: string][] = [
  ["cached_tokens", "Prompt tokens from cache"],
  ["computed_tokens", "Prompt tokens computed"],
  ["cached_share", "Share from cache"],
  ["ttft_reused_ms", "Mean TTFT, with reuse"],
  ["ttft_not_reused_ms", "Mean TTFT, without reuse"],
  ["queue_depth", "Queue depth"],
  ["running", "Running"],
  ["kv_blocks_used", "KV blocks used"],
];

const CHARTS = ["tokens", "ttft", "queue", "kvBlocks", "upstreams"];

function statusPageScript(): string {
  return [
    '"use strict";',
    `const statusFigures = ${statusFigures.toString()};`,
    `const statusCharts = ${statusCharts.toString()};`,
    `const lineChartSvg = ${lineChartSvg.toString()};`,
    `(${runStatusPage.toString()})(window, { statusFigures, statusCharts, lineChartSvg, colors: ${JSON.stringify(CHART_COLORS)}, pollMs: ${STATUS_PAGE_POLL_MS} });`,
  ].join("\n");
}

export function statusPageHtml(version: string): string {
  const cards = CARDS.map(([id, label]) => `<div class="card"><div class="label">${label}</div><div class="value" id="figure-${id}" data-value="">—</div></div>`).join("\n");
  const charts = CHARTS.map((name) => `<div class="chart" id="chart-${name}"></div>`).join("\n");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ctxr status</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>
<h1>ctxr ${version} · <span id="mode">…</span></h1>
<p class="sub">Totals since start, from <code>/v1/stats</code>; charts from <code>/v1/stats/history</code>, every ${STATUS_PAGE_POLL_MS / 1000} s. <span id="state">loading…</span></p>
<div class="cards">
${cards}
</div>
<div class="charts">
${charts}
</div>
<h2>Upstreams</h2>
<table>
<thead><tr><th>upstream</th><th>state</th><th>requests</th><th>in flight</th><th>prompt tokens forwarded</th><th>cached tokens reported</th></tr></thead>
<tbody id="upstreams"></tbody>
</table>
<p class="sub" id="routing"></p>
<script>
${statusPageScript()}
</script>
</body>
</html>
`;
}
