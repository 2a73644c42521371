/**
 * Tool calling through the HTTP API (a real server, the real CPU runner) on a random-weight model
 * whose chat template renders tools in the hermes style: tools reach the prompt, history with
 * calls and tool answers renders, "required" and named choices always give declared functions
 * with arguments valid under their schemas (ajv), streamed calls assemble to the same, and
 * requests the model cannot serve are refused naming the field.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Ajv from "ajv";
import type { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startEngineServer, type Client, type EngineTestServer } from "./serverKit.ts";

setDefaultTimeout(180_000);

const HERMES_TEMPLATE = `{%- if tools %}<|system|>You can call these functions:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>.
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|assistant|>{% for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}
{%- elif message.role == "tool" %}<|tool|>{{ message.content }}
{%- else %}<|{{ message.role }}|>{{ message.content }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

let model: { path: string; cleanup(): void };
let plain: { path: string; cleanup(): void };
let engine: GenerationEngine;
let api: EngineTestServer;
let plainApi: EngineTestServer;

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-tools");
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: HERMES_TEMPLATE }));
  plain = tinyModelFolder({}, "tiny-no-tools");
  api = await startEngineServer(model.path);
  plainApi = await startEngineServer(plain.path, { kvBlocks: 64, threads: 1 });
  engine = api.engine;
}, 300_000);

afterAll(async () => {
  await api?.close();
  await plainApi?.close();
  model?.cleanup();
  plain?.cleanup();
});

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false },
  },
};
const CLOCK = { type: "function", function: { name: "now", parameters: { type: "object", properties: { zone: { type: "integer", minimum: -12, maximum: 14 } }, required: ["zone"] } } };
const TOOLS = [WEATHER, CLOCK];
const messages = [{ role: "user", content: "Weather in Oslo?" }];
const ajv = new Ajv({ strict: false });
const validators = new Map(TOOLS.map((tool) => [tool.function.name, ajv.compile(tool.function.parameters)]));

describe("tool calling", () => {
  test("tools reach the prompt through the template; history with calls and tool answers renders", async () => {
    const without = engine.chatPromptIds(messages);
    const withTools = engine.chatPromptIds(messages, { tools: TOOLS });
    expect(withTools.length).toBeGreaterThan(without.length + 50);
    expect(engine.tokenizer.decode(withTools)).toContain('"name": "get_weather"');
    const tokenized = await api.post("/tokenize", { messages, tools: TOOLS });
    expect(tokenized.body.tokens).toEqual(withTools);
    const history = [
      ...messages,
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Oslo", "unit": "c"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "4 degrees" },
    ];
    const answer = await api.post("/v1/chat/completions", { messages: history, tools: TOOLS, tool_choice: "none", max_tokens: 4, temperature: 0 });
    expect(answer.status).toBe(200);
    const rendered = engine.tokenizer.applyChatTemplate(
      [
        { role: "user", content: "Weather in Oslo?" },
        { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Oslo", unit: "c" } } }] },
        { role: "tool", content: "4 degrees", tool_call_id: "call_1" },
      ],
      { tools: TOOLS },
    );
    expect(rendered).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call><|tool|>4 degrees<|assistant|>');
    expect(answer.body.usage.prompt_tokens).toBe(engine.tokenizer.encode(rendered).length);
    // add_generation_prompt false: no assistant turn opened at the end.
    const closed = await api.post("/v1/chat/completions", { messages, add_generation_prompt: false, max_tokens: 2 });
    const open = await api.post("/v1/chat/completions", { messages, max_tokens: 2 });
    expect(open.body.usage.prompt_tokens - closed.body.usage.prompt_tokens).toBe(engine.tokenizer.encode("<|assistant|>").length);
  });

  test('tool_choice "required": every answer is calls of declared functions with valid arguments', async () => {
    let calls = 0;
    for (let seed = 0; seed < 10; seed++) {
      const answer = await api.post("/v1/chat/completions", { messages, tools: TOOLS, tool_choice: "required", temperature: 1, seed, max_tokens: 200 });
      expect(answer.status).toBe(200);
      const choice = answer.body.choices[0];
      if (choice.finish_reason === "length") continue;
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.tool_calls.length).toBeGreaterThanOrEqual(1);
      for (const call of choice.message.tool_calls) {
        expect(call.id).toMatch(/^call_/);
        expect(call.type).toBe("function");
        const validate = validators.get(call.function.name);
        expect(validate).toBeDefined();
        expect(validate!(JSON.parse(call.function.arguments))).toBe(true);
        calls++;
      }
    }
    expect(calls).toBeGreaterThanOrEqual(5);
  });

  test("a named function: one call of it; parallel_tool_calls false: one call at most", async () => {
    for (let seed = 0; seed < 5; seed++) {
      const named = await api.post("/v1/chat/completions", { messages, tools: TOOLS, tool_choice: { type: "function", function: { name: "now" } }, temperature: 1, seed, max_tokens: 120 });
      const choice = named.body.choices[0];
      if (choice.finish_reason === "length") continue;
      expect(choice.message.tool_calls.map((call: { function: { name: string } }) => call.function.name)).toEqual(["now"]);
      expect(validators.get("now")!(JSON.parse(choice.message.tool_calls[0].function.arguments))).toBe(true);
      const single = await api.post("/v1/chat/completions", { messages, tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 });
      if (single.body.choices[0].finish_reason === "tool_calls") expect(single.body.choices[0].message.tool_calls.length).toBe(1);
    }
  });

  test("streamed calls arrive as tool_calls deltas that assemble to the non-streamed answer", async () => {
    const body = { messages, tools: TOOLS, tool_choice: "required", temperature: 1, seed: 3, max_tokens: 200 };
    const whole = await api.post("/v1/chat/completions", body);
    const response = await fetch(api.server.url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) });
    const chunks = (await response.text())
      .split("\n\n")
      .filter((block) => block.startsWith("data: {"))
      .map((block) => JSON.parse(block.slice(6)));
    const assembled: { id?: string; name: string; arguments: string }[] = [];
    let finish = null;
    for (const chunk of chunks) {
      const choice = chunk.choices[0];
      if (choice === undefined) continue;
      for (const delta of choice.delta.tool_calls ?? []) {
        const call = (assembled[delta.index] ??= { name: "", arguments: "" });
        if (delta.id) call.id = delta.id;
        call.name += delta.function?.name ?? "";
        call.arguments += delta.function?.arguments ?? "";
      }
      finish = choice.finish_reason ?? finish;
    }
    expect(finish).toBe(whole.body.choices[0].finish_reason);
    expect(assembled.map(({ name, arguments: args }) => ({ name, arguments: args }))).toEqual(whole.body.choices[0].message.tool_calls.map((call: { function: unknown }) => call.function));
  });

  test("requests the model cannot serve are refused naming the field", async () => {
    const cases: [Client, Record<string, unknown>, string, RegExp][] = [
      [plainApi, { messages, tools: TOOLS }, "tools", /does not render tools/],
      [api, { messages, tools: TOOLS, tool_choice: { type: "function", function: { name: "fly" } } }, "tool_choice", /not in tools/],
      [api, { messages, tool_choice: "required" }, "tool_choice", /needs tools/],
      [api, { messages, tools: [{ type: "function", function: { name: "bad name" } }] }, "tools[0].function.name", /letters/],
      [api, { messages, tools: TOOLS, tool_choice: "required", response_format: { type: "json_object" } }, "response_format", /cannot be combined/],
      [api, { messages, tools: [WEATHER, WEATHER] }, "tools[1].function.name", /twice/],
    ];
    for (const [target, body, field, message] of cases) {
      const answer = await target.post("/v1/chat/completions", { max_tokens: 4, ...body });
      expect(answer.status).toBe(400);
      expect(answer.body.error.field).toBe(field);
      expect(answer.body.error.message).toMatch(message);
    }
  });
});
