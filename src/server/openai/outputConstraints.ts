/**
 * The constraints a request puts on its output, one per choice: structured output (a JSON schema,
 * a regex, a grammar...) or the tool calls the model may make. A spec that does not compile is a
 * 400 naming its field, and no constraint is left undisposed.
 */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import type { GrammarConstraint } from "../../engine/grammarConstraint.ts";
import { GrammarSpecError, grammarSpecOf, type GrammarFields, type RequestedGrammar } from "../../engine/grammarSpec.ts";
import type { ToolCallFormat } from "../../engine/toolCalls/toolCallFormat.ts";
import type { ToolRequest } from "../../engine/toolCalls/toolRequest.ts";
import { InvalidRequest } from "./invalidRequest.ts";

/** Formats whose markers are special tokens: the text must keep them for the parser to see them. */
export const SPECIAL_MARKERS = new Set<ToolCallFormat>(["mistral", "llama3_json"]);

/** A GrammarSpecError as the 400 naming its field; anything else as it is. */
export function asInvalidRequest(error: unknown): unknown {
  return error instanceof GrammarSpecError ? new InvalidRequest(error.field, error.message) : error;
}

/** The body's output constraint (null: free text), a malformed one as a 400. */
export function requestedOutput(body: GrammarFields): RequestedGrammar | null {
  try {
    return grammarSpecOf(body);
  } catch (error) {
    throw asInvalidRequest(error);
  }
}

/** `count` constraints from `make`; on failure (a 400 for a grammar that does not compile) none is left undisposed. */
export async function makeConstraints(count: number, make: () => Promise<GrammarConstraint>): Promise<GrammarConstraint[]> {
  const made: GrammarConstraint[] = [];
  try {
    for (let i = 0; i < count; i++) made.push(await make());
    return made;
  } catch (error) {
    for (const constraint of made) constraint.dispose();
    throw asInvalidRequest(error);
  }
}

/**
 * One tool-call constraint per choice; a response format next to tools that may be called is
 * refused. Harmony's tool_choice "auto" has none: whether a message is a call is its header's say,
 * written before any constraint could start (toolCallGrammar.ts).
 */
export async function toolConstraintsFor(engine: GenerationEngine, body: GrammarFields, tools: ToolRequest, count: number): Promise<GrammarConstraint[]> {
  const output = requestedOutput(body);
  if (output !== null) throw new InvalidRequest(output.field, 'an output format cannot be combined with tools the model may call; use tool_choice "none", or leave one out');
  if (tools.format === "harmony" && tools.choice === "auto") return [];
  const request = { format: tools.format, tools: tools.tools.map((tool) => tool.function), choice: tools.choice!, parallel: tools.parallel };
  return makeConstraints(count, () => engine.grammar.toolCallConstraint(request, "tool_choice"));
}

/** One grammar constraint per choice when the body asks for structured output (none otherwise). */
export async function constraintsFor(engine: GenerationEngine, body: GrammarFields, count: number): Promise<GrammarConstraint[]> {
  const requested = requestedOutput(body);
  return requested === null ? [] : makeConstraints(count, () => engine.grammar.constraint(requested));
}

