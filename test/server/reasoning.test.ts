/**
 * Reasoning output through the HTTP API (a real server, the real CPU runner, the OpenAI SDK) on
 * tiny random-weight models whose templates think: Qwen3's kind (the answer opens `<think>`
 * itself, enable_thinking false writes an empty think block into the prompt) and DeepSeek-R1's
 * (the prompt opens `<think>`). Answers are forced into random shapes (helpers/forcedOutput.ts) —
 * no reasoning, reasoning closed by `</think>` as one token or byte by byte, cut by max_tokens
 * before it closes — and every whole and streamed answer must split as a plain reference splits
 * the generated tokens' text. Structured outputs and tool calls apply after the reasoning.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import Ajv from "ajv";
import OpenAI from "openai";
import type { ThinkStart as ReasoningStart } from "../../src/engine/reasoning/reasoningParser.ts";
import { forceOutputs, type ForcedOutput } from "../helpers/forcedOutput.ts";
import { THINK_CLOSE_ID, THINK_OPEN_ID, thinkingModelFolder } from "../helpers/thinkingModel.ts";
import { referenceSplit } from "../engine/reasoning/referenceSplit.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

setDefaultTimeout(300_000);

const TOOLS = `{%- if tools %}<|system|>Tools:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>.
{% endif %}`;

const QWEN3_TEMPLATE = `${TOOLS}{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{%- if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}`;

const DEEPSEEK_TEMPLATE = `${TOOLS}{%- for message in messages %}{%- if message.role == "assistant" %}<|assistant|>{{ message.content.split("</think>")[-1] }}
{%- else %}<|{{ message.role }}|>{{ message.content }}
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|assistant|><think>
{% endif %}`;

/** Whitespace, an optional <think>, then letters, spaces and </think> (one token or byte by byte) in any order. */
const THINKING_SHAPES = "[ \\n]?(<think>)?([ab \\n]|</think>){0,14}";

const WEATHER = { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"], additionalProperties: false } } };

interface Served {
  api: EngineTestServer;
  openai: OpenAI;
  force: ForcedOutput;
  cleanup(): void;
}

async function serve(template: string, name: string): Promise<Served> {
  const model = thinkingModelFolder(template, name);
  const api = await startEngineServer(model.path, { kvBlocks: 128, threads: 1, servedModelName: "tiny" });
  return { api, openai: new OpenAI({ baseURL: `${api.url}/v1`, apiKey: "unused", maxRetries: 0 }), force: forceOutputs(api.engine), cleanup: model.cleanup };
}

let qwen3: Served;
let deepseek: Served;

beforeAll(async () => {
  qwen3 = await serve(QWEN3_TEMPLATE, "tiny-qwen3-thinking");
  deepseek = await serve(DEEPSEEK_TEMPLATE, "tiny-r1-thinking");
}, 300_000);

afterAll(async () => {
  for (const served of [qwen3, deepseek]) {
    served?.force.restore();
    await served?.api.close();
    served?.cleanup();
  }
});

const ask = (extra: Record<string, unknown> = {}) => ({ model: "tiny", messages: [{ role: "user", content: "Why?" }], ...extra });

/** A streamed chat completion as the OpenAI SDK reads it. */
async function streamChat(openai: OpenAI, body: Record<string, unknown>): Promise<AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>> {
  return (await openai.chat.completions.create({ ...body, stream: true } as never)) as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
}

/** The generated text, from the tokens' logprobs (the end-of-sequence token has no text). */
function generatedText(logprobs: { token: string }[]): string {
  return logprobs
    .map((entry) => entry.token)
    .filter((token) => token !== "</s>")
    .join("");
}

describe("the parser in use", () => {
  test("auto detects it from the chat template", () => {
    expect(qwen3.api.engine.reasoningParser).toBe("qwen3");
    expect(deepseek.api.engine.reasoningParser).toBe("deepseek_r1");
  });
});

describe("whole and streamed answers split as the reference splits them", () => {
  const cases: [string, () => Served, ReasoningStart, Record<string, unknown>][] = [
    ["qwen3 (the answer may open <think>)", () => qwen3, "opening", {}],
    ["deepseek_r1 (the prompt opened <think>)", () => deepseek, "reasoning", {}],
    ["qwen3 with enable_thinking false (the prompt closed it)", () => qwen3, "content", { chat_template_kwargs: { enable_thinking: false } }],
  ];
  for (const [name, served, start, extra] of cases) {
    test(`${name}: 80 seeds, whole and streamed`, async () => {
      const { api, openai, force } = served();
      const shapes = new Set<string>();
      for (let seed = 0; seed < 80; seed++) {
        const body = ask({ ...extra, seed, max_tokens: 4 + ((seed * 7) % 20), logprobs: true });
        await force.next(THINKING_SHAPES);
        const whole = await api.post("/v1/chat/completions", body);
        expect(whole.status).toBe(200);
        const message = whole.body.choices[0].message;
        const text = generatedText(whole.body.choices[0].logprobs.content);
        const expected = referenceSplit(start, text);
        expect({ reasoning: message.reasoning_content, content: message.content }).toEqual(expected);
        const wholeTokens = whole.body.choices[0].logprobs.content.map((entry: { token: string }) => entry.token);
        if (expected.reasoning === null) shapes.add("no reasoning");
        else if (expected.content === null) shapes.add("reasoning never closed");
        if (wholeTokens.includes("</think>")) shapes.add("</think> as one token");
        if (wholeTokens.join(" ").includes("< / t h i n k >")) shapes.add("</think> byte by byte");

        await force.next(THINKING_SHAPES);
        const stream = await streamChat(openai, { ...body, stream_options: { include_usage: true } });
        let reasoning = "";
        let content = "";
        let reasoningChunks = 0;
        const tokens: { token: string }[] = [];
        let usage: OpenAI.Completions.CompletionUsage | null = null;
        for await (const chunk of stream) {
          if (chunk.usage) usage = chunk.usage;
          const choice = chunk.choices[0];
          if (choice === undefined) continue;
          const delta = choice.delta as { content?: string | null; reasoning_content?: string };
          if (delta.reasoning_content !== undefined) {
            reasoning += delta.reasoning_content;
            reasoningChunks++;
          }
          content += delta.content ?? "";
          tokens.push(...(choice.logprobs?.content ?? []));
        }
        const streamedExpected = referenceSplit(start, generatedText(tokens));
        expect({ reasoning: reasoning === "" ? null : reasoning, content: content === "" ? null : content }).toEqual({ ...streamedExpected, content: streamedExpected.content === "" ? null : streamedExpected.content });
        if (streamedExpected.reasoning === null) expect(reasoningChunks).toBe(0);
        expect(usage!.completion_tokens_details).toBeDefined();
      }
      // The seeds made answers of every shape.
      expect([...shapes].sort()).toEqual(start === "content" ? ["</think> as one token", "</think> byte by byte", "no reasoning"] : ["</think> as one token", "</think> byte by byte", "no reasoning", "reasoning never closed"]);
    });
  }
});

describe("structured outputs after the reasoning", () => {
  const SCHEMA = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const validate = new Ajv().compile(SCHEMA);
  const format = { type: "json_schema", json_schema: { name: "answer", schema: SCHEMA, strict: true } };

  test("deepseek_r1: the reasoning is free text (the grammar does not apply), the content after </think> follows the schema", async () => {
    let freeReasoning = 0;
    for (let seed = 0; seed < 12; seed++) {
      const answer = await deepseek.api.post("/v1/chat/completions", ask({ seed, max_tokens: 200, response_format: format, logit_bias: { [THINK_CLOSE_ID]: 2.5 } }));
      expect(answer.status).toBe(200);
      const { message, finish_reason } = answer.body.choices[0];
      expect(finish_reason).toBe("stop");
      expect(validate(JSON.parse(message.content))).toBe(true);
      if (message.reasoning_content !== null && /[^\s{]/.test(message.reasoning_content.trimStart()[0] ?? "")) freeReasoning++;
      const { completion_tokens, completion_tokens_details } = answer.body.usage;
      expect(completion_tokens_details.reasoning_tokens).toBeGreaterThanOrEqual(1);
      expect(completion_tokens_details.reasoning_tokens).toBeLessThan(completion_tokens);
    }
    // Text no JSON grammar allows, written inside the reasoning.
    expect(freeReasoning).toBeGreaterThan(0);
  });

  test("the reasoning may not end the answer with a stop token while the schema's answer is owed", async () => {
    for (let seed = 0; seed < 6; seed++) {
      // The end-of-sequence token (257) is made the likeliest of all; it may only close the JSON.
      const answer = await deepseek.api.post("/v1/chat/completions", ask({ seed, max_tokens: 200, response_format: format, logit_bias: { 257: 8, [THINK_CLOSE_ID]: 3 } }));
      expect(answer.status).toBe(200);
      const { message, finish_reason } = answer.body.choices[0];
      expect(finish_reason).toBe("stop");
      expect(validate(JSON.parse(message.content))).toBe(true);
    }
  });

  test("qwen3: the answer opens <think> (the only token the grammar does not allow that the gate lets through), closes it, then answers in JSON; streamed alike", async () => {
    const bias = { [THINK_OPEN_ID]: 100, [THINK_CLOSE_ID]: 100 };
    for (let seed = 0; seed < 6; seed++) {
      const answer = await qwen3.api.post("/v1/chat/completions", ask({ seed, max_tokens: 120, response_format: format, logit_bias: bias }));
      expect(answer.status).toBe(200);
      const { message } = answer.body.choices[0];
      expect(validate(JSON.parse(message.content))).toBe(true);
      expect(answer.body.usage.completion_tokens_details.reasoning_tokens).toBeGreaterThanOrEqual(2);
    }
    const stream = await streamChat(qwen3.openai, ask({ seed: 3, max_tokens: 120, response_format: format, logit_bias: bias }));
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? "";
    expect(validate(JSON.parse(content))).toBe(true);
  });

  test("without a reasoning parser's start (enable_thinking false) the grammar applies from the first token", async () => {
    const answer = await qwen3.api.post("/v1/chat/completions", ask({ seed: 1, max_tokens: 120, response_format: format, chat_template_kwargs: { enable_thinking: false } }));
    expect(answer.status).toBe(200);
    expect(answer.body.choices[0].message.reasoning_content).toBeNull();
    expect(validate(JSON.parse(answer.body.choices[0].message.content))).toBe(true);
    expect(answer.body.usage.completion_tokens_details.reasoning_tokens).toBe(0);
  });

  test("reasoning cut by max_tokens before </think>: all reasoning, no content, finish_reason length", async () => {
    const answer = await deepseek.api.post("/v1/chat/completions", ask({ seed: 2, max_tokens: 6, response_format: format, logit_bias: { [THINK_CLOSE_ID]: -100 } }));
    expect(answer.status).toBe(200);
    const { message, finish_reason } = answer.body.choices[0];
    expect(finish_reason).toBe("length");
    expect(message.content).toBeNull();
    expect(message.reasoning_content.length).toBeGreaterThan(0);
    expect(answer.body.usage.completion_tokens_details.reasoning_tokens).toBe(6);
  });
});

describe("tool calls after the reasoning", () => {
  test("tool_choice required: the model reasons, then calls; whole and streamed", async () => {
    for (let seed = 0; seed < 4; seed++) {
      const body = ask({ seed, max_tokens: 200, tools: [WEATHER], tool_choice: "required", logit_bias: { [THINK_CLOSE_ID]: 2.5 } });
      const answer = await deepseek.api.post("/v1/chat/completions", body);
      expect(answer.status).toBe(200);
      const { message, finish_reason } = answer.body.choices[0];
      expect(finish_reason).toBe("tool_calls");
      expect(message.tool_calls.length).toBeGreaterThanOrEqual(1);
      expect(message.tool_calls[0].function.name).toBe("get_weather");
      expect(typeof JSON.parse(message.tool_calls[0].function.arguments).city).toBe("string");
      expect(message.reasoning_content === null || typeof message.reasoning_content === "string").toBe(true);
    }
    const stream = await streamChat(deepseek.openai, ask({ seed: 5, max_tokens: 200, tools: [WEATHER], tool_choice: "required", logit_bias: { [THINK_CLOSE_ID]: 2.5 } }));
    const names: string[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const call of chunk.choices[0]?.delta.tool_calls ?? []) if (call.function?.name) names.push(call.function.name);
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(names).toEqual(["get_weather"]);
    expect(finish).toBe("tool_calls");
  });

  test("a tool call written inside the reasoning is reasoning, not a call", async () => {
    const call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>';
    const escaped = call.replace(/[{}[\]()*+?.\\^$|]/g, "\\$&");
    await deepseek.force.next(`${escaped}</think>${escaped}`);
    const answer = await deepseek.api.post("/v1/chat/completions", ask({ seed: 1, max_tokens: 200, tools: [WEATHER] }));
    expect(answer.status).toBe(200);
    const { message } = answer.body.choices[0];
    expect(message.reasoning_content).toBe(call);
    expect(message.tool_calls).toHaveLength(1);
    expect(message.content).toBeNull();
  });
});

describe("chat_template_kwargs", () => {
  test("reach the template: enable_thinking false renders the empty think block", () => {
    const engine = qwen3.api.engine;
    const rendered = engine.tokenizer.applyChatTemplate([{ role: "user", content: "Hi" }], { templateKwargs: { enable_thinking: false } });
    expect(rendered.endsWith("<|assistant|><think>\n\n</think>\n\n")).toBe(true);
    expect(engine.tokenizer.applyChatTemplate([{ role: "user", content: "Hi" }], {}).endsWith("<|assistant|>")).toBe(true);
  });

  test("bad input is a 400 naming the field", async () => {
    for (const kwargs of [{ enable_thinking: "no" }, { enable_thinking: 0 }]) {
      const answer = await qwen3.api.post("/v1/chat/completions", ask({ chat_template_kwargs: kwargs, max_tokens: 2 }));
      expect(answer.status).toBe(400);
      expect(JSON.stringify(answer.body)).toContain("chat_template_kwargs.enable_thinking");
    }
    const notObject = await qwen3.api.post("/v1/chat/completions", ask({ chat_template_kwargs: [1], max_tokens: 2 }));
    expect(notObject.status).toBe(400);
    expect(JSON.stringify(notObject.body)).toContain("chat_template_kwargs");
  });
});

describe("/v1/responses", () => {
  test("a reasoning item (reasoning_text) before the message, whole and streamed, as the reference splits the text", async () => {
    const { api, openai, force } = deepseek;
    const shapes = new Set<string>();
    for (let seed = 0; seed < 16; seed++) {
      const body = { model: "tiny", input: "Why?", seed, max_output_tokens: 4 + ((seed * 5) % 16) };
      // The forced shapes always close the reasoning, so that the text is known from the items.
      await force.next("[ab \\n]{0,6}</think>[ab]{0,4}");
      const whole = await api.post("/v1/responses", body);
      expect(whole.status).toBe(200);
      const items = whole.body.output as { type: string; content: { text: string }[] }[];
      const reasoningItems = items.filter((item) => item.type === "reasoning");
      const reasoning = reasoningItems.map((item) => item.content[0]!.text).join("");
      const message = items.filter((item) => item.type === "message").map((item) => item.content[0]!.text).join("");
      expect(reasoningItems.length).toBeLessThanOrEqual(1);
      if (reasoningItems.length === 1) expect(items[0]!.type).toBe("reasoning");
      shapes.add(`${reasoning !== ""}/${message !== ""}`);

      await force.next("[ab \\n]{0,6}</think>[ab]{0,4}");
      const stream = (await openai.responses.create({ ...body, stream: true } as never)) as unknown as AsyncIterable<{ type: string; delta?: string; text?: string; response?: { output: { type: string; content?: { text: string }[] }[] } }>;
      let reasoningDeltas = "";
      let textDeltas = "";
      let done = "";
      let final: { type: string; content?: { text: string }[] }[] = [];
      for await (const event of stream) {
        if (event.type === "response.reasoning_text.delta") reasoningDeltas += event.delta;
        if (event.type === "response.reasoning_text.done") done = event.text!;
        if (event.type === "response.output_text.delta") textDeltas += event.delta;
        if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response!.output;
      }
      expect(done).toBe(reasoningDeltas);
      const finalReasoning = final.filter((item) => item.type === "reasoning").map((item) => item.content![0]!.text).join("");
      expect(finalReasoning).toBe(reasoningDeltas);
      expect(final.filter((item) => item.type === "message").map((item) => item.content![0]!.text).join("")).toBe(textDeltas);
      expect(referenceSplit("reasoning", `${reasoningDeltas}</think>${textDeltas}`)).toEqual({ reasoning: reasoningDeltas || null, content: textDeltas || null });
    }
    expect(shapes.size).toBeGreaterThanOrEqual(2);
  });

  test("usage counts the reasoning tokens; a reasoning item given back as input is accepted (and not shown to the model)", async () => {
    const answer = await deepseek.api.post("/v1/responses", { model: "tiny", input: "Why?", seed: 4, max_output_tokens: 60, text: { format: { type: "json_schema", name: "a", schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false } } } });
    expect(answer.status).toBe(200);
    expect(answer.body.output[0].type).toBe("reasoning");
    expect(answer.body.usage.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    const next = await deepseek.api.post("/v1/responses", { model: "tiny", input: [{ role: "user", content: "Why?" }, ...answer.body.output, { role: "user", content: "And?" }], max_output_tokens: 2 });
    expect(next.status).toBe(200);
  });
});
