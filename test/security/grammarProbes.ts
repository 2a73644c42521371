/**
 * Hostile structured-output and tool requests (issue 27), shared by
 * test/security/grammarHostile.test.ts and scripts/bench-hostile.ts: each probe is one request
 * against a `ctxr serve --model` child; while it runs /healthz is polled and its longest answer
 * is the stall; after it, a valid json_object request shows whether the probe broke structured
 * outputs for the requests that follow.
 */

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** A chat template that renders tools (hermes style), so that tool requests reach the grammar. */
const TOOLS_TEMPLATE = `{%- if tools %}<|system|>Tools:{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>.
{% endif %}{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}
{% endfor %}{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

/** Gives the model folder's tokenizer the tools template. */
export function useToolsTemplate(modelPath: string): void {
  const configPath = join(modelPath, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: TOOLS_TEMPLATE }));
}

export interface GrammarProbe {
  name: string;
  path: "/v1/chat/completions" | "/v1/completions" | "/tokenize";
  body: Record<string, unknown>;
  /** A phrase of the 400's message. */
  expects: string;
}

const deepRegex = (depth: number) => "(".repeat(depth) + "a" + ")".repeat(depth);
const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX";
/** `length` characters over 50 letters, deterministic. */
export const letterRun = (length: number) => Array.from({ length }, (_, i) => letters[(i * 7919 + (i >> 3)) % 50]).join("");

const chat = (extra: Record<string, unknown>) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 8, ...extra });
const tool = (name: string, parameters: Record<string, unknown>) => ({ type: "function", function: { name, description: `tool ${name}`, parameters } });
const manyTools = (count: number) => Array.from({ length: count }, (_, i) => tool(`tool_${i}`, { type: "object", properties: { q: { type: "string" } } }));

/** The probes of issue 27's items 1-5 (poisoning, budgets, tools, $ref cycles). */
export function grammarProbes(): GrammarProbe[] {
  const deepPattern = { type: "object", properties: { s: { type: "string", pattern: deepRegex(200) } }, required: ["s"] };
  return [
    { name: "regex nesting 200", path: "/v1/chat/completions", body: chat({ guided_regex: deepRegex(200) }), expects: "nests parentheses 200 deep" },
    { name: "grammar nesting 200", path: "/v1/chat/completions", body: chat({ guided_grammar: `root ::= ${"(".repeat(200)}"a"${")".repeat(200)}` }), expects: "nests parentheses 200 deep" },
    { name: "schema pattern nesting 200", path: "/v1/chat/completions", body: chat({ response_format: { type: "json_schema", json_schema: { name: "p", schema: deepPattern } } }), expects: "nests parentheses 200 deep" },
    { name: "tool parameter pattern nesting 200", path: "/v1/chat/completions", body: chat({ tools: [tool("f", deepPattern)], tool_choice: "required" }), expects: "nests parentheses 200 deep" },
    { name: "unclosed regex (xgrammar aborts)", path: "/v1/chat/completions", body: chat({ guided_regex: "(ab" }), expects: "cannot be compiled" },
    { name: "undefined grammar rule (xgrammar aborts)", path: "/v1/chat/completions", body: chat({ guided_grammar: "root ::= missing_rule" }), expects: "cannot be compiled" },
    { name: "const of 6,000 characters", path: "/v1/chat/completions", body: chat({ guided_json: { const: letterRun(6000) } }), expects: "limit of 1024" },
    { name: "guided_choice of 100k", path: "/v1/chat/completions", body: chat({ guided_choice: Array.from({ length: 100_000 }, (_, i) => `c${i}`) }), expects: "limit of 4096" },
    { name: "enum of 40k", path: "/v1/chat/completions", body: chat({ guided_json: { enum: Array.from({ length: 40_000 }, (_, i) => `e${i}`) } }), expects: "limit of 65536" },
    { name: "200 tools", path: "/v1/chat/completions", body: chat({ tools: manyTools(200), tool_choice: "required" }), expects: "limit of 128" },
    { name: "2,000 tools", path: "/v1/chat/completions", body: chat({ tools: manyTools(2000), tool_choice: "required" }), expects: "limit of 128" },
    { name: "$ref to itself", path: "/v1/chat/completions", body: chat({ guided_json: { $ref: "#" } }), expects: "$ref cycle" },
    { name: "$ref cycle through $defs", path: "/v1/chat/completions", body: chat({ guided_json: { $ref: "#/$defs/a", $defs: { a: { $ref: "#/$defs/b" }, b: { anyOf: [{ $ref: "#/$defs/a" }] } } } }), expects: "$ref cycle" },
  ];
}

/** The ambiguous grammar of issue 27 item 4, made to run long by min_tokens. */
export const AMBIGUOUS_COMPLETION = { prompt: "a", max_tokens: 800, min_tokens: 800, guided_grammar: 's ::= s s s | s s | "a" | "aa"\nroot ::= s' };

/** A valid json_object chat request: must succeed whatever came before. */
export const VALID_JSON_OBJECT = chat({ response_format: { type: "json_object" }, max_tokens: 12, temperature: 0 });

export interface Timed<T> {
  result: T;
  /** The longest /healthz answer while `work` ran, ms. */
  stallMs: number;
  wallMs: number;
}

/** Runs `work` while /healthz is asked again and again (one at a time); the longest answer is the stall. */
export async function healthzDuring<T>(url: string, work: () => Promise<T>): Promise<Timed<T>> {
  let done = false;
  let stallMs = 0;
  const poller = (async () => {
    while (!done) {
      const started = performance.now();
      await fetch(`${url}/healthz`).then((answer) => answer.arrayBuffer());
      stallMs = Math.max(stallMs, performance.now() - started);
      await Bun.sleep(10);
    }
  })();
  const started = performance.now();
  try {
    const result = await work();
    return { result, stallMs, wallMs: performance.now() - started };
  } finally {
    done = true;
    await poller;
  }
}

export interface Answered {
  status: number;
  text: string;
}

export async function post(url: string, path: string, body: unknown): Promise<Answered> {
  const answer = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: answer.status, text: await answer.text() };
}
