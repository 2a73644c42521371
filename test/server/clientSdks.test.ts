/**
 * The OpenAI conventions real clients rely on, through the clients themselves: the `openai` SDK
 * (v6), the Vercel AI SDK 6 (createOpenAICompatible, and createOpenAI(...).chat) and LangChain's
 * ChatOpenAI, against `ctxr serve --model` (a child process, the real CPU runner, a random-weight
 * tiny model whose chat template offers hermes-style tools), and through `ctxr serve --upstream`
 * in front of it:
 *
 * 1. models.retrieve(id): the served model; another id a 404 in OpenAI's error shape;
 * 2. errors carry type, param and code (the SDK's err.type, err.param, err.code), relayed by the
 *    proxy as the engine wrote them;
 * 3. completions logprobs.text_offset counts characters of the returned text (echo, special
 *    tokens left out, streamed and n > 1 as well);
 * 4. streamed tool calls assemble to exactly the non-streamed message (content null, the same
 *    calls) with 1, 2 and 3 calls;
 * 5. an unknown message role is a 400 naming messages[i].role;
 * 6. a Responses API round trip (text, stream, tool call, structured output) through each client.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { APICallError, generateText, jsonSchema, streamText, tool, type LanguageModel } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { AIMessageChunk, HumanMessage } from "@langchain/core/messages";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer, stopSpawned, type SpawnedServer } from "./serverKit.ts";

setDefaultTimeout(180_000);

const MODEL = "tiny-clients";

/** Renders tools and marks calls as <tool_call>…</tool_call> (the server then parses hermes-style calls). */
const TOOLS_TEMPLATE = `{%- if tools %}<|system|>Functions: {{ tools | tojson }}. Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

/** Small arguments (the tiny model's tokens are bytes): a call is about 50 tokens. */
const PICK_PARAMETERS = { type: "object", properties: { x: { enum: ["a", "b"] } }, required: ["x"], additionalProperties: false } as const;
const SEEDS = Array.from({ length: 24 }, (_, seed) => seed);
const MAX_TOKENS = 400;
/** For the Vercel and LangChain clients: answers of 3 calls, 1, 4 (cut by max_tokens, the last call unfinished) and 2. */
const CLIENT_SEEDS = [0, 1, 2, 20];

let model: { path: string; cleanup(): void };
let engine: SpawnedServer;
let proxy: SpawnedServer;
let openai: OpenAI;
let viaProxy: OpenAI;

beforeAll(async () => {
  model = tinyModelFolder({}, MODEL);
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: TOOLS_TEMPLATE }));
  engine = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "256", "--threads", "1"], { CTXR_RUNNER: buildRunner() }, 60_000);
  proxy = await spawnServer(["--in-memory", "--upstream", engine.url], {}, 60_000);
  openai = new OpenAI({ baseURL: `${engine.url}/v1`, apiKey: "unused", maxRetries: 0 });
  viaProxy = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 300_000);

afterAll(async () => {
  await stopSpawned(proxy, engine);
  model?.cleanup();
});

/** The error a call throws (fails the test when it does not throw). */
async function thrown(call: () => Promise<unknown>): Promise<any> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  throw new Error("expected the call to fail");
}

describe("1. GET /v1/models/{id}", () => {
  for (const [name, client] of [
    ["engine", () => openai],
    ["proxy", () => viaProxy],
  ] as const) {
    test(`${name}: models.retrieve gives the served model; another id a NotFoundError with type, param and code`, async () => {
      const card = await client().models.retrieve(MODEL);
      expect(card).toMatchObject({ id: MODEL, object: "model", owned_by: "ctxr" });
      expect((await client().models.list()).data.map((m) => m.id)).toEqual([MODEL]);
      const error = await thrown(() => client().models.retrieve("gpt-4o"));
      expect(error).toBeInstanceOf(OpenAI.NotFoundError);
      expect({ status: error.status, type: error.type, param: error.param, code: error.code }).toEqual({ status: 404, type: "not_found_error", param: "model", code: "model_not_found" });
      expect(error.message).toContain('"gpt-4o" does not exist');
    });
  }

  test("an id with a slash, sent with %2F (as the SDK does) or as it is, reaches the route", async () => {
    const encoded = await fetch(`${engine.url}/v1/models/org%2Fother`);
    expect(encoded.status).toBe(404);
    expect(((await encoded.json()) as any).error).toMatchObject({ message: expect.stringContaining('"org/other"'), code: "model_not_found" });
    const raw = await fetch(`${engine.url}/v1/models/org/other`);
    expect(raw.status).toBe(404);
    expect(((await raw.json()) as any).error.message).toContain('"org/other"');
    // /metrics counts the model cards under one route label, not as unmatched paths.
    const metrics = await (await fetch(`${engine.url}/metrics`)).text();
    expect(metrics).toMatch(/ctxr_http_requests_total\{route="\/v1\/models\/\{model\}",method="GET",status="404"\} [1-9]/);
  });
});

describe("2. OpenAI's error shape: type, param, code", () => {
  for (const [name, client] of [
    ["engine", () => openai],
    ["proxy", () => viaProxy],
  ] as const) {
    test(`${name}: a bad value, an unknown model, a prompt past the context length, an unknown field`, async () => {
      const badValue = await thrown(() => client().chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }], temperature: -1 }));
      expect(badValue).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ type: badValue.type, param: badValue.param, code: badValue.code }).toEqual({ type: "invalid_request_error", param: "temperature", code: "invalid_value" });

      const unknownModel = await thrown(() => client().chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "Hi" }] }));
      expect(unknownModel).toBeInstanceOf(OpenAI.NotFoundError);
      expect({ type: unknownModel.type, param: unknownModel.param, code: unknownModel.code }).toEqual({ type: "not_found_error", param: "model", code: "model_not_found" });

      const tooLong = await thrown(() => client().completions.create({ model: MODEL, prompt: "Hi", max_tokens: 1_000_000 }));
      expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ type: tooLong.type, param: tooLong.param, code: tooLong.code }).toEqual({ type: "invalid_request_error", param: "max_tokens", code: "context_length_exceeded" });
      expect(tooLong.message).toContain("maximum context length");

      const unknownField = await thrown(() => client().chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }], frobnicate: true } as never));
      expect({ status: unknownField.status, type: unknownField.type, param: unknownField.param }).toEqual({ status: 400, type: "invalid_request_error", param: "frobnicate" });
      expect(unknownField.code).toMatch(/^[a-z_]+$/);
    });
  }

  test("the proxy relays the engine's error body byte for byte", async () => {
    const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Hi" }], top_p: 7 });
    const direct = await fetch(`${engine.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const relayed = await fetch(`${proxy.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    expect(relayed.status).toBe(direct.status);
    expect(await relayed.text()).toBe(await direct.text());
  });

  test("the proxy's own errors have the shape too (invalid JSON: param null, field body)", async () => {
    const answer = await fetch(`${proxy.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{oops" });
    expect(answer.status).toBe(400);
    expect(((await answer.json()) as any).error).toEqual({ message: "body: invalid JSON", type: "invalid_request_error", param: null, code: "invalid_json", field: "body" });
  });

  test("Vercel AI SDK: APICallError with the status and the body's error", async () => {
    const provider = createOpenAICompatible({ name: "ctxr", baseURL: `${engine.url}/v1`, apiKey: "unused" });
    const error = await thrown(() => generateText({ model: provider.chatModel("gpt-4o"), prompt: "Hi", maxRetries: 0 }));
    const cause = APICallError.isInstance(error) ? error : (error.lastError ?? error.cause);
    expect(APICallError.isInstance(cause)).toBe(true);
    expect(cause.statusCode).toBe(404);
    expect(JSON.parse(cause.responseBody).error).toMatchObject({ type: "not_found_error", param: "model", code: "model_not_found" });
    expect(cause.message).toContain("does not exist");
  });

  test("LangChain: the context-length error is a ContextOverflowError, an unknown model MODEL_NOT_FOUND", async () => {
    const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0, maxTokens: 1_000_000 });
    const overflow = await thrown(() => chat.invoke("Hi"));
    expect(overflow.name).toBe("ContextOverflowError");
    const missing = await thrown(() => new ChatOpenAI({ model: "gpt-4o", apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0 }).invoke("Hi"));
    expect({ status: missing.status, code: missing.lc_error_code, type: missing.type, param: missing.param }).toEqual({ status: 404, code: "MODEL_NOT_FOUND", type: "not_found_error", param: "model" });
  });
});

describe("3. completions text_offset counts characters of the returned text", () => {
  const request = { model: MODEL, prompt: "Hi", echo: true, logprobs: 1, max_tokens: 6, temperature: 1, seed: 3 } as const;

  /** Offsets that point into `text` and never go back. */
  function expectOffsetsInto(text: string, offsets: number[]) {
    offsets.forEach((offset, i) => {
      expect(offset).toBeLessThanOrEqual([...text].length);
      if (i > 0) expect(offset).toBeGreaterThanOrEqual(offsets[i - 1]!);
    });
  }

  test("echo: BOS takes no characters, each prompt byte its own, the generated text begins after the prompt", async () => {
    const answer = await openai.completions.create(request);
    const choice = answer.choices[0]!;
    const logprobs = choice.logprobs!;
    expect(choice.text.startsWith("Hi")).toBe(true);
    expect(logprobs.tokens!.slice(0, 3)).toEqual(["<s>", "H", "i"]);
    expect(logprobs.text_offset!.slice(0, 4)).toEqual([0, 0, 1, 2]);
    expectOffsetsInto(choice.text, logprobs.text_offset!);
  });

  test("streamed with n = 2: each choice's offsets are the non-streamed ones", async () => {
    const whole = await openai.completions.create({ ...request, n: 2 });
    const streamed = new Map<number, { text: string; offsets: number[] }>();
    for await (const chunk of await openai.completions.create({ ...request, n: 2, stream: true })) {
      for (const choice of chunk.choices) {
        const seen = streamed.get(choice.index) ?? { text: "", offsets: [] };
        seen.text += choice.text;
        seen.offsets.push(...(choice.logprobs?.text_offset ?? []));
        streamed.set(choice.index, seen);
      }
    }
    for (const choice of whole.choices) {
      expect(streamed.get(choice.index)).toEqual({ text: choice.text, offsets: choice.logprobs!.text_offset! });
      expectOffsetsInto(choice.text, choice.logprobs!.text_offset!);
    }
  });

  test("skip_special_tokens false keeps <s> in the text of an id prompt, and its offsets count it", async () => {
    const answer = await openai.completions.create({ ...request, prompt: [256, 72, 105], skip_special_tokens: false } as never);
    const choice = answer.choices[0]!;
    expect(choice.text.startsWith("<s>Hi")).toBe(true);
    expect(choice.logprobs!.text_offset!.slice(0, 4)).toEqual([0, 3, 4, 5]);
  });
});

describe("4. streamed tool calls assemble to the non-streamed message", () => {
  const pick = { type: "function" as const, function: { name: "pick", description: "Pick a letter", parameters: PICK_PARAMETERS } };
  /** By seed: the calls of the non-streamed answer, and whether it ended before max_tokens (an unfinished call is content then). */
  const answers = new Map<number, { calls: number; finished: boolean }>();
  const finished = (seed: number) => answers.get(seed)?.finished ?? false;
  const chatRequest = (seed: number) => ({ model: MODEL, messages: [{ role: "user" as const, content: "Pick." }], tools: [pick], tool_choice: "required" as const, temperature: 1, seed, max_tokens: MAX_TOKENS });

  test("openai SDK: create vs chat.completions.stream().finalChatCompletion(), and raw deltas", async () => {
    for (const seed of SEEDS) {
      const answer = await openai.chat.completions.create(chatRequest(seed));
      const whole = answer.choices[0]!;
      const final = (await openai.chat.completions.stream(chatRequest(seed)).finalChatCompletion()).choices[0]!;
      expect(whole.finish_reason).toBe("tool_calls");
      answers.set(seed, { calls: whole.message.tool_calls!.length, finished: answer.usage!.completion_tokens < MAX_TOKENS });
      if (finished(seed)) expect(whole.message.content).toBeNull();
      expect(final.finish_reason).toBe(whole.finish_reason);
      expect(final.message.content).toBe(whole.message.content);
      const named = (message: typeof whole.message) => message.tool_calls!.map((call) => (call.type === "function" ? call.function : null));
      expect(named(final.message)).toEqual(named(whole.message));
      let content = "";
      for await (const chunk of await openai.chat.completions.create({ ...chatRequest(seed), stream: true })) content += chunk.choices[0]?.delta.content ?? "";
      expect(content).toBe(whole.message.content ?? "");
    }
    // The seeds cover finished answers of one, two and three or more calls.
    const counts = new Set([...answers.values()].filter((answer) => answer.finished).map((answer) => Math.min(answer.calls, 3)));
    expect([...counts].sort()).toEqual([1, 2, 3]);
  });

  const vercelModels: [string, () => LanguageModel][] = [
    ["createOpenAICompatible", () => createOpenAICompatible({ name: "ctxr", baseURL: `${engine.url}/v1`, apiKey: "unused" }).chatModel(MODEL)],
    ["createOpenAI().chat", () => createOpenAI({ baseURL: `${engine.url}/v1`, apiKey: "unused" }).chat(MODEL)],
  ];
  for (const [name, languageModel] of vercelModels) {
    test(`Vercel AI SDK ${name}: generateText vs streamText, the same text and calls`, async () => {
      const tools = { pick: tool({ description: "Pick a letter", inputSchema: jsonSchema<{ x: "a" | "b" }>(PICK_PARAMETERS as never) }) };
      for (const seed of CLIENT_SEEDS) {
        const options = { model: languageModel(), prompt: "Pick.", tools, toolChoice: "required" as const, temperature: 1, seed, maxOutputTokens: MAX_TOKENS, maxRetries: 0 };
        const whole = await generateText(options);
        const stream = streamText(options);
        const streamedCalls = await stream.toolCalls;
        expect(await stream.text).toBe(whole.text);
        if (finished(seed)) expect(whole.text).toBe("");
        expect(streamedCalls.map((call) => ({ name: call.toolName, input: call.input }))).toEqual(whole.toolCalls.map((call) => ({ name: call.toolName, input: call.input })));
        expect(whole.toolCalls.length).toBe(answers.get(seed)?.calls ?? whole.toolCalls.length);
        expect(await stream.finishReason).toBe(whole.finishReason);
      }
    });
  }

  test("LangChain bindTools: invoke vs the stream's chunks concatenated", async () => {
    for (const seed of CLIENT_SEEDS) {
      const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0, temperature: 1, maxTokens: MAX_TOKENS, modelKwargs: { seed } });
      const bound = chat.bindTools([pick], { tool_choice: "required" });
      const whole = await bound.invoke([new HumanMessage("Pick.")]);
      let assembled: AIMessageChunk | undefined;
      for await (const chunk of await bound.stream([new HumanMessage("Pick.")])) assembled = assembled === undefined ? chunk : assembled.concat(chunk);
      expect(assembled!.content).toEqual(whole.content);
      if (finished(seed)) expect(whole.content).toBe("");
      expect(assembled!.tool_calls!.map((call) => ({ name: call.name, args: call.args }))).toEqual(whole.tool_calls!.map((call) => ({ name: call.name, args: call.args })));
      expect(whole.tool_calls!.length).toBe(answers.get(seed)?.calls ?? whole.tool_calls!.length);
    }
  });
});

describe("5. an unknown role is a 400 naming messages[i].role", () => {
  test("openai SDK: BadRequestError, param messages[1].role", async () => {
    const messages = [
      { role: "user", content: "Hi" },
      { role: "narrator", content: "Once upon a time" },
    ];
    const error = await thrown(() => openai.chat.completions.create({ model: MODEL, messages: messages as never }));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect({ type: error.type, param: error.param, code: error.code }).toEqual({ type: "invalid_request_error", param: "messages[1].role", code: "invalid_value" });
    expect(error.message).toContain('unknown role "narrator"');
    // The known roles, developer included, are served.
    const known = await openai.chat.completions.create({
      model: MODEL,
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "system", content: "Be kind." },
        { role: "user", content: "Hi" },
      ],
      max_tokens: 2,
    });
    expect(known.choices[0]!.message.role).toBe("assistant");
  });

  test("LangChain: a ChatMessage of another role is refused the same way", async () => {
    const { ChatMessage } = await import("@langchain/core/messages");
    const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0, maxTokens: 2 });
    const error = await thrown(() => chat.invoke([new ChatMessage("Once upon a time", "narrator")]));
    expect({ status: error.status, param: error.param }).toEqual({ status: 400, param: "messages[0].role" });
  });
});

/**
 * 6. A Responses API round trip (POST /v1/responses) through each client: text, a stream, a
 * required tool call and a structured output. The tiny model's text is random bytes, so text is
 * checked against itself (streamed = whole, usage counts it); calls and objects against the schema.
 */
describe("6. the Responses API through the three clients", () => {
  const LETTER = { type: "object", properties: { letter: { enum: ["a", "b"] } }, required: ["letter"], additionalProperties: false } as const;
  const pickTool = { type: "function" as const, name: "pick", description: "Pick a letter", parameters: PICK_PARAMETERS as unknown as Record<string, unknown>, strict: true };

  test("openai SDK: responses.create (text, tool call, json_schema) and responses.stream", async () => {
    const text = await openai.responses.create({ model: MODEL, input: "Hello", max_output_tokens: 8, temperature: 0 });
    expect(text.object).toBe("response");
    expect(text.usage!.output_tokens).toBeGreaterThan(0);
    expect(text.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(0);
    const stream = openai.responses.stream({ model: MODEL, input: "Hello", max_output_tokens: 8, temperature: 0 });
    let deltas = "";
    for await (const event of stream) if (event.type === "response.output_text.delta") deltas += event.delta;
    const final = await stream.finalResponse();
    expect(deltas).toBe(final.output_text);
    expect(final.output_text).toBe(text.output_text);

    const called = await openai.responses.create({ model: MODEL, input: "Pick.", tools: [pickTool], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200 });
    const call = called.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error(`expected a function call, got ${JSON.stringify(called.output)}`);
    expect(call.name).toBe("pick");
    expect(["a", "b"]).toContain(JSON.parse(call.arguments).x);

    const structured = await openai.responses.create({ model: MODEL, input: "A letter.", text: { format: { type: "json_schema", name: "letter", schema: LETTER as never, strict: true } }, max_output_tokens: 200 });
    expect(["a", "b"]).toContain(JSON.parse(structured.output_text).letter);
  });

  test("Vercel AI SDK, openai(model) (the Responses API): generateText, streamText, a tool call, Output.object", async () => {
    const { Output } = await import("ai");
    const provider = createOpenAI({ baseURL: `${engine.url}/v1`, apiKey: "unused" });
    const model = provider(MODEL);
    const whole = await generateText({ model, prompt: "Hello", maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
    const streamed = streamText({ model, prompt: "Hello", maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
    expect(await streamed.text).toBe(whole.text);
    expect(whole.usage.outputTokens).toBeGreaterThan(0);

    const called = await generateText({
      model,
      prompt: "Pick.",
      tools: { pick: tool({ description: "Pick a letter", inputSchema: jsonSchema<{ x: "a" | "b" }>(PICK_PARAMETERS as never) }) },
      toolChoice: "required",
      providerOptions: { openai: { parallelToolCalls: false } },
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    expect(called.toolCalls[0]!.toolName).toBe("pick");
    expect(["a", "b"]).toContain((called.toolCalls[0]!.input as { x: string }).x);

    const structured = await generateText({ model, prompt: "A letter.", output: Output.object({ schema: jsonSchema<{ letter: "a" | "b" }>(LETTER as never) }), maxOutputTokens: 200, maxRetries: 0 });
    expect(["a", "b"]).toContain(structured.output.letter);
  });

  test("LangChain ChatOpenAI with useResponsesApi: invoke, stream, bindTools, withStructuredOutput", async () => {
    const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0, temperature: 0, maxTokens: 8, useResponsesApi: true });
    const whole = await chat.invoke([new HumanMessage("Hello")]);
    let assembled: AIMessageChunk | undefined;
    for await (const chunk of await chat.stream([new HumanMessage("Hello")])) assembled = assembled === undefined ? chunk : assembled.concat(chunk);
    expect(assembled!.text).toBe(whole.text);
    expect(whole.usage_metadata!.output_tokens).toBeGreaterThan(0);

    const tools = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${engine.url}/v1` }, maxRetries: 0, maxTokens: 200, useResponsesApi: true });
    // A named tool_choice: @langchain/openai 1.5 drops the string choices ("required", "auto") on its Responses path.
    const called = await tools.bindTools([{ type: "function", function: { name: "pick", description: "Pick a letter", parameters: PICK_PARAMETERS as never } }], { tool_choice: "pick", parallel_tool_calls: false }).invoke([new HumanMessage("Pick.")]);
    expect(called.tool_calls![0]!.name).toBe("pick");
    expect(["a", "b"]).toContain(called.tool_calls![0]!.args.x);

    const structured = await tools.withStructuredOutput(LETTER as never, { name: "letter", method: "jsonSchema", strict: true }).invoke([new HumanMessage("A letter.")]);
    expect(["a", "b"]).toContain((structured as { letter: string }).letter);
  });
});
