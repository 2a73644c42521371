/**
 * The OpenAI-compatible generation API end to end: a real server (Bun.serve on an
 * ephemeral port) over the built-in engine, i.e. the real CPU runner (built in
 * beforeAll) and the tiny model of the reference fixture. Greedy output equals the
 * PyTorch reference, streaming equals non-streaming, concurrent requests are
 * batched, seeds repeat, stop strings, logprobs, usage, 400s, client disconnects,
 * a runner crash mid-generation, and `ctxr serve --model` from the CLI.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../../src/engine/generationEngine.ts";
import { ContextService } from "../../../src/online/contextService.ts";
import { startServer, type RunningServer } from "../../../src/server/serve.ts";
import { runCli } from "../../helpers/cli.ts";
import { TINY_REFERENCE, buildRunner, tinyModelFolder } from "../../helpers/engineKit.ts";
import { client, spawnServer, type Client } from "../serverKit.ts";

setDefaultTimeout(120_000);

let model: { path: string; cleanup(): void };
let runnerPath = "";
let engine: GenerationEngine;
let service: ContextService;
let server: RunningServer;
let api: Client;

beforeAll(async () => {
  runnerPath = buildRunner();
  model = tinyModelFolder({}, "tiny-llama");
  engine = await GenerationEngine.open({ model: model.path, runner: runnerPath, kvBlocks: 128, threads: 2 });
  service = await ContextService.open({ dataDir: null });
  server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  api = client(server.url);
}, 300_000);

afterAll(async () => {
  await server?.stop(1000);
  await engine?.close();
  await service?.close();
  model?.cleanup();
});

const expectedText = () => engine.tokenizer.decode(TINY_REFERENCE.generated_ids);
const greedy = { temperature: 0, max_tokens: TINY_REFERENCE.generated_ids.length };

interface SseAnswer {
  status: number;
  events: any[];
  done: boolean;
  contentType: string;
}

/** POSTs with "stream": true and reads every `data:` event. */
async function stream(path: string, body: Record<string, unknown>): Promise<SseAnswer> {
  const response = await fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
  const text = await response.text();
  const events: any[] = [];
  let done = false;
  for (const block of text.split("\n\n")) {
    if (block.trim() === "") continue;
    expect(block.startsWith("data: ")).toBe(true);
    const data = block.slice(6);
    if (data === "[DONE]") done = true;
    else events.push(JSON.parse(data));
  }
  return { status: response.status, events, done, contentType: response.headers.get("content-type") ?? "" };
}

const chatText = (events: any[]) => events.map((e) => e.choices?.[0]?.delta?.content ?? "").join("");
const completionText = (events: any[]) => events.map((e) => e.choices?.[0]?.text ?? "").join("");

async function metric(name: string): Promise<number> {
  const text = (await api.get("/metrics")).text;
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.split(" ")[1]);
}

describe("POST /v1/completions", () => {
  test("greedy output for the fixture's token ids equals the PyTorch reference", async () => {
    const answer = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ object: "text_completion", model: "tiny-llama" });
    expect(answer.body.id).toStartWith("cmpl-");
    expect(answer.body.choices).toEqual([{ index: 0, text: expectedText(), logprobs: null, finish_reason: "length" }]);
    expect(answer.body.usage).toMatchObject({ prompt_tokens: 13, completion_tokens: 8, total_tokens: 21 });
    // usage.ctxr: a plain prompt is computed in full.
    expect(answer.body.usage.ctxr).toMatchObject({ prompt_tokens_prefix_reused: 0, prompt_tokens_chunk_reused: 0, prompt_tokens_recomputed: 0, prompt_tokens_computed: 13 });
    expect(answer.body.usage.ctxr.ttft_ms).toBeGreaterThan(0);
  });

  test("a text prompt is tokenized with BOS like the fixture", async () => {
    const answer = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_text, model: "tiny-llama", ...greedy });
    expect(answer.body.choices[0].text).toBe(expectedText());
    expect(answer.body.usage.prompt_tokens).toBe(TINY_REFERENCE.prompt_ids.length);
  });

  test("streaming gives the same text, then a finish chunk, usage and [DONE]", async () => {
    const answer = await stream("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy, stream_options: { include_usage: true } });
    expect(answer.status).toBe(200);
    expect(answer.contentType).toStartWith("text/event-stream");
    expect(answer.done).toBe(true);
    expect(completionText(answer.events)).toBe(expectedText());
    const ids = new Set(answer.events.map((e) => e.id));
    expect(ids.size).toBe(1);
    const last = answer.events[answer.events.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 13, completion_tokens: 8, total_tokens: 21, ctxr: { prompt_tokens_computed: 13 } });
    const finish = answer.events[answer.events.length - 2];
    expect(finish.choices[0].finish_reason).toBe("length");
    for (const event of answer.events.slice(0, -1)) {
      expect(event.object).toBe("text_completion");
      expect(event.usage).toBeNull();
    }
  });

  test("several prompts: one choice each, usage summed", async () => {
    const answer = await api.post("/v1/completions", { prompt: [TINY_REFERENCE.prompt_ids, [256, 65, 66]], ...greedy });
    expect(answer.status).toBe(200);
    expect(answer.body.choices.map((c: any) => c.index)).toEqual([0, 1]);
    expect(answer.body.choices[0].text).toBe(expectedText());
    expect(answer.body.usage.prompt_tokens).toBe(16);
    expect(answer.body.usage.completion_tokens).toBe(16);
  });

  test("echo: the prompt's text first; with logprobs its tokens too, each with the logprob a cold prefill gives it", async () => {
    const text = "The mill closes";
    const plain = await api.post("/v1/completions", { prompt: text, ...greedy });
    const echoed = await api.post("/v1/completions", { prompt: text, ...greedy, echo: true });
    expect(echoed.body.choices[0].text).toBe(text + plain.body.choices[0].text);
    const ids = engine.completionPromptIds(text);
    const withLogprobs = await api.post("/v1/completions", { prompt: ids, ...greedy, echo: true, logprobs: 2 });
    const lp = withLogprobs.body.choices[0].logprobs;
    expect(lp.tokens.length).toBe(ids.length + 8);
    expect(lp.tokens.slice(0, ids.length)).toEqual(ids.map((id) => engine.tokenizer.tokenText(id)));
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
    expect(withLogprobs.body.choices[0].text).toBe(engine.tokenizer.decode(ids) + plain.body.choices[0].text);
    // Reference: prompt token i's raw logprob after ids[0..i), read off a one-token request that
    // forces it with logit_bias (logprobs are the raw logits').
    for (let i = 1; i < ids.length; i += 3) {
      const one = await api.post("/v1/completions", { prompt: ids.slice(0, i), temperature: 0, max_tokens: 1, logprobs: 0, logit_bias: { [String(ids[i])]: 100 } });
      expect(Math.abs(lp.token_logprobs[i] - one.body.choices[0].logprobs.token_logprobs[0])).toBeLessThan(1e-4);
      expect(Object.keys(lp.top_logprobs[i]).length).toBeGreaterThanOrEqual(2);
    }
    // Streamed, two choices: each begins with the prompt and its logprobs.
    const streamed = await stream("/v1/completions", { prompt: ids, ...greedy, echo: true, logprobs: 1, n: 2 });
    for (const index of [0, 1]) {
      const first = streamed.events.find((e) => e.choices[0]?.index === index).choices[0];
      expect(first.text).toBe(engine.tokenizer.decode(ids));
      expect(first.logprobs.tokens.length).toBe(ids.length);
      expect(first.logprobs.token_logprobs.slice(1)).toEqual(lp.token_logprobs.slice(1, ids.length).map((x: number) => expect.closeTo(x, 4)));
    }
  });

  test("best_of: the n candidates of highest logprob per token among best_of, which are the single-seed answers", async () => {
    const body = { prompt: "The river", temperature: 1.2, max_tokens: 6, seed: 40 };
    const best = await api.post("/v1/completions", { ...body, n: 2, best_of: 5 });
    expect(best.status).toBe(200);
    expect(best.body.choices[0].logprobs).toBeNull();
    const candidates = await Promise.all([0, 1, 2, 3, 4].map((k) => api.post("/v1/completions", { ...body, seed: 40 + k, logprobs: 0 })));
    const scored = candidates.map((c, k) => ({ k, text: c.body.choices[0].text, score: c.body.choices[0].logprobs.token_logprobs.reduce((a: number, b: number) => a + b, 0) / c.body.choices[0].logprobs.token_logprobs.length }));
    scored.sort((a, b) => b.score - a.score || a.k - b.k);
    expect(best.body.choices.map((c: { text: string }) => c.text)).toEqual(scored.slice(0, 2).map((c) => c.text));
    expect(best.body.choices.map((c: { index: number }) => c.index)).toEqual([0, 1]);
    // Every candidate's tokens are billed.
    expect(best.body.usage.completion_tokens).toBe(candidates.reduce((sum, c) => sum + c.body.usage.completion_tokens, 0));
    expect((await api.post("/v1/completions", { ...body, n: 3, best_of: 2 })).body.error.field).toBe("best_of");
    expect((await api.post("/v1/completions", { ...body, best_of: 2, stream: true })).body.error.message).toMatch(/cannot be streamed/);
  });

  test("logprobs N: each token's logprob, N alternatives, offsets", async () => {
    const answer = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy, logprobs: 3 });
    const logprobs = answer.body.choices[0].logprobs;
    expect(logprobs.tokens.length).toBe(8);
    expect(logprobs.token_logprobs.length).toBe(8);
    expect(logprobs.text_offset.length).toBe(8);
    expect(logprobs.text_offset[0]).toBe(0);
    logprobs.top_logprobs.forEach((top: Record<string, number>, i: number) => {
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
      expect(Object.keys(top).length).toBeGreaterThanOrEqual(1);
      // Greedy: the chosen token is the most likely.
      expect(Math.max(...Object.values(top))).toBeCloseTo(logprobs.token_logprobs[i], 9);
      expect(logprobs.token_logprobs[i]).toBeLessThan(0);
    });
    expect(logprobs.tokens.join("")).toBe(TINY_REFERENCE.generated_ids.map((id) => engine.tokenizer.tokenText(id)).join(""));
  });

  test("an empty text prompt is just BOS", async () => {
    const answer = await api.post("/v1/completions", { prompt: "", temperature: 0, max_tokens: 2 });
    expect(answer.status).toBe(200);
    expect(answer.body.usage.prompt_tokens).toBe(1);
  });

  test("max_tokens defaults to 16", async () => {
    const answer = await api.post("/v1/completions", { prompt: [256, 72], temperature: 0 });
    expect(answer.body.usage.completion_tokens).toBe(16);
  });
});

describe("POST /v1/chat/completions", () => {
  const messages = [{ role: "user", content: "Hello" }];

  test("non-streaming and streaming give the same text and usage", async () => {
    const whole = await api.post("/v1/chat/completions", { messages, temperature: 0, max_tokens: 10 });
    expect(whole.status).toBe(200);
    expect(whole.body).toMatchObject({ object: "chat.completion", model: "tiny-llama" });
    expect(whole.body.id).toStartWith("chatcmpl-");
    const choice = whole.body.choices[0];
    expect(choice.message.role).toBe("assistant");
    expect(choice.finish_reason).toBe("length");
    const promptIds = engine.tokenizer.encode(engine.tokenizer.applyChatTemplate(messages));
    expect(whole.body.usage).toMatchObject({ prompt_tokens: promptIds.length, completion_tokens: 10, total_tokens: promptIds.length + 10 });

    const streamed = await stream("/v1/chat/completions", { messages, temperature: 0, max_tokens: 10, stream_options: { include_usage: true } });
    expect(streamed.done).toBe(true);
    expect(streamed.events[0].choices[0].delta).toEqual({ role: "assistant", content: "" });
    expect(chatText(streamed.events)).toBe(choice.message.content);
    expect(streamed.events.every((e) => e.object === "chat.completion.chunk")).toBe(true);
    // The same usage, but the streamed request found the first one's full prompt blocks in the prefix cache.
    const streamedUsage = streamed.events[streamed.events.length - 1].usage;
    const cached = Math.floor((promptIds.length - 1) / 16) * 16;
    expect(cached).toBeGreaterThan(0);
    expect(streamedUsage.prompt_tokens_details).toEqual({ cached_tokens: cached });
    expect(streamedUsage.ctxr).toMatchObject({ prompt_tokens_prefix_reused: cached, prompt_tokens_computed: promptIds.length - cached });
    const sameCounts = (usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number }) => [usage.prompt_tokens, usage.completion_tokens, usage.total_tokens];
    expect(sameCounts(streamedUsage)).toEqual(sameCounts(whole.body.usage));
    expect(streamed.events[streamed.events.length - 2].choices[0]).toMatchObject({ delta: {}, finish_reason: "length" });
  });

  test("the prompt goes through the chat template (Llama-2 style [INST] ... [/INST])", async () => {
    const rendered = engine.tokenizer.applyChatTemplate([{ role: "system", content: "Be brief." }, ...messages]);
    expect(rendered).toBe("<s><<SYS>>\nBe brief.\n<</SYS>>\n\n[INST] Hello [/INST]");
    const viaCompletions = await api.post("/v1/completions", { prompt: engine.tokenizer.encode(rendered), temperature: 0, max_tokens: 6 });
    const viaChat = await api.post("/v1/chat/completions", { messages: [{ role: "developer", content: [{ type: "text", text: "Be brief." }] }, ...messages], temperature: 0, max_tokens: 6 });
    expect(viaChat.body.choices[0].message.content).toBe(viaCompletions.body.choices[0].text);
  });

  test("seeded sampling repeats, streamed or not", async () => {
    const body = { messages, temperature: 1, top_p: 0.9, top_k: 50, seed: 1234, max_tokens: 24 };
    const a = await api.post("/v1/chat/completions", body);
    const b = await api.post("/v1/chat/completions", body);
    const s = await stream("/v1/chat/completions", body);
    const other = await api.post("/v1/chat/completions", { ...body, seed: 4321 });
    expect(b.body.choices[0].message.content).toBe(a.body.choices[0].message.content);
    expect(chatText(s.events)).toBe(a.body.choices[0].message.content);
    expect(other.body.choices[0].message.content).not.toBe(a.body.choices[0].message.content);
  });

  test("n choices share the prompt: one computes it, the others start from its blocks; seeded choices differ and repeat", async () => {
    const long = [{ role: "user", content: "Tell me about the river, the mill and the long winter by the old toll house bridge." }];
    const promptIds = engine.tokenizer.encode(engine.tokenizer.applyChatTemplate(long));
    const before = engine.scheduler.stats.prefillTokens;
    const body = { messages: long, temperature: 1, seed: 77, max_tokens: 12, n: 3 };
    const whole = await api.post("/v1/chat/completions", body);
    expect(whole.status).toBe(200);
    const texts = whole.body.choices.map((choice: { index: number; message: { content: string } }) => choice.message.content);
    expect(whole.body.choices.map((choice: { index: number }) => choice.index)).toEqual([0, 1, 2]);
    expect(new Set(texts).size).toBe(3);
    // Each choice is the single-choice answer of its seed (77 + k).
    for (let k = 0; k < 3; k++) {
      const single = await api.post("/v1/chat/completions", { ...body, n: 1, seed: 77 + k });
      expect(single.body.choices[0].message.content).toBe(texts[k]);
    }
    // The prompt once (usage and compute), completion tokens of every choice.
    expect(whole.body.usage).toMatchObject({ prompt_tokens: promptIds.length, completion_tokens: 36 });
    const shared = Math.floor((promptIds.length - 1) / 16) * 16;
    expect(shared).toBeGreaterThan(16);
    // A prompt not seen before: the first choice prefilled all of it, the others only what follows
    // its full blocks (the single-choice requests after it prefilled their tails too).
    expect(promptIds.length - shared).toBeGreaterThan(1);
    expect(engine.scheduler.stats.prefillTokens - before).toBe(promptIds.length + 2 * (promptIds.length - shared) + 3 * (promptIds.length - shared));
    const streamed = await stream("/v1/chat/completions", { ...body, stream_options: { include_usage: true } });
    expect(streamed.events[0].choices.map((choice: { index: number }) => choice.index)).toEqual([0, 1, 2]);
    for (let k = 0; k < 3; k++) {
      const text = streamed.events.flatMap((e) => e.choices.filter((choice: { index: number }) => choice.index === k).map((choice: { delta: { content?: string } }) => choice.delta.content ?? "")).join("");
      expect(text).toBe(texts[k]);
    }
    expect(streamed.events[streamed.events.length - 1].usage).toMatchObject({ prompt_tokens: promptIds.length, completion_tokens: 36 });
    const completions = await api.post("/v1/completions", { prompt: ["ab", "cd"], n: 2, temperature: 0, max_tokens: 4 });
    expect(completions.body.choices.map((choice: { index: number }) => choice.index)).toEqual([0, 1, 2, 3]);
    expect(completions.body.choices[1].text).toBe(completions.body.choices[0].text);
    expect(completions.body.usage.completion_tokens).toBe(16);
  });

  test("stop_token_ids end the text at that token, include_stop_str_in_output keeps it; logit_bias and min_p change the draw", async () => {
    const plain = await api.post("/v1/completions", { prompt: "The river", temperature: 0, max_tokens: 12, logprobs: 0 });
    const ids: number[] = plain.body.choices[0].logprobs.tokens.map((text: string) => engine.tokenizer.encode(text)[0]);
    // The first token that did not occur before it: the stop there leaves the tokens before it.
    const at = ids.findIndex((id, i) => i >= 2 && !ids.slice(0, i).includes(id));
    expect(at).toBeGreaterThan(0);
    const stopId = ids[at]!;
    const stopped = await api.post("/v1/completions", { prompt: "The river", temperature: 0, max_tokens: 12, stop_token_ids: [stopId] });
    expect(stopped.body.choices[0].finish_reason).toBe("stop");
    expect(stopped.body.usage.completion_tokens).toBe(at + 1);
    const before = engine.tokenizer.decode(ids.slice(0, at));
    expect(stopped.body.choices[0].text).toBe(before);
    const kept = await api.post("/v1/completions", { prompt: "The river", temperature: 0, max_tokens: 12, stop_token_ids: [stopId], include_stop_str_in_output: true });
    expect(kept.body.choices[0].text).toBe(engine.tokenizer.decode(ids.slice(0, at + 1)));
    // A stop string, kept in the output.
    const word = plain.body.choices[0].text.slice(2, 4);
    const withStop = await api.post("/v1/completions", { prompt: "The river", temperature: 0, max_tokens: 12, stop: [word], include_stop_str_in_output: true });
    expect(withStop.body.choices[0].text).toBe(plain.body.choices[0].text.slice(0, plain.body.choices[0].text.indexOf(word) + word.length));
    // logit_bias +100 on one token: every greedy token is that one.
    const forced = engine.tokenizer.encode("Z")[0]!;
    const biased = await api.post("/v1/completions", { prompt: "The river", temperature: 0, max_tokens: 5, logit_bias: { [String(forced)]: 100 } });
    expect(biased.body.choices[0].text).toBe("ZZZZZ");
    // min_p 1 keeps only the most likely token: sampling at temperature 1 is greedy.
    const minP = await api.post("/v1/completions", { prompt: "The river", temperature: 1, seed: 3, min_p: 1, max_tokens: 12 });
    expect(minP.body.choices[0].text).toBe(plain.body.choices[0].text);
  });

  test("stop strings: the text ends before the first one, finish_reason stop", async () => {
    const full = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy });
    const text: string = full.body.choices[0].text;
    const stop = text.slice(3, 5);
    const cut = text.slice(0, text.indexOf(stop));
    const whole = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy, stop: [stop, "never-generated"] });
    expect(whole.body.choices[0]).toMatchObject({ text: cut, finish_reason: "stop" });
    const streamed = await stream("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy, stop });
    expect(completionText(streamed.events)).toBe(cut);
    expect(streamed.events[streamed.events.length - 1].choices[0].finish_reason).toBe("stop");
  });

  test("logprobs with top_logprobs: token, logprob, bytes and alternatives", async () => {
    const answer = await api.post("/v1/chat/completions", { messages, temperature: 0, max_tokens: 5, logprobs: true, top_logprobs: 4 });
    const content = answer.body.choices[0].logprobs.content;
    expect(content.length).toBe(5);
    for (const entry of content) {
      expect(Object.keys(entry).sort()).toEqual(["bytes", "logprob", "token", "top_logprobs"]);
      expect(entry.top_logprobs.length).toBe(4);
      expect(entry.top_logprobs[0].logprob).toBeCloseTo(entry.logprob, 9);
      expect(entry.bytes.length).toBe(1); // byte-level tokens
      for (let i = 1; i < 4; i++) expect(entry.top_logprobs[i].logprob).toBeLessThanOrEqual(entry.top_logprobs[i - 1].logprob);
    }
    const none = await api.post("/v1/chat/completions", { messages, temperature: 0, max_tokens: 2 });
    expect(none.body.choices[0].logprobs).toBeNull();
    const streamed = await stream("/v1/chat/completions", { messages, temperature: 0, max_tokens: 5, logprobs: true, top_logprobs: 1 });
    const streamedEntries = streamed.events.flatMap((e) => e.choices[0]?.logprobs?.content ?? []);
    expect(streamedEntries.map((e: any) => e.token)).toEqual(content.map((e: any) => e.token));
  });

  test("greedy requests without logprobs take the runner's argmax rows; the same tokens as from whole logits", async () => {
    const before = await metric("ctxr_generation_greedy_row_steps_total");
    const plain = await api.post("/v1/chat/completions", { messages, temperature: 0, max_tokens: 6 });
    const plainSteps = (await metric("ctxr_generation_greedy_row_steps_total")) - before;
    expect(plainSteps).toBeGreaterThanOrEqual(5);
    const withLogprobs = await api.post("/v1/chat/completions", { messages, temperature: 0, max_tokens: 6, logprobs: true });
    expect(await metric("ctxr_generation_greedy_row_steps_total")).toBe(before + plainSteps);
    expect(plain.body.choices[0].message.content).toBe(withLogprobs.body.choices[0].message.content);
    expect(plain.body.usage.completion_tokens).toBe(withLogprobs.body.usage.completion_tokens);
  });

  test("max_completion_tokens", async () => {
    const answer = await api.post("/v1/chat/completions", { messages, temperature: 0, max_completion_tokens: 3 });
    expect(answer.body.usage.completion_tokens).toBe(3);
  });
});

describe("batching", () => {
  test("concurrent requests finish with their own answers and share decode steps", async () => {
    const bodies = Array.from({ length: 8 }, (_, i) => ({ prompt: [256, ...new TextEncoder().encode(`prompt ${i}`)], temperature: 0, max_tokens: 20 }));
    const alone: string[] = [];
    for (const body of bodies) alone.push((await api.post("/v1/completions", body)).body.choices[0].text);
    const batchedBefore = await metric("ctxr_generation_batched_decode_steps_total");
    const together = await Promise.all(bodies.map((body, i) => (i % 2 === 0 ? api.post("/v1/completions", body).then((a) => a.body.choices[0].text) : stream("/v1/completions", body).then((s) => completionText(s.events)))));
    expect(together).toEqual(alone);
    expect(await metric("ctxr_generation_batched_decode_steps_total")).toBeGreaterThan(batchedBefore);
    expect(await metric("ctxr_generation_max_decode_batch")).toBeGreaterThan(1);
    expect(engine.stats.maxDecodeBatch).toBeGreaterThan(1);
    // Nothing is left allocated but the prefix cache's blocks, and no running sequence uses those.
    expect(await metric("ctxr_generation_kv_blocks_used")).toBe(await metric("ctxr_prefix_cache_blocks"));
    expect(await metric("ctxr_prefix_cache_referenced_blocks")).toBe(0);
  });
});

describe("GET /v1/models", () => {
  test("lists the served model", async () => {
    const answer = await api.get("/v1/models");
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ object: "list", data: [{ id: "tiny-llama", object: "model", created: engine.created, owned_by: "ctxr", max_model_len: 128 * 16 }] });
  });

  test("the routes are in the OpenAPI document; wrong methods get 405", async () => {
    const doc = (await api.get("/openapi.json")).body;
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(["/v1/chat/completions", "/v1/completions", "/v1/models"]));
    const wrong = await api.get("/v1/completions");
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST");
  });
});

describe("invalid requests", () => {
  const messages = [{ role: "user", content: "Hi" }];
  const cases: [string, string, unknown, number, string, RegExp?][] = [
    ["n over 64", "/v1/chat/completions", { messages, n: 65 }, 400, "n", /at most 64/],
    ["temperature out of range", "/v1/chat/completions", { messages, temperature: 2.5 }, 400, "temperature"],
    ["top_p 0", "/v1/completions", { prompt: "x", top_p: 0 }, 400, "top_p"],
    ["max_tokens 0", "/v1/completions", { prompt: "x", max_tokens: 0 }, 400, "max_tokens"],
    ["max_tokens a string", "/v1/chat/completions", { messages, max_tokens: "5" }, 400, "max_tokens"],
    ["top_logprobs without logprobs", "/v1/chat/completions", { messages, top_logprobs: 2 }, 400, "top_logprobs", /logprobs/],
    ["top_logprobs over 20", "/v1/chat/completions", { messages, logprobs: true, top_logprobs: 21 }, 400, "top_logprobs"],
    ["completion logprobs over 20", "/v1/completions", { prompt: "x", logprobs: 21 }, 400, "logprobs"],
    ["stop not a string", "/v1/completions", { prompt: "x", stop: 5 }, 400, "stop"],
    ["no messages", "/v1/chat/completions", { messages: [] }, 400, "messages"],
    ["messages missing", "/v1/chat/completions", {}, 400, "messages", /required/],
    ["an image part", "/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, 400, "messages[0].content[0]", /not supported/],
    ["a role the template refuses", "/v1/chat/completions", { messages: [{ role: "tool", content: "x" }] }, 400, "messages", /roles/],
    ["a role OpenAI does not know", "/v1/chat/completions", { messages: [...messages, { role: "narrator", content: "x" }] }, 400, "messages[1].role", /unknown role "narrator"/],
    ["prompt missing", "/v1/completions", { max_tokens: 3 }, 400, "prompt", /required/],
    ["prompt an object", "/v1/completions", { prompt: { text: "x" } }, 400, "prompt"],
    ["no token ids", "/v1/completions", { prompt: [] }, 400, "prompt", /at least one/],
    ["token id beyond the vocabulary", "/v1/completions", { prompt: [256, 100000] }, 400, "prompt", /vocabulary/],
    ["prompt longer than the cache", "/v1/completions", { prompt: new Array(3000).fill(65), max_tokens: 1 }, 400, "prompt", /at most 2047/],
    ["max_tokens beyond the model's length", "/v1/completions", { prompt: [256], max_tokens: 5000 }, 400, "max_tokens", /maximum context length of this model and KV cache is 2048 tokens/],
    ["max_completion_tokens beyond the model's length", "/v1/chat/completions", { messages, max_completion_tokens: 5000 }, 400, "max_completion_tokens"],
    ["presence_penalty beyond 2", "/v1/chat/completions", { messages, presence_penalty: 2.5 }, 400, "presence_penalty"],
    ["repetition_penalty 0", "/v1/chat/completions", { messages, repetition_penalty: 0 }, 400, "repetition_penalty"],
    ["logit_bias key not a token id", "/v1/chat/completions", { messages, logit_bias: { abc: 1 } }, 400, "logit_bias.abc"],
    ["logit_bias beyond 100", "/v1/completions", { prompt: "x", logit_bias: { "65": 150 } }, 400, 'logit_bias["65"]'],
    ["logit_bias token beyond the vocabulary", "/v1/completions", { prompt: "x", logit_bias: { "100000": 1 } }, 400, "logit_bias", /vocabulary/],
    ["min_p over 1", "/v1/completions", { prompt: "x", min_p: 1.5 }, 400, "min_p"],
    ["echo with segments", "/v1/completions", { segments: ["a doc", "q"], echo: true }, 400, "echo"],
    ["another model", "/v1/chat/completions", { messages, model: "gpt-4o" }, 404, "model", /does not exist/],
  ];
  for (const [name, path, body, status, field, message] of cases) {
    test(name, async () => {
      const answer = await api.post(path, body);
      expect(answer.status).toBe(status);
      expect(answer.body.error.field).toBe(field);
      expect(answer.body.error.message).toStartWith(`${field}: `);
      if (message) expect(answer.body.error.message).toMatch(message);
      // OpenAI's shape: the type by status, param the field, and the context length named as such.
      const overLength = /length|longer/.test(name);
      expect(answer.body.error).toMatchObject({ type: status === 404 ? "not_found_error" : "invalid_request_error", param: field });
      expect(answer.body.error.code === "context_length_exceeded").toBe(overLength);
    });
  }

  test("malformed JSON", async () => {
    const answer = await api.post("/v1/completions", "{ nope");
    expect(answer.status).toBe(400);
    expect(answer.body.error.field).toBe("body");
  });

  test("nothing was left running or allocated", async () => {
    await Bun.sleep(20);
    expect(engine.stats.running).toBe(0);
    expect(engine.stats.waiting).toBe(0);
    expect(engine.stats.kvBlocksUsed).toBe(engine.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(engine.stats.kvBlocksPrefixReferenced).toBe(0);
  });
});

describe("cancellation and crashes", () => {
  test("a client that disconnects mid-stream cancels its request and frees its blocks", async () => {
    const cancelledBefore = engine.stats.cancelled;
    const controller = new AbortController();
    const response = await fetch(server.url + "/v1/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: [256, 65], max_tokens: 1500, temperature: 0, stream: true }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    let chunks = 0;
    while (chunks < 5) {
      const { done } = await reader.read();
      if (done) break;
      chunks++;
    }
    controller.abort();
    await reader.cancel().catch(() => {});
    for (let i = 0; i < 200 && engine.stats.cancelled === cancelledBefore; i++) await Bun.sleep(10);
    expect(engine.stats.cancelled).toBe(cancelledBefore + 1);
    expect(engine.stats.running).toBe(0);
    expect(engine.stats.kvBlocksUsed).toBe(engine.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(engine.stats.kvBlocksPrefixReferenced).toBe(0);
    expect(engine.stats.finished).toBeGreaterThan(0);
  });

  test("a client that disconnects before a non-streamed answer cancels it too", async () => {
    const cancelledBefore = engine.stats.cancelled;
    const controller = new AbortController();
    const pending = fetch(server.url + "/v1/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: [256, 66], max_tokens: 1800, temperature: 0 }),
      signal: controller.signal,
    }).catch((error) => error);
    for (let i = 0; i < 200 && engine.stats.running === 0; i++) await Bun.sleep(5);
    controller.abort();
    await pending;
    for (let i = 0; i < 200 && engine.stats.cancelled === cancelledBefore; i++) await Bun.sleep(10);
    expect(engine.stats.cancelled).toBe(cancelledBefore + 1);
    expect(engine.stats.kvBlocksUsed).toBe(engine.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(engine.stats.kvBlocksPrefixReferenced).toBe(0);
  });

  test("kill -9 of the runner mid-generation: the request fails clearly, the next one succeeds", async () => {
    const pid = engine.runner.pid!;
    const restartsBefore = engine.stats.runnerRestarts;
    // A streamed request: killed after its first chunks arrive.
    const response = await fetch(server.url + "/v1/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: [256, 67], max_tokens: 1500, temperature: 0, stream: true }),
    });
    // And a non-streamed one running beside it.
    const plain = api.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 1500, temperature: 0 });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let killed = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (!killed && text.split("\n\n").length > 4 && engine.stats.running === 2) {
        killed = true;
        process.kill(pid, "SIGKILL");
      }
    }
    expect(killed).toBe(true);
    const events = text.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) => b.slice(6));
    expect(events[events.length - 1]).toBe("[DONE]");
    const error = JSON.parse(events[events.length - 2]!);
    expect(error.error.message).toMatch(/model runner crashed/);
    expect(error.error.message).toContain("SIGKILL");

    const failed = await plain;
    expect(failed.status).toBe(500);
    expect(failed.body.error.message).toMatch(/model runner crashed.*SIGKILL/s);
    // The stream's error event and the 500 have OpenAI's error shape.
    for (const body of [error, failed.body]) expect(body.error).toMatchObject({ type: "server_error", param: null, code: "internal_error", field: "" });

    const next = await api.post("/v1/completions", { prompt: TINY_REFERENCE.prompt_ids, ...greedy });
    expect(next.status).toBe(200);
    expect(next.body.choices[0].text).toBe(expectedText());
    expect(engine.runner.pid).not.toBe(pid);
    expect(engine.stats.runnerRestarts).toBe(restartsBefore + 1);
    expect(await metric("ctxr_generation_runner_restarts_total")).toBe(restartsBefore + 1);
  });
});

describe("servers without a model", () => {
  test("the generation routes answer 404 saying how to load one", async () => {
    const bare = await ContextService.open({ dataDir: null });
    const plain = startServer(bare, { host: "127.0.0.1", port: 0, log: () => {} });
    try {
      const c = client(plain.url);
      for (const answer of [await c.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }] }), await c.post("/v1/completions", { prompt: "x" }), await c.get("/v1/models")]) {
        expect(answer.status).toBe(404);
        expect(answer.body.error.message).toMatch(/no model is loaded; start ctxr serve with --model DIR/);
      }
      expect((await c.get("/v1/completions")).status).toBe(405);
    } finally {
      await plain.stop(1000);
      await bare.close();
    }
  });

  test("with an API key, the generation routes need it", async () => {
    const keyed = await ContextService.open({ dataDir: null });
    const secured = startServer(keyed, { host: "127.0.0.1", port: 0, apiKey: "sesame", engine, log: () => {} });
    try {
      const c = client(secured.url);
      expect((await c.post("/v1/completions", { prompt: [256], max_tokens: 1 })).status).toBe(401);
      const ok = await c.post("/v1/completions", { prompt: [256], max_tokens: 1 }, { authorization: "Bearer sesame" });
      expect(ok.status).toBe(200);
    } finally {
      await secured.stop(1000);
      await keyed.close();
    }
  });
});

describe("the server's JSON depth limit", () => {
  test("limits.maxJsonDepth reaches the generation routes (not only the default)", async () => {
    const shallow = await ContextService.open({ dataDir: null });
    const limited = startServer(shallow, { host: "127.0.0.1", port: 0, engine, limits: { maxJsonDepth: 8 }, log: () => {} });
    try {
      const c = client(limited.url);
      // Nine levels in a field each schema takes as free JSON: body (1) > field (2) > ... > {} (9).
      const nine = { a: { b: { c: { d: { e: { f: { g: {} } } } } } } };
      const bodies: [string, unknown][] = [
        ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 1, chat_template_kwargs: nine }],
        ["/v1/completions", { prompt: [256], max_tokens: 1, guided_json: nine }],
        ["/v1/responses", { input: "hi", max_output_tokens: 1, metadata: {}, text: { format: { type: "json_schema", name: "x", schema: nine.a } } }],
      ];
      for (const [path, body] of bodies) {
        const answer = await c.post(path, body);
        expect(answer.status).toBe(400);
        expect(answer.body.error.message).toContain("nested deeper than 8 levels");
      }
      // One level less passes the depth check.
      const eight = await c.post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 1, chat_template_kwargs: nine.a });
      expect(eight.status).toBe(200);
    } finally {
      await limited.stop(1000);
      await shallow.close();
    }
  });
});

describe("ctxr serve --model (CLI)", () => {
  test("loads the model, serves it, stops on SIGTERM", async () => {
    const spawned = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "32", "--threads", "1", "--served-model-name", "tiny"], { CTXR_RUNNER: runnerPath }, 60_000);
    try {
      expect(spawned.startLines.some((line) => /^ctxr serve: serving model tiny from .*tiny-llama on cpu \(32 KV blocks of 16 tokens, at most 512 tokens a sequence\)/.test(line))).toBe(true);
      expect(spawned.startLines).toContain("ctxr serve: documents' KV caches are reused at any position (prophet, 20% recomputed); chunk cache: 8 device blocks, 1 GiB of host memory");
      // A plain model server's start-up reads as information: no warnings, no paper units.
      for (const line of [...spawned.startLines, ...spawned.stderr().split("\n")]) expect(line).not.toMatch(/warning|uncalibrated|nats|debug/i);
      const answer = await spawned.post("/v1/completions", { model: "tiny", prompt: TINY_REFERENCE.prompt_ids, ...greedy });
      expect(answer.status).toBe(200);
      expect(answer.body.choices[0].text).toBe(expectedText());
      expect((await spawned.get("/v1/models")).body.data[0].id).toBe("tiny");
    } finally {
      spawned.kill("SIGTERM");
    }
    expect(await spawned.exited).toBe(0);
  });

  test("--log-level debug adds the tuning details as one debug line", async () => {
    const spawned = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "32", "--threads", "1", "--log-level", "debug", "--sparse-trigger-window", "8"], { CTXR_RUNNER: runnerPath }, 60_000);
    try {
      expect(spawned.startLines).toContain(
        "ctxr serve: debug: prophet span decay 0.8, prophet scores product; cachecraft scores shift, focused-chunk early stop off; " +
          "sparse-decode trigger: entropy 3 nats, varentropy 5 nats², window 8 steps (the built-in thresholds; ctxr model calibrate-sparse fits them to a model); " +
          "sparse-decode anchor newest (1 token), best 4 × budget re-ranked by best token, lookback 4",
      );
      // (A request first: a SIGTERM sent the instant the ready line appears can beat Bun's signal handler.)
      expect((await spawned.get("/v1/models")).status).toBe(200);
    } finally {
      spawned.kill("SIGTERM");
    }
    expect(await spawned.exited).toBe(0);
  });

  test("usage errors", () => {
    const cases: [string[], RegExp][] = [
      [["--kv-blocks", "8"], /--kv-blocks needs --model/],
      [["--model", model.path, "--device", "tpu"], /--device must be cpu, cuda or cuda:N/],
      [["--model", model.path, "--upstream", "http://127.0.0.1:9"], /not both/],
      [["--model", model.path, "--block-size", "8"], /--block-size must be 16 or 32/],
      [["--model", ""], /--model must not be empty/],
      [["--context-scores", "shift"], /--context-scores needs --model/],
      [["--model", model.path, "--context-scores", "mass"], /--context-scores must be one of shift, attention/],
      [["--model", model.path, "--prophet-span-decay", "1"], /--prophet-span-decay must be at least 0 and below 1/],
      [["--model", model.path, "--prophet-query-rows", "first"], /--prophet-query-rows must be one of all, last/],
      [["--model", model.path, "--prophet-scores", "fused"], /--prophet-scores must be one of attention, shift, product, rank-sum, shift-gated/],
      [["--prophet-scores", "product"], /--prophet-scores needs --model/],
      [["--model", model.path, "--kv-policy", "legolink"], /--kv-policy must be one of cachecraft, prophet, epic, none, full, prefix/],
      [["--no-prefix-cache"], /--no-prefix-cache needs --model/],
      [["--model", model.path, "--prophet-span-decay=-0.5"], /--prophet-span-decay must be a non-negative number/],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...args]);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(message);
    }
  });

  test("a model folder that does not exist is a clear failure", () => {
    const run = runCli(["serve", "--in-memory", "--port", "0", "--model", "/no/such/model"], { env: { CTXR_RUNNER: runnerPath } });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("model folder /no/such/model does not exist");
  });
});
