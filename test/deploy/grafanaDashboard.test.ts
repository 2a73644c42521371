/**
 * deploy/grafana/ctxr-dashboard.json: a Grafana dashboard over ctxr's /metrics. Every PromQL
 * expression (panels and template variables) must name metrics and labels that a real ctxr
 * exports: a `serve --model` (tiny model) and a `serve --upstream` in front of it, both on
 * ephemeral ports.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { LatencyHistograms } from "../../src/server/latencyMetrics.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { promqlNames } from "../helpers/promqlNames.ts";
import { startProxy, type ProxyServer } from "../proxy/proxyKit.ts";
import { startTestServer, type TestServer } from "../server/serverKit.ts";

const DASHBOARD_PATH = join(REPO_ROOT, "deploy", "grafana", "ctxr-dashboard.json");
/** Labels Prometheus adds when it scrapes. */
const SCRAPE_LABELS = new Set(["instance", "job"]);

interface Expression {
  where: string;
  expr: string;
}

function dashboardExpressions(dashboard: any): Expression[] {
  const found: Expression[] = [];
  const visit = (panels: any[]) => {
    for (const panel of panels ?? []) {
      for (const target of panel.targets ?? []) found.push({ where: `panel "${panel.title}" ${target.refId}`, expr: target.expr });
      visit(panel.panels);
    }
  };
  visit(dashboard.panels);
  for (const variable of dashboard.templating?.list ?? []) {
    if (variable.type !== "query") continue;
    const query = typeof variable.query === "string" ? variable.query : variable.query.query;
    // label_values(METRIC, LABEL): the metric must exist and carry the label.
    const match = /^label_values\(\s*([\w:]+)\s*,\s*(\w+)\s*\)$/.exec(query);
    expect(match).not.toBeNull();
    found.push({ where: `variable ${variable.name}`, expr: `sum by (${match![2]}) (${match![1]})` });
  }
  return found;
}

/** Metric names (of sample lines: a histogram's _bucket, _sum and _count) and label names in Prometheus text. */
function exported(text: string): { metrics: Set<string>; labels: Set<string> } {
  const metrics = new Set<string>();
  const labels = new Set<string>();
  for (const line of text.split("\n")) {
    const sample = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})? /.exec(line);
    if (sample === null) continue;
    metrics.add(sample[1]!);
    for (const label of (sample[2] ?? "").matchAll(/([a-zA-Z_]\w*)="/g)) labels.add(label[1]!);
  }
  return { metrics, labels };
}

describe("promqlNames", () => {
  test("reads metrics and labels, not functions, keywords, ranges or strings", () => {
    expect(promqlNames('histogram_quantile(0.9, sum by (le, reuse) (rate(a_seconds_bucket{instance=~"$instance",kv="x y"}[$__rate_interval])))')).toEqual({ metrics: ["a_seconds_bucket"], labels: ["instance", "kv", "le", "reuse"] });
    expect(promqlNames("sum(rate(x_total[5m])) / on (job) group_left sum(y) or vector(0)")).toEqual({ metrics: ["x_total", "y"], labels: ["job"] });
  });
});

describe("deploy/grafana/ctxr-dashboard.json", () => {
  let model: { path: string; cleanup(): void };
  let engine: GenerationEngine;
  let api: TestServer;
  let proxy: ProxyServer;
  let names: { metrics: Set<string>; labels: Set<string> };

  beforeAll(async () => {
    model = tinyModelFolder({}, "grafana");
    const latency = new LatencyHistograms();
    engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 64, threads: 2, latency });
    api = await startTestServer({ server: { engine, latency } });
    proxy = await startProxy({ upstreams: [api.url] });
    expect((await proxy.post("/v1/completions", { model: engine.modelId, prompt: "Hello there, hello there.", max_tokens: 2 })).status).toBe(200);
    const texts = [(await api.get("/metrics")).text, (await proxy.get("/metrics")).text];
    names = { metrics: new Set(), labels: new Set() };
    for (const text of texts) {
      const found = exported(text);
      found.metrics.forEach((name) => names.metrics.add(name));
      found.labels.forEach((name) => names.labels.add(name));
    }
  }, 300_000);
  afterAll(async () => {
    await proxy?.close();
    await api?.close();
    await engine?.close();
    model?.cleanup();
  });

  test("is a dashboard Grafana imports: title, uid, a Prometheus datasource variable, panels with grid positions", () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD_PATH, "utf8"));
    expect(dashboard.title).toBe("ctxr");
    expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/);
    expect(dashboard.templating.list.find((variable: any) => variable.type === "datasource").query).toBe("prometheus");
    const ids = new Set<number>();
    for (const panel of dashboard.panels) {
      expect(typeof panel.title).toBe("string");
      expect(panel.gridPos.w).toBeGreaterThan(0);
      expect(panel.gridPos.x + panel.gridPos.w).toBeLessThanOrEqual(24);
      expect(ids.has(panel.id)).toBe(false);
      ids.add(panel.id);
    }
    const titles = dashboard.panels.map((panel: any) => panel.title.toLowerCase()).join(" | ");
    for (const topic of ["cached", "time to first token", "queue", "kv blocks", "per upstream"]) expect(titles).toContain(topic);
  });

  test("every expression names metrics and labels that /metrics exports", () => {
    const expressions = dashboardExpressions(JSON.parse(readFileSync(DASHBOARD_PATH, "utf8")));
    expect(expressions.length).toBeGreaterThanOrEqual(10);
    const problems: string[] = [];
    for (const { where, expr } of expressions) {
      const used = promqlNames(expr);
      if (used.metrics.length === 0) problems.push(`${where}: names no metric`);
      for (const metric of used.metrics) if (!names.metrics.has(metric)) problems.push(`${where}: ${metric} is not exported`);
      for (const label of used.labels) if (!SCRAPE_LABELS.has(label) && !names.labels.has(label)) problems.push(`${where}: label ${label} is not exported`);
    }
    expect(problems).toEqual([]);
  });
});
