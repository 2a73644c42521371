/**
 * What xgrammar 0.1.27's JSON-schema-to-EBNF conversion gets wrong, taken out of the schema before
 * it and put back into its EBNF after:
 *   - property names are written into the grammar unescaped: a name with a quote aborts the
 *     compile; one with a backslash or a control character yields keys that are not JSON;
 *   - numeric bounds admit numbers out of range (numberRangeGrammar.ts);
 *   - enums, and anyOf over consts, are flat alternations, which its automata get wrong
 *     (regularGrammar.ts): an enum of 10, -10 and -100 accepts 1000.
 * Each such name is replaced by a placeholder string, and each schema whose values form a regular
 * language (enums, consts, bounded numbers, whole integers, booleans, null, and unions of these) by
 * a const placeholder, which xgrammar writes as a plain literal; that literal then gives way to
 * the right EBNF. Pure.
 */
import { numberRangeSequences, type NumberBounds } from "./numberRangeGrammar.ts";
import { literal, regularGrammar, type Atom } from "./regularGrammar.ts";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

export interface RewrittenSchema {
  /** The schema for xgrammar's conversion. */
  schema: unknown;
  /** xgrammar's EBNF for `schema`, with the placeholders replaced. */
  restore(ebnf: string): string;
}

const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;
/** Keywords whose value is a schema, an object of schemas, or an array of schemas. */
const SCHEMA = ["items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contains", "not", "if", "then", "else", "additionalItems"];
const SCHEMA_MAPS = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];
const SCHEMA_LISTS = ["prefixItems", "anyOf", "oneOf", "allOf", "items"];

const isObject = (value: unknown): value is JsonObject => typeof value === "object" && value !== null && !Array.isArray(value);

/** Whether a value is of a JSON schema type (for an enum with a type). */
function hasType(value: Json, type: Json): boolean {
  if (value === null) return type === "null";
  if (Array.isArray(value)) return type === "array";
  if (typeof value === "number") return type === "number" || (type === "integer" && Number.isInteger(value));
  return type === (typeof value === "object" ? "object" : typeof value);
}

/** A string as an EBNF literal. */
const ebnfLiteral = (text: string) => `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

/** Property names xgrammar writes wrongly (a quote, a backslash, a control character). */
const AWKWARD_NAME = /["\\\u0000-\u001f\u007f]/;

/** Keywords beside anyOf/oneOf that leave a union's language as the union of its branches'. */
const ANNOTATIONS = new Set(["anyOf", "oneOf", "title", "description", "default", "examples", "$comment"]);

/**
 * The JSON texts a schema allows, as sequences for regularGrammar, where they form a regular
 * language written here: an enum or const (values of its type), a bounded number, an integer, a
 * boolean, null, a union of types among these, an anyOf or oneOf of such schemas. Else null.
 */
function regularLanguage(node: Json): Atom[][] | null {
  if (!isObject(node)) return null;
  const types = Array.isArray(node.type) ? node.type : [node.type];
  if (Array.isArray(node.enum) || node.const !== undefined) {
    const values = (Array.isArray(node.enum) ? node.enum : [node.const!]).filter((value) => node.type === undefined || types.some((type) => hasType(value, type)));
    if (values.length === 0) throw new Error("no value of its enum or const has its type");
    return values.map((value) => literal(JSON.stringify(value)));
  }
  const branches = Array.isArray(node.anyOf) ? node.anyOf : Array.isArray(node.oneOf) ? node.oneOf : null;
  if (branches !== null) {
    if (!Object.keys(node).every((key) => ANNOTATIONS.has(key))) return null;
    const languages = branches.map(regularLanguage);
    return languages.every((language) => language !== null) ? languages.flat() : null;
  }
  const bounds: NumberBounds = {};
  for (const key of BOUNDS) if (typeof node[key] === "number") bounds[key] = node[key];
  const bounded = Object.keys(bounds).length > 0;
  const languages = types.map((type): Atom[][] | null => {
    if (type === "boolean") return [literal("true"), literal("false")];
    if (type === "null") return [literal("null")];
    // Unbounded numbers stay xgrammar's (exponents and all); integers are the same either way.
    if (type === "integer" || (type === "number" && bounded)) return numberRangeSequences(type, bounds);
    return null;
  });
  return languages.every((language) => language !== null) ? languages.flat() : null;
}

export function rewriteJsonSchema(schema: Record<string, unknown> | boolean): RewrittenSchema {
  const text = JSON.stringify(schema);
  let nonce = 0;
  while (text.includes(`ctxr${nonce}x`)) nonce++;
  const substitutes = new Map<string, string>();
  const placeholder = (ebnf: string) => {
    const name = `ctxr${nonce}x${substitutes.size}`;
    // xgrammar writes a const or a property name as the literal of its JSON text.
    substitutes.set(ebnfLiteral(`"${name}"`), ebnf);
    return name;
  };

  const rewrite = (node: Json): Json => {
    if (!isObject(node)) return node;
    const out: JsonObject = { ...node };
    const types = Array.isArray(node.type) ? node.type : [node.type];
    const bounded = BOUNDS.some((key) => typeof node[key] === "number");
    const union = Array.isArray(node.anyOf) || Array.isArray(node.oneOf) || types.length > 1;
    if (node.enum !== undefined || node.const !== undefined || bounded || union) {
      const language = regularLanguage(node);
      if (language !== null) return { const: placeholder(regularGrammar(language)) };
    }
    if (bounded && types.length > 1 && types.some((type) => type === "integer" || type === "number")) {
      // A union of types with bounds: one branch each, so the numeric ones can be rewritten on their own.
      const { type: _, ...rest } = out;
      return rewrite({ anyOf: types.map((type) => ({ ...rest, type })) });
    }
    for (const key of SCHEMA) if (isObject(node[key]) || typeof node[key] === "boolean") out[key] = rewrite(node[key]);
    for (const key of SCHEMA_LISTS) if (Array.isArray(node[key])) out[key] = node[key].map(rewrite);
    for (const key of SCHEMA_MAPS) {
      const map = node[key];
      if (!isObject(map)) continue;
      const renamed: Record<string, string> = {};
      out[key] = Object.fromEntries(
        Object.entries(map).map(([name, value]) => {
          if (key === "properties" && AWKWARD_NAME.test(name)) name = renamed[name] = placeholder(ebnfLiteral(JSON.stringify(name)));
          return [name, rewrite(value)];
        }),
      );
      if (key === "properties" && Array.isArray(node.required)) out.required = node.required.map((name) => (typeof name === "string" && renamed[name] !== undefined ? renamed[name] : name));
    }
    return out;
  };

  return {
    schema: rewrite(schema as Json),
    restore(ebnf: string): string {
      let out = ebnf;
      // A placeholder may be missing (a property xgrammar leaves out), never left in another form.
      for (const [quoted, replacement] of substitutes) out = out.replaceAll(quoted, replacement);
      if (out.includes(`ctxr${nonce}x`)) throw new Error("a placeholder of the JSON schema's rewrite is left in its grammar");
      return out;
    },
  };
}
