/**
 * Nothing silently ignored: every field of OpenAI's chat and completions APIs and the vLLM extras
 * (src/server/requestFields.ts) is sent to a real server. Honoured and informational ones are
 * served, refused ones get a 400 naming the field and why, unknown ones a 400 naming them; the
 * README's field table lists every field with the same status.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REQUEST_FIELDS, type Endpoint } from "../../src/server/requestFields.ts";
import { engineServerForTests } from "./serverKit.ts";

setDefaultTimeout(180_000);

const server = engineServerForTests("tiny-fields");

const PATHS: Record<Endpoint, string> = { chat: "/v1/chat/completions", completions: "/v1/completions" };
const BASE: Record<Endpoint, Record<string, unknown>> = {
  chat: { messages: [{ role: "user", content: "Hello there" }], max_tokens: 3, temperature: 0 },
  completions: { prompt: "Hello there", max_tokens: 3, temperature: 0 },
};
/** The tiny model's template does not render tools: tools are refused for that reason, on "tools". */
const NEEDS_TOOL_TEMPLATE = new Set(["tools"]);
/** Nor does it read reasoning_effort (gpt-oss's does: test/server/harmonyServe.test.ts). */
const NEEDS_EFFORT_TEMPLATE = new Set(["reasoning_effort"]);

describe("every request field", () => {
  for (const field of REQUEST_FIELDS) {
    for (const endpoint of field.on) {
      test(`${endpoint} ${field.name}: ${field.status}`, async () => {
        const body: Record<string, unknown> = { ...BASE[endpoint], ...field.sample };
        if (field.name === "model") body.model = server.engine.modelId;
        for (const [key, value] of Object.entries(body)) if (value === undefined) delete body[key];
        const answer = await server.api.post(PATHS[endpoint], body);
        if (field.status === "refused") {
          expect(answer.status).toBe(400);
          expect(answer.body.error.field).toBe(field.name);
          if (field.why !== undefined) expect(answer.body.error.message).toContain(field.why);
        } else if (NEEDS_TOOL_TEMPLATE.has(field.name)) {
          expect(answer.status).toBe(400);
          expect(answer.body.error.message).toContain("does not render tools");
        } else if (NEEDS_EFFORT_TEMPLATE.has(field.name)) {
          expect(answer.status).toBe(400);
          expect(answer.body.error.field).toBe(field.name);
          expect(answer.body.error.message).toContain("no reasoning_effort setting");
        } else {
          expect(answer.body.error?.message).toBeUndefined();
          expect(answer.status).toBe(200);
        }
      });
    }
  }

  test("a field refused only for some values is served with its default", async () => {
    for (const field of REQUEST_FIELDS.filter((f) => f.refuse !== undefined && f.status === "refused")) {
      for (const endpoint of field.on) {
        const answer = await server.api.post(PATHS[endpoint], { ...BASE[endpoint], [field.name]: null });
        expect(answer.status).toBe(200);
      }
    }
    expect((await server.api.post(PATHS.chat, { ...BASE.chat, store: true })).body.error.field).toBe("store");
    expect((await server.api.post(PATHS.chat, { ...BASE.chat, service_tier: "flex" })).body.error.field).toBe("service_tier");
    expect((await server.api.post(PATHS.completions, { ...BASE.completions, guided_decoding_backend: "outlines" })).body.error.field).toBe("guided_decoding_backend");
  });

  test("an unknown field is a 400 naming it", async () => {
    for (const endpoint of ["chat", "completions"] as const) {
      const answer = await server.api.post(PATHS[endpoint], { ...BASE[endpoint], temprature: 0.5 });
      expect(answer.status).toBe(400);
      expect(answer.body.error.field).toBe("temprature");
    }
  });

  test("unknown fields inside objects are 400s naming them too", async () => {
    const cases: [Endpoint, Record<string, unknown>, string][] = [
      ["chat", { stream: true, stream_options: { include_usage: true, include_obfuscation: true } }, "stream_options.include_obfuscation"],
      ["completions", { stream: true, stream_options: { continuous_usage_stats: true } }, "stream_options.continuous_usage_stats"],
      ["chat", { ctxr: { policy: "full", recompute: 0.5 } }, "ctxr.recompute"],
      ["chat", { documents: [{ text: "A document.", source: "web" }] }, "documents[0].source"],
      ["chat", { messages: [{ role: "user", content: "Hi", weight: 2 }] }, "messages[0].weight"],
    ];
    for (const [endpoint, extra, field] of cases) {
      const answer = await server.api.post(PATHS[endpoint], { ...BASE[endpoint], ...extra });
      expect(answer.status).toBe(400);
      expect(answer.body.error.field).toBe(field);
    }
  });

  test("the honoured vLLM extras do what they say", async () => {
    // min_tokens: the end-of-sequence and stop tokens cannot end the text before it.
    const free = await server.api.post(PATHS.completions, { prompt: "Hi", max_tokens: 12, temperature: 0, logprobs: 0 });
    const firstId = server.engine.tokenizer.encode(free.body.choices[0].logprobs.tokens[0])[0]!;
    const stopped = await server.api.post(PATHS.completions, { prompt: "Hi", max_tokens: 12, temperature: 0, stop_token_ids: [firstId] });
    expect(stopped.body.usage.completion_tokens).toBe(1);
    const held = await server.api.post(PATHS.completions, { prompt: "Hi", max_tokens: 12, temperature: 0, stop_token_ids: [firstId], min_tokens: 5 });
    expect(held.body.usage.completion_tokens).toBeGreaterThanOrEqual(5);
    // truncate_prompt_tokens keeps the prompt's last tokens.
    const long = "one two three four five six seven eight nine ten";
    const truncated = await server.api.post(PATHS.completions, { prompt: long, max_tokens: 4, temperature: 0, truncate_prompt_tokens: 10 });
    const tail = server.engine.completionPromptIds(long).slice(-10);
    const byIds = await server.api.post(PATHS.completions, { prompt: tail, max_tokens: 4, temperature: 0 });
    expect(truncated.body.usage.prompt_tokens).toBe(10);
    expect(truncated.body.choices[0].text).toBe(byIds.body.choices[0].text);
    // allowed_token_ids: only those tokens.
    const allowed = server.engine.tokenizer.encode("xy");
    const only = await server.api.post(PATHS.completions, { prompt: "Hi", max_tokens: 8, temperature: 1, seed: 3, allowed_token_ids: allowed });
    expect(only.body.choices[0].text).toMatch(/^[xy]{8}$/);
    // request_id names the answer.
    expect((await server.api.post(PATHS.chat, { ...BASE.chat, request_id: "abc-1" })).body.id).toBe("chatcmpl-abc-1");
    // cache_salt: another salt finds none of the cached prompt; the same salt does.
    const prompt = "A long shared prefix for the cache salt test, long enough for several blocks.";
    await server.api.post(PATHS.completions, { prompt, max_tokens: 1, cache_salt: "a" });
    const same = await server.api.post(PATHS.completions, { prompt, max_tokens: 1, cache_salt: "a" });
    const other = await server.api.post(PATHS.completions, { prompt, max_tokens: 1, cache_salt: "b" });
    expect(same.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(other.body.usage.prompt_tokens_details.cached_tokens).toBe(0);
    // add_generation_prompt reaches the template (whose effect test/server/toolCalls.test.ts shows).
    const closed = await server.api.post(PATHS.chat, { ...BASE.chat, add_generation_prompt: false });
    expect(closed.body.usage.prompt_tokens).toBe(server.engine.chatPromptIds([{ role: "user", content: "Hello there" }], { addGenerationPrompt: false }).length);
  });

  test("the README's field table lists every field with its status", () => {
    const readme = readFileSync(join(import.meta.dir, "../../README.md"), "utf8");
    const table = readme.slice(readme.indexOf("#### Request fields"));
    for (const field of REQUEST_FIELDS) {
      const row = table.split("\n").find((line) => line.startsWith(`| \`${field.name}\` |`));
      expect(row, `README row for ${field.name}`).toBeDefined();
      expect(row!.toLowerCase()).toContain(field.status);
    }
  });
});
