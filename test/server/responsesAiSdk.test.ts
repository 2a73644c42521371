/**
 * The Vercel AI SDK's default OpenAI provider (@ai-sdk/openai: `createOpenAI({baseURL})("model")`
 * calls POST /v1/responses) against `ctxr serve --model` in process (the real CPU runner, a
 * random-weight tiny model whose template renders tools): generateText and streamText with text,
 * a required tool call and a two-step tool loop (the SDK sends the call back as item_reference
 * or function_call and the result as function_call_output), and structured output with
 * Output.object and generateObject, validated by the SDK's own schema check.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, jsonSchema, Output, stepCountIs, streamText, tool } from "ai";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const TOOLS_TEMPLATE = `{%- if tools %}<|system|>Functions: {{ tools | tojson }}. Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

let model: { path: string; cleanup(): void };
let api: EngineTestServer;
let openai: ReturnType<typeof createOpenAI>;
/** Every /v1/responses body the SDK sent. */
const sent: Record<string, unknown>[] = [];

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-aisdk");
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: TOOLS_TEMPLATE }));
  api = await startEngineServer(model.path, { threads: 1 });
  const recordingFetch = (async (input: string | URL | Request, init?: RequestInit) => {
    if (String(input).endsWith("/responses") && typeof init?.body === "string") sent.push(JSON.parse(init.body));
    return fetch(input, init);
  }) as typeof fetch;
  openai = createOpenAI({ baseURL: `${api.url}/v1`, apiKey: "unused", fetch: recordingFetch });
}, 300_000);

afterAll(async () => {
  await api?.close();
  model?.cleanup();
});

const PERSON = z.object({ name: z.string().max(8), age: z.number().int().min(0).max(120) });
const weather = tool({
  description: "The weather in a city",
  inputSchema: jsonSchema<{ city: string; unit: "c" | "f" }>({ type: "object", properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false }),
});

describe("AI SDK over /v1/responses", () => {
  test("generateText: text, usage and the response id from /v1/responses", async () => {
    sent.length = 0;
    const result = await generateText({ model: openai("tiny-aisdk"), system: "Be brief.", prompt: "Hello", maxOutputTokens: 8, temperature: 0 });
    expect(sent).toHaveLength(1);
    expect(sent[0]!.instructions ?? (sent[0]!.input as { role: string }[])[0]!.role).toBeDefined();
    expect(typeof result.text).toBe("string");
    expect(result.usage.outputTokens).toBeGreaterThan(0);
    expect(result.usage.inputTokens).toBeGreaterThan(0);
    expect(result.response.id).toMatch(/^resp_/);
    expect(["stop", "length"]).toContain(result.finishReason);
  });

  test("streamText: the streamed text is the response's text, with usage", async () => {
    const result = streamText({ model: openai("tiny-aisdk"), prompt: "Hello", maxOutputTokens: 8, temperature: 0 });
    let streamed = "";
    for await (const delta of result.textStream) streamed += delta;
    expect(streamed).toBe(await result.text);
    expect((await result.usage).outputTokens).toBeGreaterThan(0);
    const plain = await generateText({ model: openai("tiny-aisdk"), prompt: "Hello", maxOutputTokens: 8, temperature: 0 });
    expect(streamed).toBe(plain.text);
  });

  test("a required tool call: the declared tool with valid input", async () => {
    const result = await generateText({ model: openai("tiny-aisdk"), prompt: "Weather in Oslo?", tools: { get_weather: weather }, toolChoice: "required", temperature: 0, maxOutputTokens: 200, providerOptions: { openai: { parallelToolCalls: false } } });
    expect(result.toolCalls).toHaveLength(1);
    const call = result.toolCalls[0]!;
    expect(call.toolName).toBe("get_weather");
    expect(["c", "f"]).toContain((call.input as { unit: string }).unit);
    expect(result.finishReason).toBe("tool-calls");
  });

  test("a two-step tool loop: the second request carries the call and its output, and is served", async () => {
    sent.length = 0;
    const executed: unknown[] = [];
    const result = await generateText({
      model: openai("tiny-aisdk"),
      prompt: "Weather in Oslo?",
      tools: { get_weather: tool({ ...weather, execute: async (input) => (executed.push(input), "12 degrees") }) },
      toolChoice: "required",
      temperature: 0,
      maxOutputTokens: 200,
      stopWhen: stepCountIs(2),
      providerOptions: { openai: { parallelToolCalls: false } },
    });
    expect(result.steps).toHaveLength(2);
    // toolChoice "required" holds for both steps: each is a call, executed.
    expect(executed).toHaveLength(2);
    expect(sent).toHaveLength(2);
    const second = sent[1]!.input as { type?: string; output?: string }[];
    expect(second.some((item) => item.type === "function_call_output" && item.output?.includes("12 degrees"))).toBe(true);
    expect(second.some((item) => item.type === "item_reference" || item.type === "function_call")).toBe(true);
  });

  test("structured output: Output.object and generateObject give objects valid for the schema", async () => {
    const text = await generateText({ model: openai("tiny-aisdk"), prompt: "A person", output: Output.object({ schema: PERSON }), temperature: 0, maxOutputTokens: 200 });
    expect(PERSON.parse(text.output)).toEqual(text.output);
    const object = await generateObject({ model: openai("tiny-aisdk"), prompt: "Another person", schema: PERSON, temperature: 0, maxOutputTokens: 200 });
    expect(PERSON.parse(object.object)).toEqual(object.object);
    const format = (sent.at(-1)!.text as { format: { type: string; schema: unknown } }).format;
    expect(format.type).toBe("json_schema");
  });
});
