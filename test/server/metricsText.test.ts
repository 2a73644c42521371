/**
 * Every /metrics answer parses as Prometheus text under a strict parser, with each family once:
 * `ctxr serve` as the online service, with the built-in engine (--model, KV events published too)
 * and as a proxy in front of two engines. Each server is the real CLI, spawned.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { PROMETHEUS_CONTENT_TYPE } from "../../src/http/prometheus.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { parsePrometheusText, type ParsedFamily, type ParsedType } from "../helpers/prometheusText.ts";
import { startFakeUpstream, type FakeUpstream } from "../proxy/fakeUpstream.ts";
import { spawnServer, type SpawnedServer } from "./serverKit.ts";

async function scrape(server: SpawnedServer): Promise<Map<string, ParsedFamily>> {
  const answer = await server.get("/metrics");
  expect(answer.status).toBe(200);
  expect(answer.headers.get("content-type")).toBe(PROMETHEUS_CONTENT_TYPE);
  return parsePrometheusText(answer.text);
}

function expectFamilies(families: Map<string, ParsedFamily>, expected: Record<string, ParsedType>): void {
  for (const [name, type] of Object.entries(expected)) expect({ name, type: families.get(name)?.type }).toEqual({ name, type });
}

async function withServer(args: string[], env: Record<string, string>, use: (server: SpawnedServer) => Promise<void>): Promise<void> {
  const server = await spawnServer(["--in-memory", ...args], env, 60_000);
  try {
    await use(server);
  } finally {
    server.kill("SIGTERM");
    await server.exited;
  }
}

describe("/metrics is valid Prometheus text", () => {
  let model: { path: string; cleanup(): void };
  let upstreams: FakeUpstream[];
  beforeAll(async () => {
    model = tinyModelFolder({}, "metrics-text");
    upstreams = [await startFakeUpstream(), await startFakeUpstream()];
  });
  afterAll(async () => {
    model?.cleanup();
    for (const upstream of upstreams ?? []) await upstream.stop();
  });

  test("serve (the online service)", async () => {
    await withServer([], {}, async (server) => {
      expect((await server.post("/v1/reorder", { contexts: [[1, 2, 3], [3, 2, 9]] })).status).toBe(200);
      expect((await server.get("/no/such/route")).status).toBe(404);
      const families = await scrape(server);
      expectFamilies(families, { ctxr_http_requests_total: "counter", ctxr_http_request_duration_seconds: "histogram", ctxr_index_contexts: "gauge", ctxr_reordered_contexts_total: "counter" });
      const reorders = families.get("ctxr_http_requests_total")!.samples.find((s) => s.labels.route === "/v1/reorder");
      expect(reorders?.value).toBe(1);
    });
  });

  test("serve --model with --kv-events-publish", async () => {
    await withServer(["--model", model.path, "--kv-blocks", "32", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0"], { CTXR_RUNNER: buildRunner() }, async (server) => {
      expect((await server.post("/v1/completions", { prompt: "x", max_tokens: 3, ignore_eos: true })).status).toBe(200);
      const families = await scrape(server);
      expectFamilies(families, {
        ctxr_http_request_duration_seconds: "histogram",
        ctxr_generation_decode_tokens_total: "counter",
        ctxr_generation_kv_blocks_total: "gauge",
        ctxr_time_to_first_token_seconds: "histogram",
        ctxr_inter_token_latency_seconds: "histogram",
        ctxr_kv_events_batches_total: "counter",
        ctxr_kv_events_subscribers: "gauge",
      });
      expect(families.get("ctxr_time_to_first_token_seconds")!.samples.find((s) => s.name.endsWith("_count"))!.value).toBe(1);
    });
  }, 120_000);

  test("serve --upstream (the proxy, two engines)", async () => {
    await withServer(["--upstream", upstreams[0]!.url, "--upstream", upstreams[1]!.url], {}, async (server) => {
      const chat = { model: "m", messages: [{ role: "user", content: "Q?" }], documents: [{ id: "d1", text: "one document" }] };
      expect((await server.post("/v1/chat/completions", chat)).status).toBe(200);
      const families = await scrape(server);
      expectFamilies(families, { ctxr_http_requests_total: "counter", ctxr_proxy_relaying: "gauge", ctxr_proxy_routing_decisions_total: "counter" });
      const upstreamLabels = new Set<string>();
      for (const family of families.values()) for (const sample of family.samples) if (sample.labels.upstream !== undefined) upstreamLabels.add(sample.labels.upstream);
      expect(upstreamLabels).toEqual(new Set(upstreams.map((u) => u.url)));
    });
  });
});
