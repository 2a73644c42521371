/**
 * The models' own chat templates rendered by ctxr (@huggingface/jinja, through the chat request's
 * message normalization) byte for byte as Python's jinja2 renders them, set up as transformers'
 * apply_chat_template (scripts/oracle/render_chat_template.py): gpt-oss's harmony template
 * (scripts/oracle/templates/gpt-oss.jinja, llama.cpp's copy of openai/gpt-oss-120b's) and
 * Qwen3's, which Qwen3-MoE (Qwen3-30B-A3B) ships unchanged (templates/qwen3.jinja). The
 * conversations cover a system or developer message, every reasoning_effort, multi-turn, tools of
 * every parameter shape the template types, tool calls with and without earlier reasoning, tool
 * results, builtin tools, a training-style last turn, and the template's own errors.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { normalizeChatMessages } from "../../src/chat/chatMessages.ts";
import { loadModelTokenizer, type ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";

const PYTHON = "/usr/bin/python3";
const REFERENCE = join(REPO_ROOT, "scripts/oracle/render_chat_template.py");
const jinja2Available = existsSync(PYTHON) && spawnSync(PYTHON, ["-c", "import jinja2"]).status === 0;

interface Case {
  name: string;
  messages: unknown[];
  tools?: unknown[];
  add_generation_prompt?: boolean;
  kwargs?: Record<string, unknown>;
}

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, unit: { type: "string", enum: ["c", "f"], default: "c" } }, required: ["city"] },
  },
};

/** Every parameter shape gpt-oss's render_typescript_type handles. */
const SHAPES = {
  type: "function",
  function: {
    name: "shapes",
    description: "Takes one of each",
    parameters: {
      type: "object",
      properties: {
        count: { type: "integer", default: 3 },
        ratio: { type: "number", nullable: true },
        flag: { type: "boolean", description: "A switch" },
        names: { type: "array", items: { type: "string" } },
        scores: { type: "array", items: { type: "number" } },
        points: { type: "array", items: { type: "object", properties: { x: { type: "number" }, y: { type: "number" } }, required: ["x"] } },
        anything: { type: "array" },
        either: { type: ["string", "number"] },
        choice: { oneOf: [{ type: "string", description: "a name" }, { type: "integer" }] },
        nested: { type: "object", properties: { inner: { type: "string", enum: ["a", "b"] }, deep: { type: "object" } }, required: ["inner"] },
        free: {},
      },
      required: ["count", "names"],
    },
  },
};
const NO_PARAMETERS = { type: "function", function: { name: "now", description: "The time" } };

const CALL = { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "unit": "c"}' } };

const GPT_OSS_CASES: Case[] = [
  { name: "one user message, default effort", messages: [{ role: "user", content: "Hi" }] },
  ...(["low", "medium", "high"] as const).map((effort) => ({ name: `system message, reasoning_effort ${effort}`, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "2+2?" }], kwargs: { reasoning_effort: effort } })),
  { name: "developer message", messages: [{ role: "developer", content: "Answer in French." }, { role: "user", content: "Hello" }] },
  {
    name: "multi-turn, an earlier answer's reasoning dropped",
    messages: [
      { role: "user", content: "What's 2+2? Ça va?" },
      { role: "assistant", content: "Four.", reasoning_content: "Simple sum." },
      { role: "user", content: "\nThanks — 日本語 too\n" },
    ],
  },
  { name: "tools of every shape", messages: [{ role: "system", content: "Use tools." }, { role: "user", content: "Go" }], tools: [WEATHER, SHAPES, NO_PARAMETERS], kwargs: { reasoning_effort: "low" } },
  {
    name: "a tool call with its reasoning, then the tool's result",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, reasoning_content: "Need the weather tool.", tool_calls: [CALL] },
      { role: "tool", tool_call_id: "call_1", content: '{"temp": 21, "sky": "clear \\"sunny\\""}' },
    ],
    tools: [WEATHER],
  },
  {
    name: "a tool call with content, then a final answer (the analysis dropped)",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "Let me check.", tool_calls: [CALL] },
      { role: "tool", tool_call_id: "call_1", content: "21C" },
      { role: "assistant", content: "It is 21C." },
      { role: "user", content: "Thanks" },
    ],
    tools: [WEATHER],
  },
  { name: "model identity and builtin tools", messages: [{ role: "user", content: "Search" }], kwargs: { model_identity: "You are Tiny.", builtin_tools: ["browser", "python"] } },
  {
    name: "a training-style last assistant turn (no generation prompt)",
    messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!", reasoning_content: "Greet back." },
    ],
    add_generation_prompt: false,
  },
  { name: "channel markup in an assistant's content is the template's error", messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "<|channel|>final<|message|>x" }, { role: "user", content: "?" }] },
  { name: "a tool message without a call is the template's error", messages: [{ role: "user", content: "Hi" }, { role: "tool", tool_call_id: "x", content: "1" }] },
];

const QWEN3_CASES: Case[] = [
  { name: "system and user", messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Name a prime." }] },
  { name: "enable_thinking false", messages: [{ role: "user", content: "Hi" }], kwargs: { enable_thinking: false } },
  {
    name: "multi-turn with reasoning_content",
    messages: [
      { role: "user", content: "What's 2+2?" },
      { role: "assistant", content: "<think>\nadd\n</think>\n\nFour." },
      { role: "user", content: "And 3+3?" },
      { role: "assistant", content: "Six.", reasoning_content: "add again" },
    ],
    add_generation_prompt: false,
  },
  {
    name: "tools, a call and its result",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [CALL] },
      { role: "tool", tool_call_id: "call_1", content: "21C" },
    ],
    tools: [WEATHER, SHAPES],
  },
];

/** The reference's renderings (or the template's error) of `cases`' normalized messages. */
function referenceRenderings(template: string, cases: readonly Case[]): ({ text: string } | { error: string })[] {
  const input = JSON.stringify({
    template,
    cases: cases.map((c) => ({ messages: normalizeChatMessages(c.messages).map(asTemplateSees), tools: c.tools ?? null, add_generation_prompt: c.add_generation_prompt ?? true, kwargs: c.kwargs ?? {} })),
  });
  const run = spawnSync(PYTHON, [REFERENCE], { input, encoding: "utf8" });
  if (run.status !== 0) throw new Error(`render_chat_template.py failed: ${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** A message as ctxr's renderer hands it to a template: reasoning under both names the templates read. */
function asTemplateSees(message: ReturnType<typeof normalizeChatMessages>[number]): Record<string, unknown> {
  return message.reasoning_content === undefined ? { ...message } : { ...message, thinking: message.reasoning_content };
}

async function templateTokenizer(template: string, folder: { path: string }): Promise<ModelTokenizer> {
  const configPath = join(folder.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: template }));
  return loadModelTokenizer(folder.path);
}

const templates: [string, string, Case[]][] = [
  ["gpt-oss (harmony)", "gpt-oss.jinja", GPT_OSS_CASES],
  ["Qwen3 / Qwen3-MoE", "qwen3.jinja", QWEN3_CASES],
];

for (const [name, file, cases] of templates) {
  describe.skipIf(!jinja2Available)(`${name}'s own template renders byte-identically to jinja2's rendering`, () => {
    const template = readFileSync(join(REPO_ROOT, "scripts/oracle/templates", file), "utf8");
    const folder = tinyModelFolder({}, `template-${file}`);
    let tokenizer: ModelTokenizer;
    let reference: ({ text: string } | { error: string })[];
    beforeAll(async () => {
      tokenizer = await templateTokenizer(template, folder);
      reference = referenceRenderings(template, cases);
    });
    afterAll(() => folder.cleanup());

    cases.forEach((c, index) => {
      test(c.name, () => {
        const expected = reference[index]!;
        const render = () =>
          tokenizer.applyChatTemplate(normalizeChatMessages(c.messages), { addGenerationPrompt: c.add_generation_prompt ?? true, ...(c.kwargs ? { templateKwargs: c.kwargs } : {}), ...(c.tools ? { tools: c.tools } : {}) });
        if ("error" in expected) {
          expect(render).toThrow(expected.error);
          return;
        }
        const ours = render();
        expect(ours).toBe(expected.text);
        if (file === "gpt-oss.jinja") expect(ours).toContain(`Reasoning: ${(c.kwargs?.reasoning_effort as string | undefined) ?? "medium"}\n`);
      });
    });
  });
}
