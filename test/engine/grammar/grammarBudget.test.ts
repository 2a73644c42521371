import { describe, expect, test } from "bun:test";
import { checkGrammarBudget, checkToolBudget, DEFAULT_GRAMMAR_LIMITS, parenthesisDepth, type GrammarLimits } from "../../../src/engine/grammar/grammarBudget.ts";
import { GrammarSpecError, type GrammarSpec } from "../../../src/engine/grammarSpec.ts";

const LIMITS: GrammarLimits = { ...DEFAULT_GRAMMAR_LIMITS, maxStringLength: 10, maxAlternatives: 3, maxLiteralBytes: 40, maxNesting: 3, maxSchemaBytes: 300, maxTools: 2 };

/** The GrammarSpecError a check raises (fails the test when it raises none or another error). */
function refusal(check: () => void): GrammarSpecError {
  try {
    check();
  } catch (error) {
    expect(error).toBeInstanceOf(GrammarSpecError);
    return error as GrammarSpecError;
  }
  throw new Error("expected a GrammarSpecError");
}

const spec = (value: GrammarSpec, field = "guided_json") => ({ spec: value, field });
const schema = (value: Record<string, unknown>) => spec({ kind: "json_schema", schema: value });

describe("parenthesisDepth", () => {
  test("counts nesting, not the number of groups", () => {
    expect(parenthesisDepth("abc", false)).toBe(0);
    expect(parenthesisDepth("(a)(b)(c)", false)).toBe(1);
    expect(parenthesisDepth("((a)(b(c)))", false)).toBe(3);
  });

  test("escaped parentheses and those in a character class do not count; a stray ) does not go below zero", () => {
    expect(parenthesisDepth("\\(\\(\\(a", false)).toBe(0);
    expect(parenthesisDepth("[(((]", false)).toBe(0);
    expect(parenthesisDepth("[\\]((]", false)).toBe(0);
    expect(parenthesisDepth(")))((a))", false)).toBe(2);
  });

  test("in an EBNF grammar, parentheses inside quoted strings do not count (in a regex, quotes are plain characters)", () => {
    expect(parenthesisDepth('root ::= "(((" ( "a" )', true)).toBe(1);
    expect(parenthesisDepth("root ::= '((' 'b\\'((' ", true)).toBe(0);
    expect(parenthesisDepth('"((("', false)).toBe(3);
  });
});

describe("checkGrammarBudget", () => {
  test("within the budget, at every limit exactly, nothing is raised", () => {
    checkGrammarBudget(spec({ kind: "json" }), LIMITS);
    checkGrammarBudget(schema({ enum: ["aaaaaaaaaa", "b", "c"] }), LIMITS);
    checkGrammarBudget(spec({ kind: "regex", pattern: "(((a)))" }, "guided_regex"), LIMITS);
    checkGrammarBudget(spec({ kind: "choice", choices: ["x", "y", "z"] }, "guided_choice"), LIMITS);
    checkGrammarBudget(spec({ kind: "ebnf", grammar: 'root ::= ((("a")))' }, "guided_grammar"), LIMITS);
  });

  test("a long const, enum entry, choice or property name names the limit and the field", () => {
    for (const [requested, what] of [
      [schema({ const: "a".repeat(11) }), "a const"],
      [schema({ enum: ["ok", "a".repeat(11)] }), "an enum entry"],
      [schema({ type: "object", properties: { ["p".repeat(11)]: {} } }), "a property name"],
      [spec({ kind: "choice", choices: ["a".repeat(11)] }, "guided_choice"), "a choice"],
    ] as const) {
      const error = refusal(() => checkGrammarBudget(requested, LIMITS));
      expect(error.field).toBe(requested.field);
      expect(error.message).toContain(`${what} has 11 characters, more than the limit of 10`);
    }
  });

  test("non-string enum entries count as their JSON text", () => {
    expect(refusal(() => checkGrammarBudget(schema({ enum: [{ key: "value12" }] }), LIMITS)).message).toContain("an enum entry has 17 characters");
  });

  test("too many enum entries or choices", () => {
    expect(refusal(() => checkGrammarBudget(schema({ enum: [1, 2, 3, 4] }), LIMITS)).message).toContain("an enum has 4 entries, more than the limit of 3");
    expect(refusal(() => checkGrammarBudget(spec({ kind: "choice", choices: ["a", "b", "c", "d"] }, "guided_choice"), LIMITS)).message).toContain("the choice has 4 entries");
  });

  test("the literals of one constraint count together, in UTF-8 bytes, wherever they are in the schema", () => {
    // Five 9-character consts deep in the schema: each within the limit, 45 bytes together.
    const items = Array.from({ length: 5 }, (_, i) => ({ const: `${i}`.repeat(9) }));
    expect(refusal(() => checkGrammarBudget(schema({ anyOf: [{ type: "array", items: { anyOf: items } }] }), LIMITS)).message).toContain("exceed 40 bytes in all");
    // Three 5-character strings of 3-byte characters: 15 characters, 45 bytes.
    expect(refusal(() => checkGrammarBudget(spec({ kind: "choice", choices: ["日日日日日", "本本本本本", "語語語語語"] }, "guided_choice"), LIMITS)).message).toContain("40 bytes");
    checkGrammarBudget(spec({ kind: "choice", choices: ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"] }, "guided_choice"), LIMITS);
  });

  test("nesting in a regex, a schema's pattern or patternProperties, or a grammar", () => {
    const deep = "((((a))))";
    expect(refusal(() => checkGrammarBudget(spec({ kind: "regex", pattern: deep }, "guided_regex"), LIMITS)).message).toContain("the regex nests parentheses 4 deep, more than the limit of 3");
    expect(refusal(() => checkGrammarBudget(schema({ type: "string", pattern: deep }), LIMITS)).message).toContain("a pattern nests parentheses 4 deep");
    expect(refusal(() => checkGrammarBudget(schema({ type: "object", patternProperties: { [deep]: {} } }), LIMITS)).message).toContain("a pattern property nests");
    expect(refusal(() => checkGrammarBudget(spec({ kind: "ebnf", grammar: `root ::= ${deep.replace("a", '"a"')}` }, "guided_grammar"), LIMITS)).message).toContain("the grammar nests parentheses 4 deep");
  });

  test("a schema, regex, grammar or structural tag past maxSchemaBytes", () => {
    const big = "x".repeat(301);
    expect(refusal(() => checkGrammarBudget(schema({ description: big }), LIMITS)).message).toMatch(/the schema has \d+ bytes, more than the limit of 300/);
    expect(refusal(() => checkGrammarBudget(spec({ kind: "regex", pattern: big }, "guided_regex"), LIMITS)).message).toContain("the regex has 301 bytes");
    expect(refusal(() => checkGrammarBudget(spec({ kind: "ebnf", grammar: big }, "guided_grammar"), LIMITS)).message).toContain("the grammar has 301 bytes");
    expect(refusal(() => checkGrammarBudget(spec({ kind: "structural_tag", tag: { begin: big } }, "response_format"), LIMITS)).message).toContain("the structural tag has");
  });

  test("a $ref cycle is refused, naming it", () => {
    const error = refusal(() => checkGrammarBudget(schema({ $ref: "#" }), DEFAULT_GRAMMAR_LIMITS));
    expect(error.message).toContain("has a $ref cycle (#)");
    expect(error.field).toBe("guided_json");
  });

  test("a schema 20,000 levels deep is checked without overflowing the stack", () => {
    let deep: Record<string, unknown> = { const: "a".repeat(2000) };
    for (let i = 0; i < 20_000; i++) deep = { type: "array", items: deep };
    const limits = { ...DEFAULT_GRAMMAR_LIMITS, maxSchemaBytes: 10 * 1024 * 1024 };
    expect(refusal(() => checkGrammarBudget(schema(deep), limits)).message).toContain("a const has 2000 characters");
  });
});

describe("checkToolBudget", () => {
  const tool = (name: string, parameters?: Record<string, unknown>) => ({ name, ...(parameters ? { parameters } : {}) });

  test("more tools than maxTools names the flag", () => {
    const error = refusal(() => checkToolBudget([tool("a"), tool("b"), tool("c")], LIMITS));
    expect(error.field).toBe("tools");
    expect(error.message).toContain("3 tools, more than the limit of 2 (--max-grammar-tools)");
    checkToolBudget([tool("a"), tool("b")], LIMITS);
  });

  test("a tool's schema problem names that tool's parameters", () => {
    const error = refusal(() => checkToolBudget([tool("a"), tool("b", { type: "object", properties: { q: { const: "a".repeat(11) } } })], LIMITS));
    expect(error.field).toBe("tools[1].function.parameters");
    expect(refusal(() => checkToolBudget([tool("a", { $ref: "#" })], LIMITS)).field).toBe("tools[0].function.parameters");
  });

  test("the parameter schemas' bytes and literals count over every tool together", () => {
    const half = { type: "object", description: "d".repeat(150) };
    expect(refusal(() => checkToolBudget([tool("a", half), tool("b", half)], LIMITS)).message).toContain("the tools' parameter schemas together");
    const names = (prefix: string) => ({ type: "object", properties: Object.fromEntries(Array.from({ length: 3 }, (_, i) => [`${prefix}${i}`.padEnd(8, "x"), {}])) });
    // 24 bytes of property names each: fine alone, 48 together.
    checkToolBudget([tool("a", names("a"))], LIMITS);
    const total = refusal(() => checkToolBudget([tool("a", names("a")), tool("b", names("b"))], LIMITS));
    expect(total.message).toContain("exceed 40 bytes in all");
    expect(total.field).toBe("tools");
  });
});
