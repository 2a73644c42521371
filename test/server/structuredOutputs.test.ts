/**
 * Structured outputs through the HTTP API (a real server, the real CPU runner): response_format
 * json_object / json_schema, vLLM's guided_json, guided_regex, guided_choice, guided_grammar and
 * structured_outputs, on a random-weight model (it follows the grammar only because of the masks)
 * and on the trained quality model. Every answer that ended by grammar completion must validate
 * (ajv for schemas); one cut by max_tokens must be a prefix the grammar accepts.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import Ajv from "ajv";
import { engineServerForTests } from "./serverKit.ts";

setDefaultTimeout(180_000);

const server = engineServerForTests("tiny-structured");

const ajv = new Ajv({ strict: false });
const messages = [{ role: "user", content: "Describe a person as JSON." }];

const PERSON = {
  type: "object",
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 150 }, tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 3 } },
  required: ["name", "age"],
  additionalProperties: false,
};

describe("structured outputs", () => {
  test("response_format json_schema: every answer that finished validates against the schema; the free twin is not JSON", async () => {
    const validate = ajv.compile(PERSON);
    let finished = 0;
    for (let seed = 0; seed < 12; seed++) {
      const answer = await server.api.post("/v1/chat/completions", {
        messages,
        temperature: 1,
        seed,
        max_tokens: 200,
        response_format: { type: "json_schema", json_schema: { name: "person", schema: PERSON, strict: true } },
      });
      expect(answer.status).toBe(200);
      const choice = answer.body.choices[0];
      if (choice.finish_reason !== "stop") continue;
      finished++;
      const value = JSON.parse(choice.message.content);
      expect(validate(value)).toBe(true);
    }
    expect(finished).toBeGreaterThan(0);
    const free = await server.api.post("/v1/chat/completions", { messages, temperature: 1, seed: 1, max_tokens: 40 });
    expect(() => JSON.parse(free.body.choices[0].message.content)).toThrow();
  });

  test("json_object, guided_json (a string schema), guided_regex, guided_choice and guided_grammar", async () => {
    const json = await server.api.post("/v1/chat/completions", { messages, temperature: 0.7, seed: 3, max_tokens: 200, response_format: { type: "json_object" } });
    if (json.body.choices[0].finish_reason === "stop") expect(() => JSON.parse(json.body.choices[0].message.content)).not.toThrow();
    expect(json.body.choices[0].message.content.trimStart()[0]).toMatch(/[{[\-"0-9tfn]/);

    const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
    const guided = await server.api.post("/v1/completions", { prompt: "x", temperature: 1, seed: 5, max_tokens: 60, guided_json: JSON.stringify(schema) });
    expect(guided.body.choices[0].finish_reason).toBe("stop");
    expect(ajv.compile(schema)(JSON.parse(guided.body.choices[0].text))).toBe(true);

    for (let seed = 0; seed < 4; seed++) {
      const regex = await server.api.post("/v1/completions", { prompt: "Phone:", temperature: 1, seed, max_tokens: 30, guided_regex: "[0-9]{3}-[0-9]{4}" });
      expect(regex.body.choices[0].text).toMatch(/^[0-9]{3}-[0-9]{4}$/);
      expect(regex.body.choices[0].finish_reason).toBe("stop");
      const choice = await server.api.post("/v1/completions", { prompt: "Pick:", temperature: 1, seed, max_tokens: 30, guided_choice: ["red", "green", "blue"] });
      expect(["red", "green", "blue"]).toContain(choice.body.choices[0].text);
      const grammar = await server.api.post("/v1/completions", { prompt: "Sum:", temperature: 1, seed, max_tokens: 30, guided_grammar: 'root ::= num " + " num\nnum ::= [1-9] [0-9]?' });
      expect(grammar.body.choices[0].text).toMatch(/^[1-9][0-9]? \+ [1-9][0-9]?$/);
      const nested = await server.api.post("/v1/completions", { prompt: "Pick:", temperature: 1, seed, max_tokens: 30, structured_outputs: { choice: ["yes", "no"] } });
      expect(["yes", "no"]).toContain(nested.body.choices[0].text);
    }
  });

  test("cut by max_tokens: the text is a prefix of a valid answer (the grammar accepts it so far)", async () => {
    const answer = await server.api.post("/v1/completions", { prompt: "x", temperature: 1, seed: 9, max_tokens: 5, guided_regex: "(ab){20}" });
    expect(answer.body.choices[0].finish_reason).toBe("length");
    expect("ab".repeat(20).startsWith(answer.body.choices[0].text)).toBe(true);
  });

  test("jump-forward: where the grammar allows one continuation, its tokens come without sampling", async () => {
    const forced = "The answer, in full, is: ";
    const answer = await server.api.post("/v1/completions", { prompt: "x", temperature: 1, seed: 2, max_tokens: 60, guided_regex: `${forced.replace(/[,:]/g, (c) => `\\${c}`)}(yes|no)` });
    expect(answer.body.choices[0].text).toMatch(/^The answer, in full, is: (yes|no)$/);
    expect(answer.body.choices[0].finish_reason).toBe("stop");
    // The forced prefix took no sampling steps: fewer decode steps than tokens generated.
    const before = server.engine.stats.decodeSteps;
    const again = await server.api.post("/v1/completions", { prompt: "y", temperature: 1, seed: 3, max_tokens: 60, guided_regex: `${forced.replace(/[,:]/g, (c) => `\\${c}`)}(yes|no)` });
    expect(server.engine.stats.decodeSteps - before).toBeLessThan(again.body.usage.completion_tokens);
  });

  test("streaming, n > 1 and constrained requests batched with free ones", async () => {
    const response = await fetch(server.api.server.url + "/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages, temperature: 1, seed: 4, max_tokens: 80, n: 2, stream: true, guided_choice: ["alpha", "beta", "gamma"] }),
    });
    const text = await response.text();
    const chunks = text.split("\n\n").filter((block) => block.startsWith("data: {")).map((block) => JSON.parse(block.slice(6)));
    for (const index of [0, 1]) {
      const content = chunks.flatMap((c) => c.choices.filter((choice: any) => choice.index === index).map((choice: any) => choice.delta.content ?? "")).join("");
      expect(["alpha", "beta", "gamma"]).toContain(content);
    }
    const mixed = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        server.api.post("/v1/completions", { prompt: `p${i}`, temperature: 1, seed: i, max_tokens: 20, ...(i % 2 === 0 ? { guided_regex: "[a-c]{5}" } : {}) }),
      ),
    );
    mixed.forEach((answer, i) => {
      if (i % 2 === 0) expect(answer.body.choices[0].text).toMatch(/^[a-c]{5}$/);
      else expect(answer.body.usage.completion_tokens).toBe(20);
    });
  });

  test("bad constraints are refused with a 400 naming the field", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ response_format: { type: "xml" } }, "response_format.type"],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: 5 } } }, "response_format.json_schema.schema"],
      [{ guided_json: "{not json" }, "guided_json"],
      [{ guided_choice: [] }, "guided_choice"],
      [{ guided_regex: "(unclosed" }, "guided_regex"],
      [{ guided_grammar: "root ::= missing_rule" }, "guided_grammar"],
      [{ guided_regex: "a", guided_choice: ["b"] }, "guided_choice"],
      [{ structured_outputs: { json: {}, regex: "a" } }, "structured_outputs"],
    ];
    for (const [extra, field] of cases) {
      const answer = await server.api.post("/v1/completions", { prompt: "x", max_tokens: 4, ...extra });
      expect(answer.status).toBe(400);
      expect(answer.body.error.field).toBe(field);
    }
    // Nothing was left behind by the refused requests.
    expect(server.engine.stats.running).toBe(0);
  });
});
