/**
 * POST /v1/responses over the built-in engine (a real server, the real CPU runner, a random-weight
 * tiny model whose chat template renders tools in the hermes style), driven by the official
 * `openai` SDK (responses.create, responses.stream) and raw HTTP: text answers and their usage,
 * structured output through text.format, function tools with tool_choice "required" and the tool
 * round trip, previous_response_id (stored, store false, unknown, forgotten under the byte budget),
 * the event stream's types and sequence numbers, and the fields refused with a 400 naming them.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import Ajv from "ajv";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startEngineServer, startTestServer, type EngineTestServer, type TestServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const HERMES_TEMPLATE = `{%- if tools %}<|system|>Functions: {{ tools | tojson }}. Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|assistant|>{{ message.content }}{% for call in message.tool_calls %}<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}</tool_call>{% endfor %}
{%- elif message.role == "tool" %}<|tool|>{{ message.content }}
{%- else %}<|{{ message.role }}|>{{ message.content }}
{%- endif %}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

export const PERSON = {
  type: "object",
  properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 120 } },
  required: ["name", "age"],
  additionalProperties: false,
};
export const WEATHER_TOOL = {
  type: "function" as const,
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false },
  strict: true,
};

const ajv = new Ajv({ strict: false });
let model: { path: string; cleanup(): void };
let api: EngineTestServer;
let openai: OpenAI;

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-responses");
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: HERMES_TEMPLATE }));
  api = await startEngineServer(model.path, { threads: 1 });
  openai = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 300_000);

afterAll(async () => {
  await api?.close();
  model?.cleanup();
});

describe("responses.create", () => {
  test("a string input: a response object with one message of output_text, Responses usage and usage.ctxr", async () => {
    const response = await openai.responses.create({ model: "tiny-responses", input: "Hello there", instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
    expect(response.id).toMatch(/^resp_/);
    expect(response.object).toBe("response");
    expect(["completed", "incomplete"]).toContain(response.status!);
    expect(response.model).toBe("tiny-responses");
    expect(response.instructions).toBe("Be brief.");
    expect(response.output).toHaveLength(1);
    const message = response.output[0]!;
    if (message.type !== "message") throw new Error(`expected a message, got ${message.type}`);
    expect(message.id).toMatch(/^msg_/);
    expect(message.role).toBe("assistant");
    expect(message.content[0]!.type).toBe("output_text");
    expect(response.output_text).toBe((message.content[0] as { text: string }).text);
    const usage = response.usage!;
    expect(usage.output_tokens).toBeGreaterThan(0);
    expect(usage.output_tokens).toBeLessThanOrEqual(8);
    expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
    expect(usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(0);
    expect(usage.output_tokens_details.reasoning_tokens).toBe(0);
    const ctxr = (usage as unknown as { ctxr: Record<string, number> }).ctxr;
    expect(ctxr.prompt_tokens_prefix_reused + ctxr.prompt_tokens_chunk_reused + ctxr.prompt_tokens_recomputed + ctxr.prompt_tokens_computed).toBeGreaterThan(0);
    if (usage.output_tokens === 8) expect(response.status).toBe("incomplete");
  });

  test("instructions and input messages reach the prompt as the chat template renders them", async () => {
    const chat = await api.post("/tokenize", { messages: [{ role: "system", content: "Rules." }, { role: "user", content: "Hi" }, { role: "assistant", content: "Yo" }, { role: "user", content: "More" }] });
    const response = await openai.responses.create({
      input: [
        { role: "user", content: [{ type: "input_text", text: "Hi" }] },
        { role: "assistant", content: [{ type: "output_text", text: "Yo" }] } as never,
        { type: "message", role: "user", content: "More" },
      ],
      instructions: "Rules.",
      max_output_tokens: 1,
    });
    expect(response.usage!.input_tokens).toBe(chat.body.count);
  });

  test("text.format json_schema: every response that completed is JSON valid for the schema", async () => {
    const validate = ajv.compile(PERSON);
    let completed = 0;
    for (const seed of [0, 1, 2, 3]) {
      const response = await openai.responses.create({ input: "A person", text: { format: { type: "json_schema", name: "person", schema: PERSON, strict: true } }, max_output_tokens: 80, temperature: 1, seed } as never);
      if (response.status !== "completed") continue;
      completed++;
      expect(validate(JSON.parse(response.output_text))).toBe(true);
    }
    expect(completed).toBeGreaterThanOrEqual(2);
  });

  test('text.format json_object: the text is a JSON value', async () => {
    const response = await openai.responses.create({ input: "JSON please", text: { format: { type: "json_object" } }, max_output_tokens: 60, seed: 3 } as never);
    if (response.status === "completed") expect(() => JSON.parse(response.output_text)).not.toThrow();
  });

  test('tools with tool_choice "required": function_call items of the declared function, arguments valid; the tool round trip continues', async () => {
    const validate = ajv.compile(WEATHER_TOOL.parameters);
    // One call (parallel_tool_calls false): the grammar ends the answer after it.
    const response = await openai.responses.create({ input: "Weather in Oslo?", tools: [WEATHER_TOOL], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200, seed: 1 } as never);
    expect(response.status).toBe("completed");
    expect(response.output.map((item) => item.type)).toEqual(["function_call"]);
    const calls = response.output.filter((item) => item.type === "function_call");
    for (const call of calls) {
      if (call.type !== "function_call") continue;
      expect(call.name).toBe("get_weather");
      expect(call.call_id).toMatch(/^call_/);
      expect(call.id).toMatch(/^fc_/);
      expect(validate(JSON.parse(call.arguments))).toBe(true);
    }
    const call = calls[0]! as OpenAI.Responses.ResponseFunctionToolCall;
    // Stateless: the call and its output sent back as input items.
    const stateless = await openai.responses.create({
      input: [{ role: "user", content: "Weather in Oslo?" }, { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments }, { type: "function_call_output", call_id: call.call_id, output: "12 degrees" }],
      tools: [WEATHER_TOOL],
      tool_choice: "none",
      max_output_tokens: 4,
      store: false,
    } as never);
    expect(stateless.output[0]!.type).toBe("message");
    // Stateful: only the output, continuing the stored response; the prompt is the same as the stateless one.
    const continued = await openai.responses.create({ previous_response_id: response.id, input: [{ type: "function_call_output", call_id: call.call_id, output: "12 degrees" }], tools: [WEATHER_TOOL], tool_choice: "none", max_output_tokens: 4 } as never);
    expect(continued.usage!.input_tokens).toBe(stateless.usage!.input_tokens);
  });

  test('tool_choice {"type": "function", "name"}: a call of that function', async () => {
    const clock = { type: "function", name: "now", parameters: { type: "object", properties: { zone: { type: "integer", minimum: -12, maximum: 14 } }, required: ["zone"] } };
    const response = await openai.responses.create({ input: "Time?", tools: [WEATHER_TOOL, clock], tool_choice: { type: "function", name: "now" }, max_output_tokens: 100, seed: 2 } as never);
    const call = response.output.find((item) => item.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.name).toBe("now");
  });
});

describe("previous_response_id", () => {
  test("continues the stored conversation: the new prompt holds the first input and output (an item_reference resolves to a stored item)", async () => {
    const first = await openai.responses.create({ input: "Tell me something", max_output_tokens: 6, temperature: 0 });
    const text = first.output_text;
    const fresh = await openai.responses.create({ input: "And more?", max_output_tokens: 1 });
    const continued = await openai.responses.create({ input: "And more?", previous_response_id: first.id, max_output_tokens: 1 });
    expect(continued.previous_response_id).toBe(first.id);
    const stateless = await openai.responses.create({ input: [{ role: "user", content: "Tell me something" }, { role: "assistant", content: text } as never, { role: "user", content: "And more?" }], max_output_tokens: 1, store: false });
    expect(continued.usage!.input_tokens).toBe(stateless.usage!.input_tokens);
    expect(continued.usage!.input_tokens).toBeGreaterThan(fresh.usage!.input_tokens + first.usage!.input_tokens - 4);
    const referenced = await openai.responses.create({ input: [{ role: "user", content: "Tell me something" }, { type: "item_reference", id: first.output[0]!.id! }, { role: "user", content: "And more?" }], max_output_tokens: 1 } as never);
    expect(referenced.usage!.input_tokens).toBe(stateless.usage!.input_tokens);
  });

  test("unknown id: 404 in OpenAI's error shape naming previous_response_id (the SDK raises NotFoundError); store false is not kept", async () => {
    const unknown = await api.post("/v1/responses", { input: "Hi", previous_response_id: "resp_nope" });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.field).toBe("previous_response_id");
    expect(unknown.body.error.message).toContain("resp_nope");
    const raised = await openai.responses.create({ input: "Hi", previous_response_id: "resp_nope" }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(raised).toBeInstanceOf(OpenAI.NotFoundError);
    const unstored = await openai.responses.create({ input: "Hi", store: false, max_output_tokens: 1 });
    expect((unstored as unknown as { store: boolean }).store).toBe(false);
    expect((await api.post("/v1/responses", { input: "Again", previous_response_id: unstored.id })).status).toBe(404);
    const badReference = await api.post("/v1/responses", { input: [{ type: "item_reference", id: "msg_nope" }] });
    expect(badReference.status).toBe(400);
    expect(badReference.body.error.field).toBe("input[0].id");
  });

  test("the store is bounded in bytes: the oldest responses are forgotten (404), the newest kept", async () => {
    const small: TestServer = await startTestServer({ server: { engine: api.engine, maxResponseBytes: 6000 } });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 8; i++) {
        const answer = await small.post("/v1/responses", { input: `Message number ${i} ${"padding ".repeat(40)}`, max_output_tokens: 2 });
        expect(answer.status).toBe(200);
        ids.push(answer.body.id);
      }
      expect((await small.post("/v1/responses", { input: "Next", previous_response_id: ids[0], max_output_tokens: 1 })).status).toBe(404);
      expect((await small.post("/v1/responses", { input: "Next", previous_response_id: ids[7], max_output_tokens: 1 })).status).toBe(200);
    } finally {
      await small.close();
    }
  });
});

describe("responses.stream", () => {
  test("events in order with consecutive sequence numbers; deltas join to finalResponse's text", async () => {
    const stream = openai.responses.stream({ input: "A person", text: { format: { type: "json_schema", name: "person", schema: PERSON, strict: true } }, max_output_tokens: 80, seed: 1 } as never);
    const events: { type: string; sequence_number: number; delta?: string }[] = [];
    for await (const event of stream) events.push(event as never);
    const final = await stream.finalResponse();
    const types = events.map((event) => event.type);
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
    expect(types.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
    const deltas = events.filter((event) => event.type === "response.output_text.delta").map((event) => event.delta).join("");
    expect(final.output_text).toBe(deltas);
    expect(ajv.compile(PERSON)(JSON.parse(final.output_text))).toBe(true);
    expect(final.usage!.output_tokens).toBeGreaterThan(0);
    // Kept: a stream can be continued too.
    expect((await api.post("/v1/responses", { input: "Next", previous_response_id: final.id, max_output_tokens: 1 })).status).toBe(200);
  });

  test("on the wire: event: and data: lines; a tool call streams as function_call item events", async () => {
    const response = await fetch(`${api.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input: "Weather?", tools: [WEATHER_TOOL], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200, seed: 4, stream: true }),
    });
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    const blocks = (await response.text()).split("\n\n").filter((block) => block !== "");
    const events = blocks.map((block) => {
      const [eventLine, dataLine] = block.split("\n");
      expect(eventLine).toMatch(/^event: /);
      const data = JSON.parse(dataLine!.slice("data: ".length));
      expect(data.type).toBe(eventLine!.slice("event: ".length));
      return data;
    });
    const types = events.map((event) => event.type);
    expect(types).toContain("response.function_call_arguments.delta");
    expect(types).toContain("response.function_call_arguments.done");
    const done = events.find((event) => event.type === "response.function_call_arguments.done");
    expect(JSON.parse(done.arguments)).toHaveProperty("city");
    const last = events.at(-1);
    expect(last.type).toBe("response.completed");
    expect(last.response.output.some((item: { type: string }) => item.type === "function_call")).toBe(true);
  });
});

describe("refused and malformed requests: 400 naming the field", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ background: true }, "background"],
    [{ include: ["reasoning.encrypted_content"] }, "include"],
    [{ reasoning: { effort: "high" } }, "reasoning"],
    [{ prompt: { id: "pmpt_1" } }, "prompt"],
    [{ conversation: "conv_1" }, "conversation"],
    [{ top_logprobs: 3 }, "top_logprobs"],
    [{ truncation: "auto" }, "truncation"],
    [{ service_tier: "flex" }, "service_tier"],
    [{ frobnicate: 1 }, "frobnicate"],
    [{ tools: [{ type: "web_search" }] }, "tools[0].type"],
    [{ tools: [{ type: "function", name: "bad name!" }] }, "tools[0].name"],
    [{ tools: [WEATHER_TOOL], tool_choice: { type: "function", name: "other" } }, "tool_choice"],
    [{ text: { format: { type: "xml" } } }, "text.format.type"],
    [{ text: { format: { type: "json_schema", name: "x", schema: 5 } } }, "text.format.schema"],
    [{ text: { verbosity: "low" } }, "text.verbosity"],
    [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x" }] }] }, "input[0].content[0].type"],
    [{ input: [{ type: "reasoning", summary: "none" }] }, "input[0].summary"],
    [{ input: [{ type: "reasoning", summary: [], content: "x" }] }, "input[0].content"],
    [{ input: [{ type: "web_search_call", id: "ws_1" }] }, "input[0].type"],
    [{ input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{not json" }] }, "input[0]"],
    [{ input: [] }, "input"],
    [{ max_output_tokens: 0 }, "max_output_tokens"],
    [{ model: "other-model" }, "model"],
  ];
  for (const [fields, field] of cases) {
    test(`${JSON.stringify(fields).slice(0, 80)} → ${field}`, async () => {
      const answer = await api.post("/v1/responses", { input: "Hi", max_output_tokens: 1, ...fields });
      expect(answer.status).toBe(field === "model" ? 404 : 400);
      expect(answer.body.error.field).toBe(field);
      expect(answer.body.error.message.startsWith(`${field}:`)).toBe(true);
    });
  }

  test('reasoning {"effort": "none"}, metadata, user and parallel_tool_calls are accepted and echoed', async () => {
    const answer = await api.post("/v1/responses", { input: "Hi", max_output_tokens: 1, reasoning: { effort: "none" }, metadata: { team: "a" }, user: "u-1", parallel_tool_calls: false });
    expect(answer.status).toBe(200);
    expect(answer.body.metadata).toEqual({ team: "a" });
    expect(answer.body.user).toBe("u-1");
    expect(answer.body.parallel_tool_calls).toBe(false);
  });

  test("a model-less server answers /v1/responses with 404 saying how to load a model; the OpenAPI document lists the route", async () => {
    const bare = await startTestServer();
    try {
      const answer = await bare.post("/v1/responses", { input: "Hi" });
      expect(answer.status).toBe(404);
      expect(answer.body.error.message).toContain("--model");
    } finally {
      await bare.close();
    }
    const document = await api.get("/openapi.json");
    expect(document.body.paths["/v1/responses"].post.requestBody).toBeDefined();
  });
});
