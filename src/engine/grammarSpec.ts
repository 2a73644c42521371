/**
 * What a request constrains its output to (structured outputs), read from the fields clients
 * send: OpenAI's `response_format` (`text`, `json_object`, `json_schema`), vLLM's `guided_json`,
 * `guided_regex`, `guided_choice`, `guided_grammar` (EBNF) and its newer `structured_outputs`
 * object with the same keys (json, regex, choice, grammar). Pure: validation only; compiling is
 * grammarCompiler.ts's.
 */

export type GrammarSpec =
  | { kind: "json" }
  | { kind: "json_schema"; schema: Record<string, unknown> | boolean }
  | { kind: "regex"; pattern: string }
  | { kind: "choice"; choices: string[] }
  | { kind: "ebnf"; grammar: string }
  /** xgrammar's structural tag (tool calling builds these). */
  | { kind: "structural_tag"; tag: Record<string, unknown> };

/** A constraint field that is malformed or conflicts with another; `field` names it. */
export class GrammarSpecError extends Error {
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
    this.name = "GrammarSpecError";
  }
}

/** The constraint fields of a request body (all optional). */
export interface GrammarFields {
  response_format?: unknown;
  guided_json?: unknown;
  guided_regex?: unknown;
  guided_choice?: unknown;
  guided_grammar?: unknown;
  structured_outputs?: unknown;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

function schemaOf(value: unknown, field: string): Record<string, unknown> | boolean {
  let schema = value;
  if (typeof value === "string") {
    try {
      schema = JSON.parse(value);
    } catch (error) {
      throw new GrammarSpecError(`is a string but not JSON: ${(error as Error).message}`, field);
    }
  }
  if (!isObject(schema) && typeof schema !== "boolean") throw new GrammarSpecError("must be a JSON schema (an object)", field);
  return schema;
}

function nonEmptyString(value: unknown, field: string): string {
  if (typeof value !== "string" || value.length === 0) throw new GrammarSpecError("must be a non-empty string", field);
  return value;
}

function choicesOf(value: unknown, field: string): string[] {
  if (!Array.isArray(value) || value.length === 0 || !value.every((choice) => typeof choice === "string" && choice.length > 0)) {
    throw new GrammarSpecError("must be a non-empty array of non-empty strings", field);
  }
  return value as string[];
}

function responseFormatSpec(format: unknown): GrammarSpec | null {
  if (!isObject(format)) throw new GrammarSpecError('must be an object with a "type"', "response_format");
  switch (format.type) {
    case "text":
      return null;
    case "json_object":
      return { kind: "json" };
    case "json_schema": {
      const wrapper = format.json_schema;
      if (!isObject(wrapper)) throw new GrammarSpecError('must be an object with "name" and "schema"', "response_format.json_schema");
      if (wrapper.schema === undefined) return { kind: "json" };
      return { kind: "json_schema", schema: schemaOf(wrapper.schema, "response_format.json_schema.schema") };
    }
    default:
      throw new GrammarSpecError(`type must be "text", "json_object" or "json_schema", got ${JSON.stringify(format.type)}`, "response_format.type");
  }
}

/** A request's constraint and the field that gave it (errors compiling it name that field). */
export interface RequestedGrammar {
  spec: GrammarSpec;
  field: string;
}

/** The request's constraint, or null for free text; GrammarSpecError when a field is bad or two are given. */
export function grammarSpecOf(body: GrammarFields): RequestedGrammar | null {
  const found: { field: string; spec: GrammarSpec | null }[] = [];
  if (body.response_format != null) found.push({ field: "response_format", spec: responseFormatSpec(body.response_format) });
  if (body.guided_json != null) found.push({ field: "guided_json", spec: { kind: "json_schema", schema: schemaOf(body.guided_json, "guided_json") } });
  if (body.guided_regex != null) found.push({ field: "guided_regex", spec: { kind: "regex", pattern: nonEmptyString(body.guided_regex, "guided_regex") } });
  if (body.guided_choice != null) found.push({ field: "guided_choice", spec: { kind: "choice", choices: choicesOf(body.guided_choice, "guided_choice") } });
  if (body.guided_grammar != null) found.push({ field: "guided_grammar", spec: { kind: "ebnf", grammar: nonEmptyString(body.guided_grammar, "guided_grammar") } });
  if (body.structured_outputs != null) {
    const outputs = body.structured_outputs;
    if (!isObject(outputs)) throw new GrammarSpecError("must be an object with one of json, regex, choice, grammar", "structured_outputs");
    const keys = ["json", "regex", "choice", "grammar"].filter((key) => outputs[key] != null);
    if (keys.length !== 1) throw new GrammarSpecError(`must give exactly one of json, regex, choice, grammar (got ${keys.length === 0 ? "none" : keys.join(", ")})`, "structured_outputs");
    const key = keys[0]!;
    const field = `structured_outputs.${key}`;
    const spec: GrammarSpec =
      key === "json"
        ? { kind: "json_schema", schema: schemaOf(outputs.json, field) }
        : key === "regex"
          ? { kind: "regex", pattern: nonEmptyString(outputs.regex, field) }
          : key === "choice"
            ? { kind: "choice", choices: choicesOf(outputs.choice, field) }
            : { kind: "ebnf", grammar: nonEmptyString(outputs.grammar, field) };
    found.push({ field: "structured_outputs", spec });
  }
  const constraints = found.filter((entry): entry is RequestedGrammar => entry.spec !== null);
  if (constraints.length > 1) throw new GrammarSpecError(`give one output constraint, not ${constraints.map((entry) => entry.field).join(" and ")}`, constraints[1]!.field);
  return constraints[0] ?? null;
}
