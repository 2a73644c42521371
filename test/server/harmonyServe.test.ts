/**
 * gpt-oss's chat side through the HTTP API (a real server, the real CPU runner, the OpenAI SDK) on
 * a tiny random-weight model with gpt-oss's own template and the harmony markers as special tokens
 * (helpers/harmonyModel.ts): the parsers are detected from the template, reasoning_effort reaches
 * the prompt, and answers forced into harmony shapes (helpers/forcedOutput.ts: markers written as
 * one token or byte by byte, as the random weights choose) come back as reasoning_content, content
 * and tool_calls, whole and streamed (xgrammar does not force special tokens: the forced markers are
 * spelled byte by byte; unforced answers write them whole); a JSON schema applies to the first
 * message body that is not analysis, not before it.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import Ajv from "ajv";
import OpenAI from "openai";
import { forceOutputs, type ForcedOutput } from "../helpers/forcedOutput.ts";
import { HARMONY_IDS, harmonyModelFolder } from "../helpers/harmonyModel.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

setDefaultTimeout(300_000);

const WEATHER = { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"], additionalProperties: false } } };

let api: EngineTestServer;
let openai: OpenAI;
let force: ForcedOutput;
let model: { path: string; cleanup(): void };

beforeAll(async () => {
  model = harmonyModelFolder("tiny-harmony");
  api = await startEngineServer(model.path, { kvBlocks: 128, threads: 1, servedModelName: "tiny" });
  openai = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: "unused", maxRetries: 0 });
  force = forceOutputs(api.engine);
}, 300_000);

afterAll(async () => {
  force?.restore();
  await api?.close();
  model?.cleanup();
});

const ask = (extra: Record<string, unknown> = {}) => ({ model: "tiny", messages: [{ role: "user", content: "Weather?" }], ...extra });
/** The generated text from the tokens' logprobs, without the stop token that ended it. */
const generatedText = (logprobs: { token: string }[]) =>
  logprobs
    .map((entry) => entry.token)
    .filter((token) => !["<|return|>", "<|call|>", "</s>"].includes(token))
    .join("");
const escape = (text: string) => text.replace(/[|.*+?^${}()[\]\\]/g, "\\$&");

/** A harmony answer: an analysis of a's and b's, then the final message of c's and d's. */
const ANALYSIS_THEN_FINAL = `${escape("<|channel|>analysis<|message|>")}[ab ]{1,6}${escape("<|end|><|start|>assistant<|channel|>final<|message|>")}[cd ]{1,6}`;
/** An analysis, then a call of get_weather. */
const ANALYSIS_THEN_CALL = `${escape("<|channel|>analysis<|message|>")}[ab]{1,4}${escape('<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "')}[a-z]{1,5}"\\}`;

async function streamChat(body: Record<string, unknown>) {
  const stream = (await openai.chat.completions.create({ ...body, stream: true } as never)) as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
  let reasoning = "";
  let content = "";
  const calls: { name: string; arguments: string }[] = [];
  let finish: string | null = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice === undefined) continue;
    const delta = choice.delta as { content?: string | null; reasoning_content?: string; tool_calls?: { function?: { name?: string; arguments?: string } }[] };
    reasoning += delta.reasoning_content ?? "";
    content += delta.content ?? "";
    for (const call of delta.tool_calls ?? []) calls.push({ name: call.function!.name!, arguments: call.function!.arguments! });
    finish = choice.finish_reason ?? finish;
  }
  return { reasoning, content, calls, finish };
}

describe("the parsers in use", () => {
  test("auto detects gpt-oss (harmony) from the chat template, for reasoning and tool calls", () => {
    expect(api.engine.reasoningParser).toBe("gpt-oss");
  });
});

describe("reasoning_effort", () => {
  test("each level renders into the prompt: the chat's prompt is the template's with that effort", async () => {
    for (const effort of ["low", "medium", "high"]) {
      const rendered = await api.post("/tokenize", { messages: ask().messages, chat_template_kwargs: { reasoning_effort: effort }, return_token_strs: true });
      expect(rendered.status).toBe(200);
      const text = (await api.post("/detokenize", { tokens: rendered.body.tokens })).body.prompt as string;
      expect(text).toContain(`Reasoning: ${effort}\n`);
      const answer = await api.post("/v1/chat/completions", ask({ reasoning_effort: effort, max_tokens: 2, temperature: 0 }));
      expect(answer.status).toBe(200);
      expect(answer.body.usage.prompt_tokens).toBe(rendered.body.count);
    }
  });

  test("another value is a 400 naming the field", async () => {
    const answer = await api.post("/v1/chat/completions", ask({ reasoning_effort: "extreme", max_tokens: 2 }));
    expect(answer.status).toBe(400);
    expect(JSON.stringify(answer.body.error)).toContain("reasoning_effort");
  });
});

describe("harmony answers as the OpenAI API's fields", () => {
  test("analysis -> reasoning_content, final -> content: 12 seeds, whole and streamed", async () => {
    for (let seed = 0; seed < 12; seed++) {
      await force.next(ANALYSIS_THEN_FINAL);
      const whole = await api.post("/v1/chat/completions", ask({ seed, max_tokens: 240, logprobs: true }));
      expect(whole.status).toBe(200);
      const { message, finish_reason, logprobs } = whole.body.choices[0];
      const text = generatedText(logprobs.content);
      const parts = /^<\|channel\|>analysis<\|message\|>([ab ]+)<\|end\|><\|start\|>assistant<\|channel\|>final<\|message\|>([cd ]+)$/.exec(text);
      expect(parts, text).not.toBeNull();
      expect(message.reasoning_content).toBe(parts![1]);
      expect(message.content).toBe(parts![2]);
      expect(finish_reason).toBe("stop");

      await force.next(ANALYSIS_THEN_FINAL);
      const streamed = await streamChat(ask({ seed, max_tokens: 240 }));
      expect(streamed.reasoning).toMatch(/^[ab ]+$/);
      expect(streamed.content).toMatch(/^[cd ]+$/);
      expect(streamed.content).not.toContain("<|");
    }
  });

  test("a commentary message to functions.get_weather -> tool_calls (finish_reason tool_calls), whole and streamed", async () => {
    for (let seed = 0; seed < 4; seed++) {
      await force.next(ANALYSIS_THEN_CALL);
      const whole = await api.post("/v1/chat/completions", ask({ seed, max_tokens: 240, tools: [WEATHER] }));
      expect(whole.status).toBe(200);
      const { message, finish_reason } = whole.body.choices[0];
      expect(finish_reason).toBe("tool_calls");
      expect(message.content).toBeNull();
      expect(message.reasoning_content).toMatch(/^[ab]+$/);
      expect(message.tool_calls).toHaveLength(1);
      expect(message.tool_calls[0].type).toBe("function");
      expect(message.tool_calls[0].id).toMatch(/^call_/);
      expect(message.tool_calls[0].function.name).toBe("get_weather");
      expect(JSON.parse(message.tool_calls[0].function.arguments).city).toMatch(/^[a-z]+$/);

      await force.next(ANALYSIS_THEN_CALL);
      const streamed = await streamChat(ask({ seed, max_tokens: 240, tools: [WEATHER] }));
      expect(streamed.finish).toBe("tool_calls");
      expect(streamed.calls).toHaveLength(1);
      expect(streamed.calls[0]!.name).toBe("get_weather");
      expect(JSON.parse(streamed.calls[0]!.arguments).city).toMatch(/^[a-z]+$/);
      expect(streamed.reasoning).toMatch(/^[ab]+$/);
    }
  });

  test("/v1/responses: the analysis is a reasoning item, the final message the output text; a call a function_call item", async () => {
    await force.next(ANALYSIS_THEN_FINAL);
    const answer = await api.post("/v1/responses", { model: "tiny", input: "Weather?", max_output_tokens: 240 });
    expect(answer.status).toBe(200);
    const items = answer.body.output as { type: string; content?: { text: string }[]; name?: string; arguments?: string }[];
    expect(items.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(items[0]!.content![0]!.text).toMatch(/^[ab ]+$/);
    expect(items[1]!.content![0]!.text).toMatch(/^[cd ]+$/);

    await force.next(ANALYSIS_THEN_CALL);
    const called = await api.post("/v1/responses", { model: "tiny", input: "Weather?", max_output_tokens: 240, tools: [{ type: "function", ...WEATHER.function }] });
    expect(called.status).toBe(200);
    const call = (called.body.output as { type: string; name?: string; arguments?: string }[]).find((item) => item.type === "function_call");
    expect(call?.name).toBe("get_weather");
    expect(JSON.parse(call!.arguments!).city).toMatch(/^[a-z]+$/);
  });

  test("the call's analysis is sent back as reasoning_content and rendered before the call in the next turn", async () => {
    const history = [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, reasoning_content: "Need the tool.", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "oslo"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "21C" },
    ];
    const rendered = await api.post("/tokenize", { messages: history, tools: [WEATHER], return_token_strs: true });
    expect(rendered.status).toBe(200);
    const text = (await api.post("/detokenize", { tokens: rendered.body.tokens })).body.prompt as string;
    expect(text).toContain('<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "oslo"}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"21C"<|end|><|start|>assistant');
    const answer = await api.post("/v1/chat/completions", { model: "tiny", messages: history, tools: [WEATHER], max_tokens: 2, temperature: 0 });
    expect(answer.status).toBe(200);
  });
});

describe("--reasoning-parser none", () => {
  test("the answer is the harmony text itself, its special-token markers kept (as llama.cpp renders them)", async () => {
    const plain = await startEngineServer(model.path, { kvBlocks: 64, threads: 1, servedModelName: "tiny", reasoningParser: "none" });
    try {
      expect(plain.engine.reasoningParser).toBeNull();
      // Each marker made the likeliest token in turn: the model writes them as the special tokens.
      const channel = HARMONY_IDS["<|channel|>"];
      const answer = await plain.post("/v1/chat/completions", ask({ seed: 1, max_tokens: 2, temperature: 0, logit_bias: { [channel]: 100 }, logprobs: true }));
      expect(answer.status).toBe(200);
      const { message, logprobs } = answer.body.choices[0];
      expect(logprobs.content.map((entry: { token: string }) => entry.token)).toEqual(["<|channel|>", "<|channel|>"]);
      expect(message.reasoning_content).toBeUndefined();
      expect(message.content).toBe("<|channel|><|channel|>");
    } finally {
      await plain.close();
    }
  });
});

describe("tool_choice constrains the first body that is not analysis", () => {
  const NOW = { type: "function", function: { name: "now", description: "The time in a zone", parameters: { type: "object", properties: { zone: { type: "string", enum: ["utc", "cet"] } }, required: ["zone"], additionalProperties: false } } };
  const validWeather = new Ajv().compile(WEATHER.function.parameters);
  const validNow = new Ajv().compile(NOW.function.parameters);
  // <|message|> made likely: the random model soon opens a message (with a header it wrote itself).
  const bias = { [HARMONY_IDS["<|message|>"]]: 6 };

  test("a named function: the body is its arguments and the answer is its call, whole and streamed", async () => {
    for (let seed = 0; seed < 4; seed++) {
      const body = ask({ seed, max_tokens: 200, tools: [WEATHER, NOW], tool_choice: { type: "function", function: { name: "now" } }, logit_bias: bias });
      const whole = await api.post("/v1/chat/completions", body);
      expect(whole.status).toBe(200);
      const { message, finish_reason } = whole.body.choices[0];
      expect(finish_reason).toBe("tool_calls");
      expect(message.tool_calls).toHaveLength(1);
      expect(message.tool_calls[0].function.name).toBe("now");
      expect(validNow(JSON.parse(message.tool_calls[0].function.arguments))).toBe(true);
      const streamed = await streamChat(body);
      expect(streamed.finish).toBe("tool_calls");
      expect(streamed.calls.map((call) => call.name)).toEqual(["now"]);
      expect(validNow(JSON.parse(streamed.calls[0]!.arguments))).toBe(true);
    }
  });

  test("required with two tools: the body is one of their arguments", async () => {
    for (let seed = 0; seed < 4; seed++) {
      const answer = await api.post("/v1/chat/completions", ask({ seed, max_tokens: 200, tools: [WEATHER, NOW], tool_choice: "required", logit_bias: bias }));
      expect(answer.status).toBe(200);
      const { message } = answer.body.choices[0];
      // A header the model wrote may name neither function: then the arguments are the content.
      const args = JSON.parse(message.tool_calls?.[0]?.function.arguments ?? message.content);
      expect(validWeather(args) || validNow(args)).toBe(true);
    }
  });
});

describe("structured outputs after the analysis", () => {
  const SCHEMA = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const validate = new Ajv().compile(SCHEMA);
  const format = { type: "json_schema", json_schema: { name: "answer", schema: SCHEMA, strict: true } };

  test("free text until a message body that is not analysis opens; that body follows the schema", async () => {
    // <|message|> made likely: the random model soon opens a message (a header it wrote itself).
    const bias = { [HARMONY_IDS["<|message|>"]]: 6, [HARMONY_IDS["<|channel|>"]]: 2 };
    let freeText = 0;
    for (let seed = 0; seed < 6; seed++) {
      const answer = await api.post("/v1/chat/completions", ask({ seed, max_tokens: 200, response_format: format, logit_bias: bias, logprobs: true }));
      expect(answer.status).toBe(200);
      const { message, finish_reason, logprobs } = answer.body.choices[0];
      expect(finish_reason).toBe("stop");
      expect(validate(JSON.parse(message.content))).toBe(true);
      // The generated text: a header the model wrote freely, <|message|> (one special token), then the JSON.
      const text = generatedText(logprobs.content);
      expect(text.endsWith(message.content)).toBe(true);
      const before = text.slice(0, text.length - message.content.length);
      expect(before.endsWith("<|message|>")).toBe(true);
      if (/[^\s{]/.test(before.slice(0, -"<|message|>".length))) freeText++;
    }
    // Text no JSON grammar allows was written before the body.
    expect(freeText).toBeGreaterThan(0);
  });
});
