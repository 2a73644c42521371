/**
 * The official `openai` npm SDK against `ctxr serve --model` (a child process on an ephemeral
 * port, the real CPU runner, a random-weight tiny model whose chat template offers tools):
 * structured outputs through response_format json_schema, streamed and not, and the SDK's own
 * parsing (chat.completions.parse with zodResponseFormat); tool calling with tool_choice
 * "required", streamed and not, and parse with zodFunction. Every constrained answer that finished
 * validates with ajv (and zod, where the SDK parses it).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import Ajv from "ajv";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer, type SpawnedServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

/** Renders tools and marks calls as <tool_call>…</tool_call> (the server then parses hermes-style calls). */
const TOOLS_TEMPLATE = `{%- if tools %}<|system|>Functions: {{ tools | tojson }}. Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>
{% endif %}
{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

const PERSON = {
  type: "object",
  properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 120 }, role: { enum: ["admin", "user", "guest"] } },
  required: ["name", "age", "role"],
  additionalProperties: false,
};
const ZOD_PERSON = z.object({ name: z.string().max(8), age: z.number().int().min(0).max(120), role: z.enum(["admin", "user", "guest"]) });
const WEATHER_PARAMETERS = { type: "object", properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false };

const ajv = new Ajv({ strict: false });
const messages = [{ role: "user" as const, content: "Describe a person." }];
const SEEDS = [0, 1, 2, 3, 4, 5];

let model: { path: string; cleanup(): void };
let server: SpawnedServer;
let openai: OpenAI;

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-sdk");
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: TOOLS_TEMPLATE }));
  server = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "256", "--threads", "1"], { CTXR_RUNNER: buildRunner() }, 60_000);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 300_000);

afterAll(async () => {
  server?.kill("SIGTERM");
  await server?.exited;
  model?.cleanup();
});

const personFormat = { type: "json_schema" as const, json_schema: { name: "person", schema: PERSON, strict: true } };

describe("openai SDK: structured outputs", () => {
  test("response_format json_schema: every answer that finished is valid JSON for the schema", async () => {
    const validate = ajv.compile(PERSON);
    let finished = 0;
    for (const seed of SEEDS) {
      const completion = await openai.chat.completions.create({ model: "tiny-sdk", messages, response_format: personFormat, temperature: 1, seed, max_tokens: 120 });
      const choice = completion.choices[0]!;
      expect(["stop", "length"]).toContain(choice.finish_reason);
      if (choice.finish_reason !== "stop") continue;
      finished++;
      expect(validate(JSON.parse(choice.message.content!))).toBe(true);
    }
    expect(finished).toBeGreaterThanOrEqual(3);
  });

  test("streamed: the deltas join to the non-streamed answer of the same seed, which validates", async () => {
    const validate = ajv.compile(PERSON);
    for (const seed of SEEDS.slice(0, 3)) {
      const request = { model: "tiny-sdk", messages, response_format: personFormat, temperature: 1, seed, max_tokens: 120 };
      const whole = await openai.chat.completions.create(request);
      const stream = await openai.chat.completions.create({ ...request, stream: true });
      let content = "";
      let finish: string | null = null;
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta.content ?? "";
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(content).toBe(whole.choices[0]!.message.content!);
      expect(finish).toBe(whole.choices[0]!.finish_reason);
      if (finish === "stop") expect(validate(JSON.parse(content))).toBe(true);
    }
  });

  test("chat.completions.parse with zodResponseFormat: the SDK parses each finished answer with zod", async () => {
    let parsed = 0;
    for (const seed of SEEDS) {
      try {
        const completion = await openai.chat.completions.parse({ model: "tiny-sdk", messages, response_format: zodResponseFormat(ZOD_PERSON, "person"), temperature: 1, seed, max_tokens: 120 });
        const message = completion.choices[0]!.message;
        expect(message.parsed).not.toBeNull();
        expect(ZOD_PERSON.parse(message.parsed)).toEqual(message.parsed!);
        parsed++;
      } catch (error) {
        // The SDK refuses to parse an answer cut by max_tokens; nothing else may go wrong.
        expect((error as Error).constructor.name).toBe("LengthFinishReasonError");
      }
    }
    expect(parsed).toBeGreaterThanOrEqual(3);
  });
});

describe("openai SDK: tool calling", () => {
  const tools = [{ type: "function" as const, function: { name: "get_weather", description: "The weather in a city", parameters: WEATHER_PARAMETERS } }];

  test("tool_choice required: finish_reason tool_calls, calls of the declared function with valid arguments, streamed as deltas that join to the same calls", async () => {
    const validate = ajv.compile(WEATHER_PARAMETERS);
    for (const seed of SEEDS.slice(0, 3)) {
      const request = { model: "tiny-sdk", messages: [{ role: "user" as const, content: "Weather in Oslo?" }], tools, tool_choice: "required" as const, temperature: 1, seed, max_tokens: 200 };
      const whole = await openai.chat.completions.create(request);
      const choice = whole.choices[0]!;
      expect(choice.finish_reason).toBe("tool_calls");
      const calls = choice.message.tool_calls!.map((call) => (call.type === "function" ? call.function : null));
      expect(calls.length).toBeGreaterThanOrEqual(1);
      for (const call of calls) {
        expect(call!.name).toBe("get_weather");
        expect(validate(JSON.parse(call!.arguments))).toBe(true);
      }
      const streamed: { name: string; arguments: string }[] = [];
      for await (const chunk of await openai.chat.completions.create({ ...request, stream: true })) {
        for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
          const call = (streamed[delta.index] ??= { name: "", arguments: "" });
          call.name += delta.function?.name ?? "";
          call.arguments += delta.function?.arguments ?? "";
        }
      }
      expect(streamed).toEqual(calls.map((call) => ({ name: call!.name, arguments: call!.arguments })));
    }
  });

  test("chat.completions.parse with zodFunction: the SDK parses the arguments with zod", async () => {
    const weather = z.object({ city: z.string().max(10), unit: z.enum(["c", "f"]) });
    const completion = await openai.chat.completions.parse({
      model: "tiny-sdk",
      messages: [{ role: "user", content: "Weather in Oslo?" }],
      tools: [zodFunction({ name: "get_weather", parameters: weather })],
      tool_choice: "required",
      temperature: 1,
      seed: 7,
      max_tokens: 200,
    });
    const calls = completion.choices[0]!.message.tool_calls ?? [];
    expect(calls.length).toBeGreaterThanOrEqual(1);
    for (const call of calls) expect(weather.parse(call.function.parsed_arguments)).toEqual(call.function.parsed_arguments as never);
  });
});
