/**
 * Streamed answers' tokens through the proxy, with a real upstream: `serve --model` (tiny model, CPU
 * runner) behind `serve --upstream`, both child processes. The proxy asks the engine for the usage
 * of every streamed request; a client that did not ask gets exactly the stream the engine sends
 * without the option (no usage chunk, no usage member), a client that asked gets it unchanged, and
 * /v1/stats and /metrics count both answers' real prompt and completion tokens and their time to
 * first token. An upstream that refuses stream_options (a hosted API can; ctxr's engine cannot be
 * made to, so a fake one stands in) gets the client's own body from then on, said once in the log.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { parsePrometheusText } from "../helpers/prometheusText.ts";
import { spawnServer, stopSpawned, type SpawnedServer } from "../server/serverKit.ts";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { startProxy, streamPost, type ProxyServer } from "./proxyKit.ts";

const MODEL = "tiny";
const REQUEST = { model: MODEL, max_tokens: 6, temperature: 0, stream: true, messages: [{ role: "user", content: "Tell me about the harbour of Lune and its lighthouse." }] };
const WITH_USAGE = { ...REQUEST, stream_options: { include_usage: true } };

let model: { path: string; cleanup(): void };
let engine: SpawnedServer;
let proxy: SpawnedServer;
const streams: Record<"direct" | "directWithUsage" | "proxied" | "proxiedWithUsage", string> = { direct: "", directWithUsage: "", proxied: "", proxiedWithUsage: "" };

/** The stream with what differs in every answer (its id, creation time, and the engine's own timings in usage.ctxr) made equal. */
const normalized = (text: string) =>
  text
    .replace(/"id":"[^"]*"/g, '"id":"ID"')
    .replace(/"created":\d+/g, '"created":0')
    .replace(/"(ttft_ms|queue_ms)":[\d.]+/g, '"$1":0');
const dataEvents = (text: string) => text.split("\n").filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)));

async function streamed(server: SpawnedServer, body: unknown): Promise<string> {
  const answer = await streamPost(`${server.url}/v1/chat/completions`, body);
  expect(answer.status).toBe(200);
  expect(answer.headers.get("content-type")).toStartWith("text/event-stream");
  return answer.text;
}

beforeAll(async () => {
  model = tinyModelFolder({}, MODEL);
  engine = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "256", "--threads", "1"], { CTXR_RUNNER: buildRunner() }, 60_000);
  proxy = await spawnServer(["--in-memory", "--upstream", engine.url], {}, 60_000);
  streams.direct = await streamed(engine, REQUEST);
  streams.directWithUsage = await streamed(engine, WITH_USAGE);
  streams.proxied = await streamed(proxy, REQUEST);
  streams.proxiedWithUsage = await streamed(proxy, WITH_USAGE);
}, 300_000);

afterAll(async () => {
  await stopSpawned(proxy, engine);
  model?.cleanup();
}, 60_000);

describe("a real engine behind the proxy", () => {
  test("a client that did not ask for usage gets the engine's stream without it, every content chunk as the engine sends it", () => {
    expect(streams.direct).not.toContain('"usage"');
    expect(streams.proxied).not.toContain('"usage"');
    expect(dataEvents(streams.proxied).length).toBeGreaterThanOrEqual(3);
    expect(normalized(streams.proxied)).toBe(normalized(streams.direct));
    expect(streams.proxied.endsWith("data: [DONE]\n\n")).toBe(true);
  });

  test("a client that asked gets the engine's stream with its usage, unchanged", () => {
    expect(normalized(streams.proxiedWithUsage)).toBe(normalized(streams.directWithUsage));
    expect(dataEvents(streams.proxiedWithUsage).at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: expect.any(Number), completion_tokens: expect.any(Number) } });
  });

  test("/v1/stats and /metrics count both streamed answers' real prompt and completion tokens, and their time to first token", async () => {
    const usage = dataEvents(streams.proxiedWithUsage).at(-1).usage;
    // Greedy, same prompt, same max_tokens: the answer the client saw without usage had the same counts.
    expect(dataEvents(streams.proxied).filter((e) => e.choices.length > 0 && e.choices[0].delta.content).length).toBe(
      dataEvents(streams.proxiedWithUsage).filter((e) => e.choices.length > 0 && e.choices[0].delta.content).length,
    );
    expect(usage.completion_tokens).toBeGreaterThan(0);
    const stats = (await proxy.get("/v1/stats")).body;
    const saved = stats.saved_tokens.upstreams[0];
    expect(saved).toMatchObject({ usage_reports: 2, prompt_tokens: 2 * usage.prompt_tokens, completion_tokens: 2 * usage.completion_tokens });
    expect(stats.saved_tokens.prompt_tokens).toBe(2 * usage.prompt_tokens);
    // The engine's own account saw the same prompts: four of them (two direct, two proxied).
    expect((await engine.get("/v1/stats")).body.saved_tokens.engine.prompt_tokens).toBe(4 * usage.prompt_tokens);

    const firstToken = stats.upstreams[0].first_token;
    expect(firstToken.unknown.requests).toBe(0);
    expect(firstToken.reused.requests + firstToken.not_reused.requests).toBe(2);
    // The direct requests put the prompt in the engine's prefix cache: the proxied ones reused it.
    expect(firstToken.reused.requests).toBe(2);
    expect(firstToken.reused.seconds).toBeGreaterThan(0);

    const metrics = parsePrometheusText((await proxy.get("/metrics")).text);
    const sample = (name: string, labels: Record<string, string> = {}) =>
      metrics.get(name)!.samples.find((s) => Object.entries(labels).every(([key, value]) => s.labels[key] === value))!.value;
    expect(sample("ctxr_upstream_prompt_tokens_total")).toBe(2 * usage.prompt_tokens);
    expect(sample("ctxr_upstream_completion_tokens_total")).toBe(2 * usage.completion_tokens);
    expect(sample("ctxr_upstream_usage_reports_total")).toBe(2);
    expect(sample("ctxr_upstream_first_token_requests_total", { reuse: "reused" })).toBe(2);
    expect(sample("ctxr_upstream_first_token_seconds_total", { reuse: "reused" })).toBeCloseTo(firstToken.reused.seconds, 9);
  });
});

describe("an upstream that refuses stream_options", () => {
  let upstream: FakeUpstream;
  let ctxr: ProxyServer;
  beforeAll(async () => {
    upstream = await startFakeUpstream();
    upstream.custom((request) =>
      request.json?.stream_options !== undefined
        ? new Response(JSON.stringify({ error: { message: "Unrecognized request argument supplied: stream_options", type: "invalid_request_error" } }), { status: 400, headers: { "content-type": "application/json" } })
        : undefined,
    );
    ctxr = await startProxy({ upstreams: [upstream.url] });
  });
  afterAll(async () => {
    await ctxr?.close();
    await upstream?.stop();
  });

  test("gets the client's own body, once tried and then remembered, said once in the log", async () => {
    const body = { model: "m", stream: true, messages: [{ role: "user", content: "hello there" }] };
    for (let i = 0; i < 3; i++) {
      const answer = await streamPost(`${ctxr.url}/v1/chat/completions`, body);
      expect(answer.status).toBe(200);
      expect(answer.text).toContain("forty-two");
    }
    // The first request twice (with the option, refused; then without), the next two once each, without it.
    expect(upstream.requests.map((r) => r.json.stream_options)).toEqual([{ include_usage: true }, undefined, undefined, undefined]);
    expect(upstream.requests.slice(1).every((r) => r.text === JSON.stringify(body))).toBe(true);
    expect(ctxr.logs.filter((line) => line.includes("refused stream_options"))).toHaveLength(1);
    const stats = (await ctxr.get("/v1/stats")).body.upstreams[0];
    expect(stats.errors).toBe(0);
    // Its answers' usage was not read: their first tokens are timed, reuse unknown.
    expect(stats.first_token.unknown.requests).toBe(3);
  });

  test("a client's own bad request is relayed as the upstream answered it, not retried", async () => {
    const before = upstream.requests.length;
    upstream.fail(400, JSON.stringify({ error: { message: "max_tokens is too large" } }));
    const answer = await fetch(`${ctxr.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "x" }] }) });
    expect(answer.status).toBe(400);
    expect(await answer.json()).toEqual({ error: { message: "max_tokens is too large" } });
    expect(upstream.requests.length).toBe(before + 1);
  });
});
