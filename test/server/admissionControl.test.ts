/**
 * Serving under load on `serve --model` (issue 26), against a real server on an ephemeral port with
 * the tiny model and one sequence running at a time (so that requests queue behind a long one):
 *
 * - a queued stream writes keep-alive comments until its tokens come, and the openai SDK reads it;
 * - past the waiting limit a request gets 429 with Retry-After and a JSON error naming the limit;
 * - a request past its deadline (`"ctxr": {"deadline_ms"}`) is cancelled, whether it waits or runs:
 *   504 naming the field, or when streamed an error event then [DONE]; its KV blocks come back;
 * - queue time is in usage.ctxr.queue_ms and in the queue-time histogram;
 * - a stream whose generation fails mid-way (the runner killed) ends with an error event and
 *   [DONE], and the failure is logged.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import OpenAI from "openai";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { LatencyHistograms } from "../../src/server/latencyMetrics.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { sseData, streamPost, waitFor } from "../proxy/proxyKit.ts";
import { startTestServer, type TestServer } from "./serverKit.ts";

setDefaultTimeout(60_000);

const MAX_WAITING = 3;
const KEEP_ALIVE_MS = 50;

let model: { path: string; cleanup(): void };
let engine: GenerationEngine;
let api: TestServer;
const logs: string[] = [];

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny");
  const latency = new LatencyHistograms();
  engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 512, threads: 2, maxBatch: 1, maxWaitingRequests: MAX_WAITING, latency });
  api = await startTestServer({ server: { engine, latency, log: (text) => void logs.push(text), sseKeepAliveMs: KEEP_ALIVE_MS } });
}, 300_000);

afterAll(async () => {
  await api?.close();
  await engine?.close();
  model?.cleanup();
});

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ messages: [{ role: "user", content }], temperature: 0, ...extra });
/** Long enough to keep the one running slot busy for a while (until aborted). */
const LONG = { max_tokens: 7000, ignore_eos: true };

/** A non-streamed request that runs until `abort()`; resolves once it holds the running slot. */
async function blocker(): Promise<{ abort(): void; done: Promise<unknown> }> {
  const controller = new AbortController();
  const done = fetch(`${api.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("block", LONG)), signal: controller.signal }).catch(() => null);
  await waitFor(() => engine.stats.running === 1 && engine.stats.decodeTokens > 0, 10_000);
  return { abort: () => controller.abort(), done };
}

async function idle(): Promise<void> {
  await waitFor(() => engine.stats.running === 0 && engine.stats.waiting === 0, 10_000);
}

/** KV blocks in use by requests (the prefix cache's blocks stay cached after a request). */
const requestBlocks = () => engine.stats.kvBlocksUsed - engine.stats.kvBlocksPrefixCached;

async function metric(name: string): Promise<number> {
  const text = (await api.get("/metrics")).text;
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no metric ${name}`);
  return Number(line.split(" ")[1]);
}

describe("queued streams", () => {
  test("a stream waiting behind a long request writes keep-alive comments until its tokens come; the openai SDK reads it", async () => {
    const block = await blocker();
    const raw = streamPost(`${api.url}/v1/chat/completions`, chat("queued raw", { max_tokens: 4, stream: true }));
    const sdk = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: "none", maxRetries: 0 });
    const viaSdk = (async () => {
      const parts = [];
      for await (const part of await sdk.chat.completions.create({ model: engine.modelId, messages: [{ role: "user", content: "queued sdk" }], max_tokens: 4, temperature: 0, stream: true })) parts.push(part);
      return parts;
    })();
    await Bun.sleep(KEEP_ALIVE_MS * 6);
    expect(engine.stats.waiting).toBe(2);
    block.abort();
    const [answer, parts] = await Promise.all([raw, viaSdk]);
    expect(answer.status).toBe(200);
    expect(answer.text).toContain(": keep-alive\n\n");
    // The comments came between the role chunk and the tokens.
    const events = answer.text.split("\n\n");
    expect(events[0]).toContain('"role":"assistant"');
    expect(events[1]).toBe(": keep-alive");
    expect(sseData(answer.text).at(-1)).toBe("[DONE]");
    expect(parts.at(-1)!.choices[0]!.finish_reason).toBe("length");
    expect(parts.every((part) => part.object === "chat.completion.chunk")).toBe(true);
    await idle();
  });
});

describe("the waiting limit", () => {
  test(`past ${MAX_WAITING} waiting requests: 429 with Retry-After and an error naming the limit, streamed or not; the queue is unchanged`, async () => {
    const block = await blocker();
    const rejectedBefore = await metric("ctxr_generation_requests_rejected_total");
    const waiting = Array.from({ length: MAX_WAITING }, (_, i) => api.post("/v1/chat/completions", chat(`waiting ${i}`, { max_tokens: 2 })));
    await waitFor(() => engine.stats.waiting === MAX_WAITING);
    for (const stream of [false, true]) {
      const refused = await api.post("/v1/chat/completions", chat("one too many", { max_tokens: 2, stream }));
      expect(refused.status).toBe(429);
      expect(refused.headers.get("content-type")).toContain("application/json");
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(refused.body.error.message).toContain(`--max-waiting-requests ${MAX_WAITING}`);
    }
    // n choices count one each: two more cannot wait either, and none of them stays queued.
    const completions = await api.post("/v1/completions", { prompt: "x", max_tokens: 2, n: 2 });
    expect(completions.status).toBe(429);
    expect(engine.stats.waiting).toBe(MAX_WAITING);
    expect(await metric("ctxr_generation_requests_rejected_total")).toBe(rejectedBefore + 3);
    expect(await metric("ctxr_generation_max_waiting")).toBe(MAX_WAITING);
    block.abort();
    for (const answer of await Promise.all(waiting)) expect(answer.status).toBe(200);
    await idle();
  });
});

describe("deadlines", () => {
  test("a running request past ctxr.deadline_ms: 504 naming the field; its KV blocks come back", async () => {
    const timedOutBefore = await metric("ctxr_generation_requests_timed_out_total");
    let mostBlocks = 0;
    const answer = api.post("/v1/chat/completions", chat("deadline running", { ...LONG, ctxr: { deadline_ms: 400 } }));
    let settled = false;
    void answer.finally(() => (settled = true));
    while (!settled) {
      mostBlocks = Math.max(mostBlocks, requestBlocks());
      await Bun.sleep(5);
    }
    const refused = await answer;
    expect(refused.status).toBe(504);
    expect(refused.body.error.field).toBe("ctxr.deadline_ms");
    expect(refused.body.error.message).toContain("deadline of 400 ms");
    expect(refused.body.error.message).toMatch(/generated [1-9]\d* tokens/);
    // It held blocks while it ran; they are all back once it is gone.
    expect(mostBlocks).toBeGreaterThan(0);
    await idle();
    expect(requestBlocks()).toBe(0);
    expect((await engine.runner.queryInfo()).free_blocks).toBe(engine.stats.kvBlocksTotal - engine.stats.kvBlocksUsed);
    expect(await metric("ctxr_generation_requests_timed_out_total")).toBe(timedOutBefore + 1);
  });

  test("a waiting request past its deadline leaves the queue: 504 saying it was still waiting", async () => {
    const block = await blocker();
    const refused = await api.post("/v1/chat/completions", chat("deadline waiting", { max_tokens: 2, ctxr: { deadline_ms: 150 } }));
    expect(refused.status).toBe(504);
    expect(refused.body.error.message).toContain("still waiting in the queue");
    expect(engine.stats.waiting).toBe(0);
    block.abort();
    await idle();
    expect(requestBlocks()).toBe(0);
  });

  test("a streamed request past its deadline ends with an error event, then [DONE]; the failure is logged", async () => {
    const answer = await streamPost(`${api.url}/v1/chat/completions`, chat("deadline streamed", { ...LONG, stream: true, ctxr: { deadline_ms: 300 } }));
    expect(answer.status).toBe(200);
    const events = sseData(answer.text);
    expect(events.at(-1)).toBe("[DONE]");
    const error = JSON.parse(events.at(-2)!).error;
    expect(error.code).toBe("deadline_exceeded");
    expect(error.type).toBe("server_error");
    expect(error.param).toBe("ctxr.deadline_ms");
    expect(error.message).toContain("deadline of 300 ms");
    expect(events.length).toBeGreaterThan(3); // tokens came before the deadline
    expect(logs.join("")).toContain("a streamed answer failed: the request did not finish within its deadline of 300 ms");
    await idle();
    expect(requestBlocks()).toBe(0);
  });

  test("deadline_ms must be a positive integer of milliseconds", async () => {
    for (const deadline of [0, -5, 1.5, "soon", 86_400_001]) {
      const refused = await api.post("/v1/chat/completions", chat("bad deadline", { max_tokens: 2, ctxr: { deadline_ms: deadline } }));
      expect(refused.status).toBe(400);
      expect(refused.body.error.field).toBe("ctxr.deadline_ms");
    }
  });
});

describe("queue time", () => {
  test("usage.ctxr.queue_ms says how long a request waited; the queue-time histogram counts it", async () => {
    const countBefore = await metric("ctxr_request_queue_time_seconds_count");
    const block = await blocker();
    const queued = api.post("/v1/chat/completions", chat("queue time", { max_tokens: 2 }));
    await waitFor(() => engine.stats.waiting === 1);
    await Bun.sleep(300);
    block.abort();
    const answer = await queued;
    expect(answer.status).toBe(200);
    expect(answer.body.usage.ctxr.queue_ms).toBeGreaterThanOrEqual(300);
    expect(answer.body.usage.ctxr.ttft_ms).toBeGreaterThanOrEqual(answer.body.usage.ctxr.queue_ms);
    expect(await metric("ctxr_request_queue_time_seconds_count")).toBe(countBefore + 2);
    await idle();
  });
});

describe("failures", () => {
  test("a stream whose generation fails mid-way (the runner killed) ends with an error event and [DONE]; the failure is logged", async () => {
    const url = `${api.url}/v1/chat/completions`;
    const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("crash", { ...LONG, stream: true })) });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    while (sseData(text).length < 4) text += decoder.decode((await reader.read()).value!, { stream: true });
    process.kill(engine.runner.pid!, "SIGKILL");
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    const events = sseData(text);
    expect(events.at(-1)).toBe("[DONE]");
    const error = JSON.parse(events.at(-2)!).error;
    expect(error.type).toBe("server_error");
    expect(error.code).toBe("internal_error");
    expect(error.message).toContain("crashed");
    expect(logs.join("")).toContain("a streamed answer failed: the model runner crashed");
    // The engine carries on after restarting its runner.
    const next = await api.post("/v1/chat/completions", chat("after the crash", { max_tokens: 2 }));
    expect(next.status).toBe(200);
  });
});
