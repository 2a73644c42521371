/**
 * The status page in a real headless Chromium, against real servers on ephemeral ports: the
 * built-in engine (`serve --model` with the tiny model) and the proxy in front of it. After a few
 * requests, the numbers the page shows equal /v1/stats, the page asked the server for nothing but
 * its own page and JSON (Chromium resolves no other host), and a screenshot of each lands in
 * test-output/status-page/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../../src/engine/generationEngine.ts";
import { LatencyHistograms } from "../../../src/server/latencyMetrics.ts";
import { REPO_ROOT } from "../../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../../helpers/engineKit.ts";
import { dumpDom, findChromium, screenshot } from "../../helpers/headlessChromium.ts";
import { startProxy, type ProxyServer } from "../../proxy/proxyKit.ts";
import { startTestServer, type TestServer } from "../serverKit.ts";

const chromium = findChromium();
if (chromium === null) console.warn("status page test skipped: chromium is not installed (apt-get install chromium; scripts/test-prerequisites.sh does it as root)");

const OUTPUT = join(REPO_ROOT, "test-output", "status-page");
const PROMPT_A = "The status page shows what ctxr saved. ".repeat(8);
const PROMPT_B = "A second prompt that shares nothing with the first one. ".repeat(5);
const PROMPT_C = "Streamed through the proxy, a third prompt nobody sent before. ".repeat(5);

/** A streamed completion through `server`, read to its end. */
async function streamedCompletion(server: TestServer, body: Record<string, unknown>): Promise<void> {
  const answer = await fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
  expect(answer.status).toBe(200);
  expect(await answer.text()).toEndWith("data: [DONE]\n\n");
}

/** data-value of the element with this id (the exact number behind a card). */
function figure(dom: string, name: string): string {
  const tag = dom.match(new RegExp(`<[^>]*\\bid="figure-${name}"[^>]*>`))?.[0];
  if (tag === undefined) throw new Error(`no figure-${name} on the page`);
  return tag.match(/data-value="([^"]*)"/)![1]!;
}

/** Requests answered, by route, from /metrics' ctxr_http_requests_total. */
async function requestsByRoute(server: TestServer): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const match of (await server.get("/metrics")).text.matchAll(/^ctxr_http_requests_total\{route="([^"]*)",[^}]*\} (\d+)$/gm)) counts.set(match[1]!, (counts.get(match[1]!) ?? 0) + Number(match[2]));
  return counts;
}

/** Opens the page in Chromium: its DOM and a screenshot, and the routes its visits asked for. */
async function openPage(server: TestServer, name: string): Promise<{ dom: string; routes: string[] }> {
  const before = await requestsByRoute(server);
  const dom = await dumpDom(chromium!, `${server.url}/`);
  const shot = join(OUTPUT, `${name}.png`);
  await screenshot(chromium!, `${server.url}/`, shot);
  console.log(`status page screenshot (${name}): ${shot}`);
  expect([...readFileSync(shot).subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const after = await requestsByRoute(server);
  const routes = [...after].filter(([route, count]) => route !== "/metrics" && count > (before.get(route) ?? 0)).map(([route]) => route);
  return { dom, routes: routes.sort() };
}

describe.skipIf(chromium === null)("the status page in headless Chromium", () => {
  let model: { path: string; cleanup(): void };
  let engine: GenerationEngine;
  let api: TestServer;
  let proxy: ProxyServer;

  beforeAll(async () => {
    mkdirSync(OUTPUT, { recursive: true });
    model = tinyModelFolder({}, "status-page");
    const latency = new LatencyHistograms();
    engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 256, threads: 2, latency });
    api = await startTestServer({ server: { engine, latency, statusSampleEveryMs: 250 } });
    proxy = await startProxy({ upstreams: [api.url] }, { statusSampleEveryMs: 250 });
  }, 300_000);
  afterAll(async () => {
    await proxy?.close();
    await api?.close();
    await engine?.close();
    model?.cleanup();
  });

  test("serve --model: cached and computed tokens, TTFT with and without reuse, queue and KV blocks equal /v1/stats", async () => {
    for (const prompt of [PROMPT_A, PROMPT_A, PROMPT_B]) {
      const answer = await api.post("/v1/completions", { prompt, max_tokens: 3, temperature: 0 });
      expect(answer.status).toBe(200);
    }
    await Bun.sleep(600); // two samples for the charts
    const { dom, routes } = await openPage(api, "engine");
    const stats = (await api.get("/v1/stats")).body;
    const first = stats.engine.first_token;
    expect(first.reused.requests).toBeGreaterThanOrEqual(1); // the repeated prompt hit the prefix cache
    expect(first.not_reused.requests).toBeGreaterThanOrEqual(2);
    expect(first.prompt_tokens_cached).toBeGreaterThan(0);

    expect(Number(dom.match(/<body[^>]*data-rendered="(\d+)"/)?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
    expect(dom).toContain("built-in engine (serve --model)");
    expect(Number(figure(dom, "cached_tokens"))).toBe(first.prompt_tokens_cached);
    expect(Number(figure(dom, "computed_tokens"))).toBe(first.prompt_tokens_computed);
    expect(Number(figure(dom, "ttft_reused_ms"))).toBeCloseTo((first.reused.seconds / first.reused.requests) * 1000, 9);
    expect(Number(figure(dom, "ttft_not_reused_ms"))).toBeCloseTo((first.not_reused.seconds / first.not_reused.requests) * 1000, 9);
    expect(Number(figure(dom, "queue_depth"))).toBe(stats.engine.waiting);
    expect(Number(figure(dom, "running"))).toBe(stats.engine.running);
    expect(Number(figure(dom, "kv_blocks_used"))).toBe(stats.engine.kv_blocks_used);
    expect(stats.engine.kv_blocks_used).toBeGreaterThan(0); // the prefix cache holds the prompts' blocks
    // The charts drew lines from the history.
    expect(dom.match(/<div class="chart" id="chart-tokens">.*?<\/div>/s)?.[0]).toContain("<polyline");
    expect(dom.match(/<div class="chart" id="chart-kvBlocks">.*?<\/div>/s)?.[0]).toContain("<polyline");
    // Nothing but the page and its JSON was asked for (and Chromium could reach no other host).
    expect(routes).toEqual(["/", "/v1/stats", "/v1/stats/history"]);
  }, 120_000);

  test("serve --upstream: the per-upstream row, the saved tokens and TTFT with and without reuse equal /v1/stats", async () => {
    for (const prompt of [PROMPT_B, PROMPT_B]) {
      const answer = await proxy.post("/v1/completions", { model: engine.modelId, prompt, max_tokens: 3, temperature: 0 });
      expect(answer.status).toBe(200);
    }
    // Streamed (the proxy times their first token): one from the prefix cache, one the engine never saw.
    await streamedCompletion(proxy, { model: engine.modelId, prompt: PROMPT_B, max_tokens: 3, temperature: 0 });
    await streamedCompletion(proxy, { model: engine.modelId, prompt: PROMPT_C, max_tokens: 3, temperature: 0 });
    await Bun.sleep(600);
    const { dom, routes } = await openPage(proxy, "proxy");
    const stats = (await proxy.get("/v1/stats")).body;
    const upstream = stats.upstreams[0];
    expect(upstream.requests).toBe(4);
    expect(upstream.cached_tokens).toBeGreaterThan(0); // the engine reported its prefix-cache hit
    const first = upstream.first_token;
    expect(first.reused.requests).toBe(1);
    expect(first.not_reused.requests).toBe(1);
    expect(first.unknown.requests).toBe(0);

    expect(dom).toContain("proxy (serve --upstream)");
    const row = dom.match(/<tr data-upstream="0">(.*?)<\/tr>/s)?.[1];
    expect(row).toBeDefined();
    expect(row).toContain(upstream.url);
    expect([...row!.matchAll(/data-value="(\d+)"/g)].map((match) => Number(match[1]))).toEqual([upstream.requests, upstream.in_flight, upstream.prompt_tokens_forwarded, upstream.cached_tokens]);
    expect(Number(figure(dom, "cached_tokens"))).toBe(upstream.cached_tokens);
    // Computed in the model's tokens: what the engine reported as prompt, less cached (not the proxy's 4-characters estimate).
    const reported = stats.saved_tokens.upstreams[0];
    expect(reported.usage_reports).toBe(4);
    expect(Number(figure(dom, "computed_tokens"))).toBe(reported.prompt_tokens - reported.cached_tokens);
    expect(reported.prompt_tokens - reported.cached_tokens).toBeGreaterThan(0); // PROMPT_C was computed
    expect(Number(figure(dom, "queue_depth"))).toBe(upstream.in_flight);
    expect(Number(figure(dom, "ttft_reused_ms"))).toBeCloseTo((first.reused.seconds / first.reused.requests) * 1000, 9);
    expect(Number(figure(dom, "ttft_not_reused_ms"))).toBeCloseTo((first.not_reused.seconds / first.not_reused.requests) * 1000, 9);
    // The TTFT chart has both series, each with its point for the interval of the streamed requests.
    const ttftChart = dom.match(/<div class="chart" id="chart-ttft">.*?<\/div>/s)?.[0] ?? "";
    expect(ttftChart).not.toContain("not in this mode");
    expect(ttftChart).toContain("with reuse");
    expect(ttftChart).toContain("without reuse");
    expect(ttftChart).toMatch(/<(polyline|circle)/);
    expect(dom.match(/<div class="chart" id="chart-upstreams">.*?<\/div>/s)?.[0]).toContain(upstream.url);
    const routing = Object.fromEntries([...dom.matchAll(/data-routing="(\w+)" data-value="(\d+)"/g)].map((match) => [match[1], Number(match[2])]));
    expect(routing).toEqual(stats.proxy.routing_decisions);
    expect(routes).toEqual(["/", "/v1/stats", "/v1/stats/history"]);
  }, 120_000);
});
