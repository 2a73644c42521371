/**
 * What the grammar thread compiles (grammarWorker.ts): a request's constraint (grammarSpec.ts) or a
 * tool-call constraint, turned into xgrammar's EBNF or structural tag and compiled against the
 * model's vocabulary. Runs only inside the worker: xgrammar's WebAssembly state lives there.
 */
import type { CompiledGrammar, GrammarCompiler as XGrammarCompiler } from "@mlc-ai/web-xgrammar";
import type { GrammarSpec } from "../grammarSpec.ts";
import { rewriteJsonSchema } from "../jsonSchemaRewrite.ts";
import { literal, regularGrammar } from "../regularGrammar.ts";
import { toolCallStructuralTag, type ToolArguments } from "../toolCalls/toolCallGrammar.ts";
import type { BuildTarget } from "./grammarThreadMessages.ts";

type XGrammar = typeof import("@mlc-ai/web-xgrammar");

/**
 * Whitespace characters allowed between JSON elements: any kind, as vLLM's default, but a bounded
 * run (pretty-printing 6 levels deep at indent 2 needs 13), since a weak model otherwise spends
 * its whole budget on whitespace and never closes the object.
 */
export const MAX_JSON_WHITESPACE = 16;

/** The EBNF of a choice among literal strings (deterministic: xgrammar's flat alternations go wrong, regularGrammar.ts). */
function choiceGrammar(choices: readonly string[]): string {
  return `root ::= ${regularGrammar(choices.map(literal))}`;
}

/**
 * A character of a JSON string: no control characters, quote or backslash (JSON forbids them raw).
 * A negated class: xgrammar 0.1.27 mis-compiles classes with ranges past U+07FF (they admit every
 * token, control characters and specials included). Well-formed UTF-8 is enforced outside the
 * grammar (grammarConstraint.ts).
 */
const JSON_STRING_CHARACTER = String.raw`[^\0-\x1f"\\]`;

/**
 * xgrammar's JSON grammars (0.1.27) let through what makes the text fail to parse, break the
 * schema, or never end: string characters may be raw control characters or malformed UTF-8, and
 * whitespace inside arrays and objects is unbounded whatever the limit asked. Both are rewritten
 * in the EBNF.
 */
export function hardenJsonGrammar(ebnf: string): string {
  return ebnf
    .replaceAll('[^"\\\\\\r\\n]', JSON_STRING_CHARACTER)
    .replaceAll('[^\\0-\\x1f\\"\\\\\\r\\n]', JSON_STRING_CHARACTER)
    .replaceAll("[ \\n\\t]*", `[ \\n\\t]{0,${MAX_JSON_WHITESPACE}}`);
}

/** The hardened EBNF of a JSON schema (what xgrammar's conversion gets wrong is rewritten around it: jsonSchemaRewrite.ts). */
async function jsonGrammar(xg: XGrammar, schema: Record<string, unknown> | boolean, strict: boolean): Promise<string> {
  const rewritten = rewriteJsonSchema(schema);
  const ebnf = await xg.Testings._jsonSchemaToEBNF(JSON.stringify(rewritten.schema), true, undefined, undefined, strict, MAX_JSON_WHITESPACE);
  return rewritten.restore(hardenJsonGrammar(ebnf));
}

async function compileSpec(xg: XGrammar, compiler: XGrammarCompiler, spec: GrammarSpec): Promise<CompiledGrammar> {
  switch (spec.kind) {
    case "json":
      // OpenAI's json_object: a JSON object, any keys.
      return compiler.compileGrammar(await jsonGrammar(xg, { type: "object" }, false));
    case "json_schema":
      // Strict: no properties the schema does not name.
      return compiler.compileGrammar(await jsonGrammar(xg, spec.schema, true));
    case "regex":
      return compiler.compileStructuralTag({ type: "structural_tag", format: { type: "regex", pattern: spec.pattern } });
    case "choice":
      return compiler.compileGrammar(choiceGrammar(spec.choices));
    case "ebnf":
      return compiler.compileGrammar(spec.grammar);
    case "structural_tag":
      return compiler.compileStructuralTag(spec.tag);
  }
}

/** Compiles what a constraint asks for; tool calls: each function's arguments follow its parameter schema, strictly. */
export async function compileTarget(xg: XGrammar, compiler: XGrammarCompiler, target: BuildTarget): Promise<CompiledGrammar> {
  if (target.kind === "spec") return compileSpec(xg, compiler, target.spec);
  const { request } = target;
  const tools: ToolArguments[] = [];
  for (const tool of request.tools) tools.push({ name: tool.name, grammar: await jsonGrammar(xg, tool.parameters ?? { type: "object" }, true) });
  return compiler.compileStructuralTag(toolCallStructuralTag(request.format, tools, request.choice, request.parallel));
}
