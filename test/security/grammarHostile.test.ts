/**
 * Issue 27, structured outputs and tools, against a real `ctxr serve --model` child (tiny model,
 * --threads 1): every hostile probe gets a 4xx naming the problem, /healthz keeps answering
 * while it runs (the compile is on the grammar thread), the server's peak RSS stays bounded, and a
 * valid json_object request right after it succeeds (an abort inside xgrammar no longer poisons
 * the requests that follow). The ambiguous grammar ends with a 400 at --max-grammar-step-ms while
 * a plain completion beside it keeps its speed. /tokenize of a 7 MB prompt stays bounded.
 *
 * Stall thresholds are generous (CI machines are noisy: 1 s, against 7-42 s before the fix); the
 * exact figures are scripts/bench-hostile.ts's (BENCHMARKS.md).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { MiB, startCtxr, type Ctxr } from "./hostileKit.ts";
import { AMBIGUOUS_COMPLETION, VALID_JSON_OBJECT, grammarProbes, healthzDuring, letterRun, post, useToolsTemplate } from "./grammarProbes.ts";

setDefaultTimeout(120_000);

const STALL_LIMIT_MS = 1000;
const PEAK_LIMIT = 512 * MiB;

let ctxr: Ctxr;
let model: { path: string; cleanup(): void };

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny");
  useToolsTemplate(model.path);
  ctxr = await startCtxr(["--model", model.path, "--threads", "1", "--kv-blocks", "256", "--max-grammar-step-ms", "100"].concat([]));
}, 120_000);

afterAll(async () => {
  await ctxr?.stop();
  model?.cleanup();
});

describe("hostile grammars and tools", () => {
  test("a valid json_object request succeeds before anything else", async () => {
    const answer = await post(ctxr.url, "/v1/chat/completions", VALID_JSON_OBJECT);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).choices[0].message.content.startsWith("{")).toBe(true);
  });

  for (const probe of grammarProbes()) {
    test(`${probe.name}: a 400 naming the problem, no stall, and structured outputs still work after it`, async () => {
      const timed = await healthzDuring(ctxr.url, () => post(ctxr.url, probe.path, probe.body));
      expect(timed.result.status, timed.result.text.slice(0, 300)).toBe(400);
      expect(JSON.parse(timed.result.text).error.message).toContain(probe.expects);
      expect(timed.stallMs).toBeLessThan(STALL_LIMIT_MS);
      for (const next of [VALID_JSON_OBJECT, { ...VALID_JSON_OBJECT, response_format: undefined, guided_regex: "[a-z]{3}" }]) {
        const after = await post(ctxr.url, "/v1/chat/completions", next);
        expect(after.status, after.text.slice(0, 300)).toBe(200);
      }
      expect(ctxr.peakRss()).toBeLessThan(PEAK_LIMIT);
    });
  }

  test("budget answers name the limit and its value", async () => {
    const constant = await post(ctxr.url, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], guided_json: { const: letterRun(2000) } });
    expect(constant.status).toBe(400);
    expect(JSON.parse(constant.text).error.message).toContain("1024");
    const cycle = await post(ctxr.url, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], guided_json: { $ref: "#" } });
    expect(JSON.parse(cycle.text).error.message).toContain("$ref cycle");
  });

  test("a tool list that makes the prompt too long gets the prompt-length 400 before any grammar is built", async () => {
    const tools = Array.from({ length: 100 }, (_, i) => ({ type: "function", function: { name: `t${i}`, description: letterRun(200), parameters: { type: "object", properties: { q: { type: "string" } } } } }));
    const timed = await healthzDuring(ctxr.url, () => post(ctxr.url, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], tools, tool_choice: "required", max_tokens: 8 }));
    expect(timed.result.status).toBe(400);
    expect(JSON.parse(timed.result.text).error.code, timed.result.text.slice(0, 400)).toBe("context_length_exceeded");
    expect(timed.wallMs).toBeLessThan(5000);
  });

  test("the ambiguous grammar ends with a 400 at --max-grammar-step-ms; a plain completion beside it keeps its speed", async () => {
    const alone: number[] = [];
    for (let i = 0; i < 3; i++) {
      const started = performance.now();
      expect((await post(ctxr.url, "/v1/completions", { prompt: "hello", max_tokens: 8, temperature: 0 })).status).toBe(200);
      alone.push(performance.now() - started);
    }
    const ambiguous = post(ctxr.url, "/v1/completions", AMBIGUOUS_COMPLETION);
    await Bun.sleep(300);
    const beside: number[] = [];
    const timed = await healthzDuring(ctxr.url, async () => {
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        const answer = await post(ctxr.url, "/v1/completions", { prompt: "hello", max_tokens: 8, temperature: 0 });
        expect(answer.status).toBe(200);
        beside.push(performance.now() - started);
      }
      return ambiguous;
    });
    const answer = timed.result;
    expect(answer.status, answer.text.slice(0, 300)).toBe(400);
    expect(JSON.parse(answer.text).error.code).toBe("grammar_step_limit");
    expect(timed.stallMs).toBeLessThan(STALL_LIMIT_MS);
    // Before the fix a plain 8-token completion took 2.8 s beside it (0.01 s alone).
    expect(Math.max(...beside)).toBeLessThan(Math.max(...alone) + 1000);
    expect((await post(ctxr.url, "/v1/chat/completions", VALID_JSON_OBJECT)).status).toBe(200);
  });

  test("streamed, the step limit is an error event and the stream ends", async () => {
    const answer = await post(ctxr.url, "/v1/completions", { ...AMBIGUOUS_COMPLETION, stream: true });
    expect(answer.status).toBe(200);
    expect(answer.text).toContain("grammar_step_limit");
  });

  test("/tokenize: a 7 MB prompt gets a 400 naming the limit; four 1 MB prompts with return_token_strs at once stay under 512 MB", async () => {
    const huge = await post(ctxr.url, "/tokenize", { prompt: letterRun(7 * 1024 * 1024), return_token_strs: true });
    expect(huge.status).toBe(400);
    expect(JSON.parse(huge.text).error.message).toContain("1048576");
    const prompt = letterRun(1000 * 1024);
    const timed = await healthzDuring(ctxr.url, () => Promise.all(Array.from({ length: 4 }, () => post(ctxr.url, "/tokenize", { prompt, return_token_strs: true }))));
    for (const answer of timed.result) {
      expect(answer.status).toBe(200);
      const body = JSON.parse(answer.text);
      expect(body.count).toBe(body.tokens.length);
      expect(body.token_strs.length).toBe(body.count);
      expect(body.token_strs.join("").endsWith(prompt)).toBe(true);
    }
    expect(ctxr.peakRss()).toBeLessThan(PEAK_LIMIT);
  });
});
