/**
 * vLLM's operational endpoints over the built-in engine, end to end (a real server on an
 * ephemeral port, the real CPU runner, the tiny byte-level model): /tokenize and /detokenize
 * in vLLM's shapes, agreeing with what the generation routes bill; /health; and the latency
 * histograms in /metrics, counted against the requests made.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { BOS_TOKEN_ID, BYTE_TOKENIZER_VOCAB } from "../../src/model/byteTokenizer.ts";
import { INTER_TOKEN_LATENCY_BUCKETS, LatencyHistograms, REQUEST_LATENCY_BUCKETS, TIME_TO_FIRST_TOKEN_BUCKETS } from "../../src/server/latencyMetrics.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer, startTestServer, type TestServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

let model: { path: string; cleanup(): void };
let engine: GenerationEngine;
let api: TestServer;

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-llama");
  const latency = new LatencyHistograms();
  engine = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 128, threads: 2, latency });
  api = await startTestServer({ server: { engine, latency } });
}, 300_000);

afterAll(async () => {
  await api?.close();
  await engine?.close();
  model?.cleanup();
});

const bytes = (text: string) => [...new TextEncoder().encode(text)];

describe("POST /tokenize", () => {
  test("a prompt: the ids a completion starts from (BOS unless add_special_tokens is false), count, max_model_len; token_strs on request", async () => {
    const answer = await api.post("/tokenize", { model: "tiny-llama", prompt: "a b" });
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ count: 4, max_model_len: engine.maxModelLen, tokens: [BOS_TOKEN_ID, ...bytes("a b")], token_strs: null });
    const bare = await api.post("/tokenize", { prompt: "a b", add_special_tokens: false, return_token_strs: true });
    expect(bare.body).toMatchObject({ count: 3, tokens: bytes("a b"), token_strs: ["a", "Ġ", "b"] });
    expect((await api.post("/tokenize", { prompt: "é", return_token_strs: true })).body.token_strs).toEqual(["<s>", "Ã", "©"]);
  });

  test("the counts equal the prompt_tokens the generation routes bill, for prompts and chats", async () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: "there" }] },
    ];
    const chat = await api.post("/tokenize", { messages });
    const billedChat = await api.post("/v1/chat/completions", { messages, max_tokens: 1 });
    expect(chat.body.count).toBe(billedChat.body.usage.prompt_tokens);
    expect(chat.body.tokens).toEqual(engine.chatPromptIds([{ role: "system", content: "Be brief." }, { role: "user", content: "Hello\nthere" }]));
    // The template writes its BOS; add_special_tokens does not add a second one.
    expect((await api.post("/tokenize", { messages, add_special_tokens: true })).body.tokens).toEqual(chat.body.tokens);
    expect((await api.post("/tokenize", { messages, add_generation_prompt: false, chat_template_kwargs: { x: 1 } })).body.tokens).toEqual(chat.body.tokens);

    const prompt = "Once upon a time, ünïcödé";
    const billedPrompt = await api.post("/v1/completions", { prompt, max_tokens: 1 });
    expect((await api.post("/tokenize", { prompt })).body.count).toBe(billedPrompt.body.usage.prompt_tokens);
  });

  test("bad requests: 400 naming the field, another model 404", async () => {
    const cases: [unknown, number, string][] = [
      [{ prompt: "x", messages: [{ role: "user", content: "y" }] }, 400, "messages"],
      [{}, 400, "prompt"],
      [{ prompt: 5 }, 400, "prompt"],
      [{ messages: [] }, 400, "messages"],
      [{ messages: [{ role: "user", content: 5 }] }, 400, "messages[0].content"],
      [{ messages: [{ role: "user", content: [{ type: "image_url" }] }] }, 400, "messages[0].content[0]"],
      [{ messages: [{ role: "tool", content: "x" }] }, 400, "messages"],
      [{ messages: [{ role: "user", content: "x" }], continue_final_message: true }, 400, "continue_final_message"],
      [{ prompt: "x", add_special_tokens: "yes" }, 400, "add_special_tokens"],
      [{ prompt: "x", model: "other" }, 404, "model"],
    ];
    for (const [body, status, field] of cases) {
      const answer = await api.post("/tokenize", body);
      expect({ body, status: answer.status, field: answer.body?.error?.field }).toEqual({ body, status, field });
    }
  });
  test("100,000-deep nesting anywhere: 400 JSON, never a 500; documented in /openapi.json", async () => {
    const deep = (open: string, close: string) => open.repeat(100_000) + close.repeat(100_000);
    const bodies = [
      `{"messages":[{"role":"user","content":${deep("[", "]")}}]}`,
      `{"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":${deep('{"a":', "}").replace(/}$/, "1}")}}`,
      `{"prompt":"p","extra":${deep("[", "]")}}`,
      deep("[", "]"),
    ];
    for (const body of bodies) {
      const answer = await api.post("/tokenize", body);
      expect({ body: body.slice(0, 60), status: answer.status, error: typeof answer.body?.error?.message }).toEqual({ body: body.slice(0, 60), status: 400, error: "string" });
    }
    expect((await api.post("/detokenize", `{"tokens":${deep("[", "]")}}`)).status).toBe(400);
    const document = (await api.get("/openapi.json")).body;
    expect(document.paths["/tokenize"].post.requestBody.content["application/json"].schema.$ref).toBe("#/components/schemas/TokenizeRequest");
    expect(document.paths["/detokenize"].post.responses["200"].content["application/json"].schema.$ref).toBe("#/components/schemas/DetokenizeResponse");
  });
});

describe("POST /detokenize", () => {
  test("ids to text, special tokens kept; ids outside the vocabulary, negative ids and another model refused", async () => {
    const tokens = (await api.post("/tokenize", { prompt: "héllo" })).body.tokens;
    expect((await api.post("/detokenize", { model: "tiny-llama", tokens })).body).toEqual({ prompt: "<s>héllo" });
    expect((await api.post("/detokenize", { tokens: [] })).body).toEqual({ prompt: "" });
    const outside = await api.post("/detokenize", { tokens: [104, BYTE_TOKENIZER_VOCAB] });
    expect({ status: outside.status, field: outside.body.error.field }).toEqual({ status: 400, field: "tokens[1]" });
    expect(outside.body.error.message).toContain(`token id ${BYTE_TOKENIZER_VOCAB} is outside the vocabulary`);
    expect((await api.post("/detokenize", { tokens: [-1] })).body.error.field).toBe("tokens[0]");
    expect((await api.post("/detokenize", { tokens: "abc" })).body.error.field).toBe("tokens");
    expect((await api.post("/detokenize", { tokens: [1], model: "other" })).status).toBe(404);
  });
});

/** The histogram's series in /metrics text: cumulative bucket counts by bound, sum, count. */
function histogram(text: string, name: string): { buckets: [string, number][]; sum: number; count: number } {
  const lines = text.split("\n");
  const buckets = lines.flatMap((line) => {
    const match = new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\S+)$`).exec(line);
    return match === null ? [] : [[match[1]!, Number(match[2])] as [string, number]];
  });
  const value = (suffix: string) => Number(lines.find((line) => line.startsWith(`${name}_${suffix} `))?.split(" ")[1]);
  expect(text).toContain(`# TYPE ${name} histogram\n`);
  return { buckets, sum: value("sum"), count: value("count") };
}

describe("latency histograms in /metrics", () => {
  test("after N requests: TTFT, queue and e2e counts are N, inter-token counts the gaps; buckets cumulative and vLLM's", async () => {
    const names = ["ctxr_time_to_first_token_seconds", "ctxr_inter_token_latency_seconds", "ctxr_request_queue_time_seconds", "ctxr_e2e_request_latency_seconds"];
    const before = await api.get("/metrics");
    const [ttft0, itl0, queue0, e2e0] = names.map((name) => histogram(before.text, name));

    const answers = await Promise.all([
      api.post("/v1/completions", { prompt: "one", max_tokens: 5, temperature: 0, ignore_eos: true }),
      api.post("/v1/completions", { prompt: "two two", max_tokens: 1, ignore_eos: true }),
      api.post("/v1/chat/completions", { messages: [{ role: "user", content: "three" }], max_tokens: 7, ignore_eos: true }),
      api.post("/v1/completions", { prompt: "four", max_tokens: 3, n: 2, ignore_eos: true }),
    ]);
    for (const answer of answers) expect(answer.status).toBe(200);
    const requests = answers.reduce((n, answer) => n + answer.body.choices.length, 0);
    const gaps = answers.reduce((n, answer) => n + answer.body.usage.completion_tokens - answer.body.choices.length, 0);
    expect(requests).toBe(5);
    expect(gaps).toBe(4 + 0 + 6 + 2 * 2);

    const after = await api.get("/metrics");
    const [ttft, itl, queue, e2e] = names.map((name) => histogram(after.text, name));
    expect(ttft!.count - ttft0!.count).toBe(requests);
    expect(e2e!.count - e2e0!.count).toBe(requests);
    expect(queue!.count - queue0!.count).toBe(requests);
    expect(itl!.count - itl0!.count).toBe(gaps);
    expect(e2e!.sum).toBeGreaterThanOrEqual(ttft!.sum);
    for (const [name, series, bounds] of [
      [names[0], ttft!, TIME_TO_FIRST_TOKEN_BUCKETS],
      [names[1], itl!, INTER_TOKEN_LATENCY_BUCKETS],
      [names[2], queue!, REQUEST_LATENCY_BUCKETS],
      [names[3], e2e!, REQUEST_LATENCY_BUCKETS],
    ] as const) {
      expect({ name, bounds: series.buckets.map(([le]) => le) }).toEqual({ name, bounds: [...bounds.map(String), "+Inf"] });
      const counts = series.buckets.map(([, n]) => n);
      for (let i = 1; i < counts.length; i++) expect(counts[i]!).toBeGreaterThanOrEqual(counts[i - 1]!);
      expect(counts.at(-1)).toBe(series.count);
      expect(series.sum).toBeGreaterThan(0);
    }
  });

  test("the buckets are vLLM's (vllm/v1/metrics/buckets.py)", () => {
    expect(TIME_TO_FIRST_TOKEN_BUCKETS).toEqual([0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560]);
    expect(INTER_TOKEN_LATENCY_BUCKETS).toEqual([0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80]);
    expect(REQUEST_LATENCY_BUCKETS).toEqual([0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680]);
  });

  test("exposed at zero before any request; observations land in the right buckets", () => {
    const fresh = new LatencyHistograms();
    const zero = histogram(fresh.metrics(), "ctxr_e2e_request_latency_seconds");
    expect(zero.count).toBe(0);
    expect(zero.buckets.every(([, n]) => n === 0)).toBe(true);
    fresh.finished(0.3);
    fresh.finished(0.31);
    fresh.finished(9000);
    const seen = new Map(histogram(fresh.metrics(), "ctxr_e2e_request_latency_seconds").buckets);
    expect([seen.get("0.3"), seen.get("0.5"), seen.get("7680"), seen.get("+Inf")]).toEqual([1, 2, 2, 3]);
    expect(histogram(fresh.metrics(), "ctxr_e2e_request_latency_seconds").sum).toBeCloseTo(9000.61, 6);
  });
});

describe("GET /health", () => {
  test("200 with an empty body while the runner is alive, 503 naming it once the engine is shut down", async () => {
    const up = await api.get("/health");
    expect({ status: up.status, text: up.text }).toEqual({ status: 200, text: "" });
    const own = await GenerationEngine.open({ model: model.path, runner: buildRunner(), kvBlocks: 16, threads: 1 });
    const other = await startTestServer({ server: { engine: own } });
    try {
      expect((await other.get("/health")).status).toBe(200);
      expect((await other.get("/ready")).body).toEqual({ status: "ready" });
      await own.close();
      const down = await other.get("/health");
      expect(down.status).toBe(503);
      expect(down.body.error.message).toBe("the model runner is not running");
      // Readiness says the same, with the reason.
      const notReady = await other.get("/ready");
      expect(notReady.status).toBe(503);
      expect(notReady.body).toEqual({ status: "not_ready", reason: "the model runner is not running (it is restarted after a crash, or the server is stopping)" });
    } finally {
      await other.close();
      await own.close();
    }
  });

  test("without --model: /health answers for the service alone; /tokenize and /detokenize say how to load a model", async () => {
    const bare = await startTestServer();
    try {
      const health = await bare.get("/health");
      expect({ status: health.status, text: health.text }).toEqual({ status: 200, text: "" });
      for (const path of ["/tokenize", "/detokenize"]) {
        const answer = await bare.post(path, { prompt: "x" });
        expect(answer.status).toBe(404);
        expect(answer.body.error.message).toContain("no model is loaded; start ctxr serve with --model DIR");
      }
    } finally {
      await bare.close();
    }
  });
});

describe("ctxr serve --model (CLI)", () => {
  test("wires the histograms, /health and /tokenize", async () => {
    const spawned = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "32", "--threads", "1"], { CTXR_RUNNER: buildRunner() }, 60_000);
    try {
      expect(spawned.startLines.some((line) => line.includes("POST /v1/chat/completions, /v1/completions, /v1/responses, /tokenize, /detokenize; GET /v1/models"))).toBe(true);
      expect((await spawned.post("/v1/completions", { prompt: "x", max_tokens: 3, ignore_eos: true })).status).toBe(200);
      const metrics = (await spawned.get("/metrics")).text;
      expect(histogram(metrics, "ctxr_time_to_first_token_seconds").count).toBe(1);
      expect(histogram(metrics, "ctxr_inter_token_latency_seconds").count).toBe(2);
      expect((await spawned.get("/health")).status).toBe(200);
      expect((await spawned.post("/tokenize", { prompt: "x" })).body.tokens).toEqual([BOS_TOKEN_ID, ...bytes("x")]);
    } finally {
      spawned.kill("SIGTERM");
    }
    expect(await spawned.exited).toBe(0);
  });
});
