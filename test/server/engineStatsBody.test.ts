/**
 * /v1/stats `engine` on a real `serve --model` (tiny model, CPU runner, port 0): queue, KV blocks
 * and first tokens by reuse, agreeing with the answers' usage and with /metrics.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { LatencyHistograms } from "../../src/server/latencyMetrics.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { startTestServer, type TestServer } from "./serverKit.ts";

let model: { path: string; cleanup(): void };
let engine: GenerationEngine;
let api: TestServer;

beforeAll(async () => {
  model = tinyModelFolder({}, "engine-stats");
  const latency = new LatencyHistograms();
  engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 128, threads: 2, latency });
  api = await startTestServer({ server: { engine, latency } });
}, 300_000);

afterAll(async () => {
  await api?.close();
  await engine?.close();
  model?.cleanup();
});

function metricValue(text: string, line: string): number {
  const found = text.split("\n").find((candidate) => candidate.startsWith(`${line} `));
  if (found === undefined) throw new Error(`no ${line} in /metrics`);
  return Number(found.slice(line.length + 1));
}

test("first tokens split by reuse: the sums of the answers' usage, the same in /metrics", async () => {
  const before = (await api.get("/v1/stats")).body.engine;
  expect(before.first_token).toEqual({ reused: { requests: 0, seconds: 0 }, not_reused: { requests: 0, seconds: 0 }, prompt_tokens_cached: 0, prompt_tokens_computed: 0 });
  expect(before.kv_blocks_total).toBe(128);

  const prompt = "A prompt long enough to fill a few KV blocks, sent twice. ".repeat(3);
  const usages = [];
  for (const text of [prompt, prompt, "Something else entirely."]) {
    const answer = await api.post("/v1/completions", { prompt: text, max_tokens: 2 });
    expect(answer.status).toBe(200);
    usages.push(answer.body.usage);
  }
  const cached = usages.map((usage) => usage.ctxr.prompt_tokens_prefix_reused + usage.ctxr.prompt_tokens_chunk_reused);
  expect(cached[0]).toBe(0);
  expect(cached[1]).toBeGreaterThan(0); // the repeat hit the prefix cache

  const stats = (await api.get("/v1/stats")).body.engine;
  const first = stats.first_token;
  expect(first.reused.requests).toBe(cached.filter((n) => n > 0).length);
  expect(first.not_reused.requests).toBe(cached.filter((n) => n === 0).length);
  expect(first.prompt_tokens_cached).toBe(cached.reduce((a, b) => a + b, 0));
  expect(first.prompt_tokens_cached + first.prompt_tokens_computed).toBe(usages.reduce((sum, usage) => sum + usage.prompt_tokens, 0));
  const reusedMs = usages.filter((_, i) => cached[i]! > 0).reduce((sum, usage) => sum + usage.ctxr.ttft_ms, 0);
  expect(first.reused.seconds * 1000).toBeCloseTo(reusedMs, 1);
  expect(stats).toMatchObject({ running: 0, waiting: 0, block_size: engine.info.block_size });
  expect(stats.kv_blocks_used).toBeGreaterThan(0);

  const metrics = (await api.get("/metrics")).text;
  expect(metricValue(metrics, 'ctxr_first_token_prompt_tokens_total{kv="cached"}')).toBe(first.prompt_tokens_cached);
  expect(metricValue(metrics, 'ctxr_first_token_prompt_tokens_total{kv="computed"}')).toBe(first.prompt_tokens_computed);
  expect(metricValue(metrics, 'ctxr_time_to_first_token_by_reuse_seconds_count{reuse="reused"}')).toBe(first.reused.requests);
  expect(metricValue(metrics, 'ctxr_time_to_first_token_by_reuse_seconds_count{reuse="none"}')).toBe(first.not_reused.requests);
  expect(metricValue(metrics, 'ctxr_time_to_first_token_by_reuse_seconds_sum{reuse="reused"}')).toBeCloseTo(first.reused.seconds, 9);
  expect(metricValue(metrics, "ctxr_generation_kv_blocks_used")).toBe(stats.kv_blocks_used);
  expect(metricValue(metrics, "ctxr_time_to_first_token_seconds_count")).toBe(3);
}, 120_000);

test("the OpenAPI document describes the engine block", async () => {
  const doc = (await api.get("/openapi.json")).body;
  expect(doc.components.schemas.StatsResponse.properties.engine).toBeDefined();
  expect(doc.components.schemas.EngineStats.properties.first_token).toBeDefined();
});
