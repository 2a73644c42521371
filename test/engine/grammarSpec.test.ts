import { describe, expect, test } from "bun:test";
import { GrammarSpecError, grammarSpecOf, type GrammarFields } from "../../src/engine/grammarSpec.ts";

const fieldOf = (body: GrammarFields): string | null => {
  try {
    grammarSpecOf(body);
    return null;
  } catch (error) {
    return (error as GrammarSpecError).field;
  }
};

describe("grammarSpecOf", () => {
  test("each field becomes its constraint, named by the field that gave it", () => {
    const schema = { type: "object" };
    expect(grammarSpecOf({})).toBeNull();
    expect(grammarSpecOf({ response_format: { type: "text" } })).toBeNull();
    expect(grammarSpecOf({ response_format: { type: "json_object" } })).toEqual({ spec: { kind: "json" }, field: "response_format" });
    expect(grammarSpecOf({ response_format: { type: "json_schema", json_schema: { name: "x", schema, strict: true } } })).toEqual({ spec: { kind: "json_schema", schema }, field: "response_format" });
    expect(grammarSpecOf({ guided_json: JSON.stringify(schema) })).toEqual({ spec: { kind: "json_schema", schema }, field: "guided_json" });
    expect(grammarSpecOf({ guided_regex: "a+" })).toEqual({ spec: { kind: "regex", pattern: "a+" }, field: "guided_regex" });
    expect(grammarSpecOf({ guided_choice: ["a", "b"] })).toEqual({ spec: { kind: "choice", choices: ["a", "b"] }, field: "guided_choice" });
    expect(grammarSpecOf({ guided_grammar: "root ::= \"a\"" })).toEqual({ spec: { kind: "ebnf", grammar: "root ::= \"a\"" }, field: "guided_grammar" });
    expect(grammarSpecOf({ structured_outputs: { regex: "b" } })).toEqual({ spec: { kind: "regex", pattern: "b" }, field: "structured_outputs" });
    // response_format text next to a guided field is no conflict.
    expect(grammarSpecOf({ response_format: { type: "text" }, guided_regex: "c" })?.field).toBe("guided_regex");
  });

  test("malformed or conflicting fields are errors naming the field", () => {
    expect(fieldOf({ response_format: "json" })).toBe("response_format");
    expect(fieldOf({ response_format: { type: "yaml" } })).toBe("response_format.type");
    expect(fieldOf({ response_format: { type: "json_schema" } })).toBe("response_format.json_schema");
    expect(fieldOf({ guided_json: "{" })).toBe("guided_json");
    expect(fieldOf({ guided_json: 3 })).toBe("guided_json");
    expect(fieldOf({ guided_regex: "" })).toBe("guided_regex");
    expect(fieldOf({ guided_choice: ["a", 1] })).toBe("guided_choice");
    expect(fieldOf({ guided_grammar: 5 })).toBe("guided_grammar");
    expect(fieldOf({ structured_outputs: {} })).toBe("structured_outputs");
    expect(fieldOf({ structured_outputs: { choice: [] } })).toBe("structured_outputs.choice");
    expect(fieldOf({ response_format: { type: "json_object" }, guided_regex: "a" })).toBe("guided_regex");
  });
});
