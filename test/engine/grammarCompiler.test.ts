/**
 * JSON-schema grammars as the engine compiles them (GrammarCompiler on the quality model's
 * byte-level vocabulary), without a model: random walks through the grammar's own masks (every
 * allowed token equally likely, as no model would) over seeded random schemas; each walk that ends
 * by grammar completion, and each cut walk once completed by the grammar, must parse and validate
 * with ajv. Then the xgrammar 0.1.27 defects found this way, one case each: special tokens read as
 * text, awkward property names, numeric bounds, alternatives that share a prefix (enums, anyOf over
 * consts, guided_choice).
 */
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { GrammarCompiler } from "../../src/engine/grammarCompiler.ts";
import type { GrammarConstraint } from "../../src/engine/grammarConstraint.ts";
import type { GrammarSpec } from "../../src/engine/grammarSpec.ts";
import { loadModelTokenizer, type ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { allowedTokens, walkSchemas } from "../helpers/grammarWalks.ts";
import { randomSchema, type Schema } from "../helpers/randomSchemas.ts";

// Property checks against a reference (thousands of encodings or masks): seconds on a loaded machine; not timed tests.
setDefaultTimeout(60_000);

const QUALITY_MODEL = join(import.meta.dir, "../../models/quality");

let tokenizer: ModelTokenizer;
let compiler: GrammarCompiler;
let vocab: number;
const constraint = (schema: Schema | Record<string, unknown>) => compiler.constraint({ spec: { kind: "json_schema", schema }, field: "response_format" });

beforeAll(async () => {
  tokenizer = await loadModelTokenizer(QUALITY_MODEL);
  vocab = tokenizer.vocabSize;
  compiler = new GrammarCompiler(tokenizer, vocab, tokenizer.eosTokenIds);
});

/** The tokens the mask allows next. */
const allowed = (c: GrammarConstraint) => allowedTokens(c, vocab);

/** Whether the grammar (a JSON schema's, or another spec's) takes the text's tokens and then ends. */
async function accepts(schema: Record<string, unknown> | GrammarSpec, text: string): Promise<boolean> {
  const c = await compiler.constraint({ spec: "kind" in schema ? (schema as GrammarSpec) : { kind: "json_schema", schema }, field: "response_format" });
  try {
    for (const id of tokenizer.encode(text)) c.accept(id);
    return (await allowed(c)).some((id) => tokenizer.eosTokenIds.includes(id));
  } catch {
    return false;
  } finally {
    c.dispose();
  }
}

describe("JSON-schema grammars", () => {
  test("random walks through 300 random schemas' masks: every answer, completed where cut, validates", async () => {
    const tally = await walkSchemas(compiler, tokenizer, vocab, Array.from({ length: 300 }, (_, index) => randomSchema(3, index)), 2);
    expect(tally.failures).toEqual([]);
    expect(tally.walks).toBe(600);
    expect(tally.finished).toBeGreaterThan(150);
  });

  test("special tokens are never allowed: <s> is not three characters of a string", async () => {
    const c = await constraint({ type: "string", minLength: 3, maxLength: 4 });
    c.accept(tokenizer.encode('"')[0]!);
    const next = await allowed(c);
    c.dispose();
    expect(next).toContain(tokenizer.encode("a")[0]!);
    for (let id = 0; id < vocab; id++) if (tokenizer.isSpecialToken(id)) expect(next).not.toContain(id);
  });

  test("property names with a quote, a backslash or a tab compile and come out as JSON keys", async () => {
    const names = ['q"t', "a\\b", "t\tb"];
    const schema = { type: "object", properties: Object.fromEntries(names.map((name) => [name, { type: "integer", minimum: 0, maximum: 9 }])), required: names, additionalProperties: false };
    expect(await accepts(schema, JSON.stringify({ 'q"t': 1, "a\\b": 2, "t\tb": 3 }))).toBe(true);
    expect(await accepts(schema, '{"q"t": 1, "a\\b": 2, "t\tb": 3}')).toBe(false);
  });

  test("numeric bounds hold: 151 is past a maximum of 150, 1 below a minimum of 3, 2.5 past 2", async () => {
    expect(await accepts({ type: "integer", minimum: 0, maximum: 150 }, "150")).toBe(true);
    expect(await accepts({ type: "integer", minimum: 0, maximum: 150 }, "151")).toBe(false);
    expect(await accepts({ type: "integer", minimum: 3 }, "1")).toBe(false);
    expect(await accepts({ type: "integer", minimum: -4321, maximum: 150 }, "1177")).toBe(false);
    expect(await accepts({ type: "number", minimum: -2, maximum: 2 }, "1.5")).toBe(true);
    expect(await accepts({ type: "number", minimum: -2, maximum: 2 }, "2.5")).toBe(false);
    expect(await accepts({ type: "number", maximum: 3.5 }, "3x5")).toBe(false);
  });

  test("enums, anyOf over consts and choices whose values share a prefix: exactly their values", async () => {
    const values = [10, -10, -100, "ab", "-ab"];
    for (const schema of [{ enum: values }, { anyOf: values.map((value) => ({ const: value })) }, { type: "array", items: { oneOf: [{ enum: [10, -10] }, { const: -100 }, { const: "ab" }, { enum: ["-ab"] }] }, maxItems: 1 }]) {
      const wrap = (text: string) => (schema.type === "array" ? `[${text}]` : text);
      for (const text of ["10", "-10", "-100", '"ab"', '"-ab"']) expect({ schema, text, ok: await accepts(schema, wrap(text)) }).toEqual({ schema, text, ok: true });
      for (const text of ["100", "1000", "-1000", '"abb"']) expect({ schema, text, ok: await accepts(schema, wrap(text)) }).toEqual({ schema, text, ok: false });
    }
    const choice: GrammarSpec = { kind: "choice", choices: ["10", "-10", "-100"] };
    for (const text of ["10", "-10", "-100"]) expect(await accepts(choice, text)).toBe(true);
    for (const text of ["100", "1000"]) expect(await accepts(choice, text)).toBe(false);
  });

  test("type unions: each type's values, bounds on the numeric ones", async () => {
    expect(await accepts({ type: ["integer", "null"] }, "null")).toBe(true);
    expect(await accepts({ type: ["integer", "null"] }, "-12")).toBe(true);
    expect(await accepts({ type: ["number", "null"], minimum: 2 }, "1")).toBe(false);
    expect(await accepts({ type: ["number", "null"], minimum: 2 }, "2.5")).toBe(true);
    expect(await accepts({ type: ["string", "null"], maxLength: 2 }, '"abc"')).toBe(false);
  });
});
