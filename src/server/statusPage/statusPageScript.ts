/**
 * The status page's script, run in the browser: polls /v1/stats and /v1/stats/history, and
 * renders the figure cards, the charts and the upstream table. statusPageHtml.ts ships its source
 * with the pure modules it is given (`lib`), so it must stay self-contained: no imports used at run
 * time, no helpers outside its body. The DOM types below are the few this script touches (the
 * project's TypeScript lib has no DOM).
 */
import type { ChartSize, lineChartSvg } from "./lineChartSvg.ts";
import type { statusCharts } from "./statusCharts.ts";
import type { StatusFigures, statusFigures } from "./statusFigures.ts";

interface PageElement {
  innerHTML: string;
  textContent: string | null;
  dataset: Record<string, string | undefined>;
  setAttribute(name: string, value: string): void;
}

export interface StatusPageWindow {
  document: { getElementById(id: string): PageElement | null; body: PageElement };
  fetch(path: string, init: { cache: "no-store"; headers: Record<string, string> }): Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>;
  setTimeout(callback: () => void, ms: number): unknown;
}

export interface StatusPageLib {
  statusFigures: typeof statusFigures;
  statusCharts: typeof statusCharts;
  lineChartSvg: typeof lineChartSvg;
  colors: readonly string[];
  /** How often to poll. */
  pollMs: number;
}

export function runStatusPage(window: StatusPageWindow, lib: StatusPageLib): void {
  const byId = (id: string) => window.document.getElementById(id);
  const escape = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const grouped = (value: number) => String(Math.round(value)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const size: ChartSize = { width: 520, height: 200 };

  // A card shows its figure formatted; data-value keeps the exact number (and "" when not measured).
  const setFigure = (name: string, value: number | null, text: string) => {
    const element = byId(`figure-${name}`);
    if (element === null) return;
    element.textContent = value === null ? "—" : text;
    element.setAttribute("data-value", value === null ? "" : String(value));
  };
  const meanMs = (ttft: { requests: number; seconds: number } | null) => (ttft === null || ttft.requests === 0 ? null : (ttft.seconds / ttft.requests) * 1000);

  const renderFigures = (figures: StatusFigures) => {
    const mode = byId("mode");
    if (mode !== null) mode.textContent = figures.mode === "engine" ? "built-in engine (serve --model)" : figures.mode === "proxy" ? "proxy (serve --upstream)" : "online reorder API (estimates)";
    const prompt = figures.cached_tokens + figures.computed_tokens;
    setFigure("cached_tokens", figures.cached_tokens, grouped(figures.cached_tokens));
    setFigure("computed_tokens", figures.computed_tokens, grouped(figures.computed_tokens));
    const share = prompt === 0 ? null : figures.cached_tokens / prompt;
    setFigure("cached_share", share, share === null ? "" : `${(share * 100).toFixed(1)} %`);
    const reused = meanMs(figures.ttft_reused);
    const notReused = meanMs(figures.ttft_not_reused);
    setFigure("ttft_reused_ms", reused, reused === null ? "" : `${reused.toFixed(1)} ms`);
    setFigure("ttft_not_reused_ms", notReused, notReused === null ? "" : `${notReused.toFixed(1)} ms`);
    setFigure("queue_depth", figures.queue_depth, grouped(figures.queue_depth ?? 0));
    setFigure("running", figures.running, grouped(figures.running ?? 0));
    setFigure("kv_blocks_used", figures.kv_blocks_used, figures.kv_blocks_total === null ? grouped(figures.kv_blocks_used ?? 0) : `${grouped(figures.kv_blocks_used ?? 0)} / ${grouped(figures.kv_blocks_total)}`);

    const routing = byId("routing");
    if (routing !== null) {
      const decisions = Object.entries(figures.routing_decisions);
      routing.innerHTML =
        decisions.length === 0
          ? ""
          : `Choices among upstreams, by how they were made: ${decisions.map(([by, value]) => `${escape(by)} <span data-routing="${escape(by)}" data-value="${value}">${grouped(value)}</span>`).join(" · ")}`;
    }
    const table = byId("upstreams");
    if (table === null) return;
    if (figures.upstreams.length === 0) {
      table.innerHTML = `<tr><td colspan="6" class="empty">no upstreams: ${figures.mode === "proxy" ? "none configured" : "not proxying"}</td></tr>`;
      return;
    }
    table.innerHTML = figures.upstreams
      .map(
        (upstream, index) =>
          `<tr data-upstream="${index}"><td>${escape(upstream.url)}</td><td class="${upstream.healthy ? "ok" : "bad"}">${upstream.healthy ? "healthy" : "out"}</td>` +
          `<td data-value="${upstream.requests}">${grouped(upstream.requests)}</td><td data-value="${upstream.in_flight}">${grouped(upstream.in_flight)}</td>` +
          `<td data-value="${upstream.prompt_tokens}">${grouped(upstream.prompt_tokens)}</td><td data-value="${upstream.cached_tokens}">${grouped(upstream.cached_tokens)}</td></tr>`,
      )
      .join("");
  };

  const renderCharts = (samples: unknown) => {
    const charts = lib.statusCharts(Array.isArray(samples) ? samples : []);
    for (const name of ["tokens", "ttft", "queue", "kvBlocks", "upstreams"] as const) {
      const element = byId(`chart-${name}`);
      if (element !== null) element.innerHTML = lib.lineChartSvg(charts[name], charts.times, size, lib.colors);
    }
  };

  const getJson = async (path: string) => {
    const response = await window.fetch(path, { cache: "no-store", headers: { accept: "application/json" } });
    if (!response.ok) throw new Error(`${path} answered ${response.status}`);
    return response.json();
  };

  const poll = async () => {
    const state = byId("state");
    try {
      const [stats, history] = await Promise.all([getJson("/v1/stats"), getJson("/v1/stats/history")]);
      renderFigures(lib.statusFigures(stats));
      renderCharts((history as { samples?: unknown }).samples);
      if (state !== null) state.textContent = `updated ${new Date().toLocaleTimeString()}`;
      window.document.body.dataset.rendered = String(Number(window.document.body.dataset.rendered ?? "0") + 1);
    } catch (error) {
      if (state !== null) state.textContent = `cannot read the server's figures: ${(error as Error).message}`;
    }
    window.setTimeout(() => void poll(), lib.pollMs);
  };
  void poll();
}
