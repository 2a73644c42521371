/**
 * The grammar budget: what a request's constraint may ask of the compiler, checked before anything
 * is compiled (issue 27: a 6 KB `const` compiled for 33 s, 100k choices took 2 GB, 200-deep regex
 * nesting aborted xgrammar). Sizes are checked here; time is the grammar thread's limit
 * (grammarThread.ts). Past a limit, a GrammarSpecError naming the field and the limit. Pure.
 */
import { GrammarSpecError, type GrammarSpec, type RequestedGrammar } from "../grammarSpec.ts";
import { findRefCycle } from "./jsonSchemaRefCycles.ts";

export interface GrammarLimits {
  /** Characters of one literal: a `const`, an `enum` entry, a choice, a property name. */
  maxStringLength: number;
  /** Entries of one `enum`, or choices. */
  maxAlternatives: number;
  /** Bytes of every literal of one constraint together. */
  maxLiteralBytes: number;
  /** Nesting of parentheses in a regex (`guided_regex`, a schema's `pattern`) or an EBNF grammar. */
  maxNesting: number;
  /** Bytes of one schema, regex or grammar (tools: of every function's parameters together). */
  maxSchemaBytes: number;
  /** Functions in `tools` that a call may be constrained to. */
  maxTools: number;
  /** Milliseconds a compile may take (--max-grammar-compile-ms). */
  compileMs: number;
  /** Milliseconds one step's mask may take (--max-grammar-step-ms). */
  stepMs: number;
}

export const DEFAULT_GRAMMAR_LIMITS: GrammarLimits = {
  maxStringLength: 1024,
  maxAlternatives: 4096,
  maxLiteralBytes: 64 * 1024,
  maxNesting: 32,
  maxSchemaBytes: 64 * 1024,
  maxTools: 128,
  compileMs: 5000,
  stepMs: 1000,
};

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

/** The deepest nesting of parentheses in a regex or an EBNF grammar (outside its quoted strings and character classes). */
export function parenthesisDepth(text: string, quoted: boolean): number {
  let depth = 0;
  let deepest = 0;
  let inClass = false;
  let quote: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const char = text[i]!;
    if (char === "\\") {
      i++;
      continue;
    }
    if (quote !== null) {
      if (char === quote) quote = null;
    } else if (inClass) {
      if (char === "]") inClass = false;
    } else if (char === "[") inClass = true;
    else if (quoted && (char === '"' || char === "'")) quote = char;
    else if (char === "(") deepest = Math.max(deepest, ++depth);
    else if (char === ")") depth = Math.max(0, depth - 1);
  }
  return deepest;
}

/** Tallies one constraint's literals against the limits: a literal's own limits name its field, the total names `totalField` (a tool list's total is over every tool). */
class LiteralTally {
  bytes = 0;
  constructor(
    private readonly limits: GrammarLimits,
    private readonly totalField: string,
  ) {}

  add(text: string, what: string, field: string): void {
    if (text.length > this.limits.maxStringLength) {
      throw new GrammarSpecError(`is over the grammar budget: ${what} has ${text.length} characters, more than the limit of ${this.limits.maxStringLength}`, field);
    }
    this.bytes += utf8Bytes(text);
    if (this.bytes > this.limits.maxLiteralBytes) {
      throw new GrammarSpecError(`is over the grammar budget: its literals (consts, enum entries, choices, property names) exceed ${this.limits.maxLiteralBytes} bytes in all`, this.totalField);
    }
  }

  alternatives(count: number, what: string, field: string): void {
    if (count > this.limits.maxAlternatives) throw new GrammarSpecError(`is over the grammar budget: ${what} has ${count} entries, more than the limit of ${this.limits.maxAlternatives}`, field);
  }
}

function checkNesting(text: string, quoted: boolean, what: string, limits: GrammarLimits, field: string): void {
  const depth = parenthesisDepth(text, quoted);
  if (depth > limits.maxNesting) throw new GrammarSpecError(`is over the grammar budget: ${what} nests parentheses ${depth} deep, more than the limit of ${limits.maxNesting}`, field);
}

function checkSize(bytes: number, what: string, limits: GrammarLimits, field: string): void {
  if (bytes > limits.maxSchemaBytes) throw new GrammarSpecError(`is over the grammar budget: ${what} has ${bytes} bytes, more than the limit of ${limits.maxSchemaBytes}`, field);
}

/** Every literal, pattern and `$ref` of a JSON schema, against the limits (iteratively: depth is no risk). */
function checkSchema(schema: unknown, limits: GrammarLimits, field: string, tally: LiteralTally): void {
  const cycle = findRefCycle(schema);
  if (cycle !== null) throw new GrammarSpecError(`has a $ref cycle (${cycle}): a schema that is its own definition has no value that ends`, field);
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const value = stack.pop();
    if (Array.isArray(value)) {
      for (const child of value) stack.push(child);
      continue;
    }
    if (!isObject(value)) continue;
    if (typeof value.const === "string") tally.add(value.const, "a const", field);
    if (Array.isArray(value.enum)) {
      tally.alternatives(value.enum.length, "an enum", field);
      for (const entry of value.enum) tally.add(typeof entry === "string" ? entry : JSON.stringify(entry) ?? "", "an enum entry", field);
    }
    if (typeof value.pattern === "string") checkNesting(value.pattern, false, "a pattern", limits, field);
    for (const keyword of ["properties", "patternProperties"]) {
      const names = value[keyword];
      if (!isObject(names)) continue;
      for (const name of Object.keys(names)) {
        tally.add(name, "a property name", field);
        if (keyword === "patternProperties") checkNesting(name, false, "a pattern property", limits, field);
      }
    }
    for (const child of Object.values(value)) stack.push(child);
  }
}

function checkSpec(spec: GrammarSpec, limits: GrammarLimits, field: string, tally: LiteralTally): void {
  switch (spec.kind) {
    case "json":
      return;
    case "json_schema":
      checkSize(utf8Bytes(JSON.stringify(spec.schema)), "the schema", limits, field);
      return checkSchema(spec.schema, limits, field, tally);
    case "regex":
      checkSize(utf8Bytes(spec.pattern), "the regex", limits, field);
      return checkNesting(spec.pattern, false, "the regex", limits, field);
    case "ebnf":
      checkSize(utf8Bytes(spec.grammar), "the grammar", limits, field);
      return checkNesting(spec.grammar, true, "the grammar", limits, field);
    case "choice":
      tally.alternatives(spec.choices.length, "the choice", field);
      for (const choice of spec.choices) tally.add(choice, "a choice", field);
      return;
    case "structural_tag":
      checkSize(utf8Bytes(JSON.stringify(spec.tag)), "the structural tag", limits, field);
      return;
  }
}

/** GrammarSpecError (naming the request's field and the limit) when the constraint is over the budget. */
export function checkGrammarBudget(requested: RequestedGrammar, limits: GrammarLimits): void {
  checkSpec(requested.spec, limits, requested.field, new LiteralTally(limits, requested.field));
}

/** The same for tool calls: the number of tools, their parameter schemas together, each schema's literals, patterns and refs. */
export function checkToolBudget(tools: readonly { name: string; parameters?: Record<string, unknown> | boolean }[], limits: GrammarLimits): void {
  if (tools.length > limits.maxTools) throw new GrammarSpecError(`is over the grammar budget: ${tools.length} tools, more than the limit of ${limits.maxTools} (--max-grammar-tools)`, "tools");
  let bytes = 0;
  const tally = new LiteralTally(limits, "tools");
  for (const [i, tool] of tools.entries()) {
    const parameters = tool.parameters ?? { type: "object" };
    bytes += utf8Bytes(JSON.stringify(parameters));
    checkSize(bytes, "the tools' parameter schemas together", limits, "tools");
    checkSchema(parameters, limits, `tools[${i}].function.parameters`, tally);
  }
}
