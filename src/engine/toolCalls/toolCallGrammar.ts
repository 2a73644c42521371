/**
 * The structural tag (xgrammar) that makes a model's tool calls well-formed: each call is its
 * family's opening (with the function's name), arguments that follow the function's parameter
 * schema, and its closing, exactly as the matching parser (toolCallFormat.ts) reads them.
 *
 * - tool_choice "auto": free text, and wherever the model starts a call (the trigger) the call
 *   must be complete and valid;
 * - "required": the answer is one or more calls (one with parallel_tool_calls false);
 * - a named function: the answer is one call of it.
 *
 * Harmony (gpt-oss) names the function in a message header, which the model writes while its
 * answer is still free (reasoning/harmonySplitter.ts): the constraint starts at the first body
 * that is not analysis and holds it to the arguments (a named function's, or any function's for
 * "required"); "auto" is not constrained (outputConstraints.ts).
 */
import type { ContentToolCallFormat, ToolCallFormat } from "./toolCallFormat.ts";

export type ToolChoice = "auto" | "required" | { name: string };

export interface ToolArguments {
  name: string;
  /** The EBNF of the function's arguments (a JSON value of its parameter schema). */
  grammar: string;
}

interface CallShape {
  begin(name: string): string;
  end: string;
  trigger: string;
  separator: string;
  /** Whether calls can follow each other in one answer. */
  several: boolean;
}

const SHAPES: Record<ContentToolCallFormat, CallShape> = {
  hermes: { begin: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `, end: "}\n</tool_call>", trigger: "<tool_call>", separator: "\n", several: true },
  llama3_json: { begin: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `, end: "}", trigger: '{"name": ', separator: "; ", several: true },
  // Mistral writes several calls as one array; calls are made one at a time here.
  mistral: { begin: (name) => `[TOOL_CALLS][{"name": ${JSON.stringify(name)}, "arguments": `, end: "}]", trigger: "[TOOL_CALLS]", separator: "", several: false },
};

export function toolCallStructuralTag(format: ToolCallFormat, tools: readonly ToolArguments[], choice: ToolChoice, parallel: boolean): Record<string, unknown> {
  if (format === "harmony") return harmonyArgumentsTag(tools, choice);
  const shape = SHAPES[format];
  const tag = (tool: ToolArguments) => ({ type: "tag", begin: shape.begin(tool.name), content: { type: "grammar", grammar: tool.grammar }, end: shape.end });
  const single = !parallel || !shape.several;
  if (typeof choice === "object") {
    const tool = tools.find((candidate) => candidate.name === choice.name);
    if (tool === undefined) throw new RangeError(`toolCallStructuralTag: no tool named ${choice.name}`);
    return { type: "structural_tag", format: tag(tool) };
  }
  if (choice === "required") {
    return { type: "structural_tag", format: { type: "tags_with_separator", tags: tools.map(tag), separator: shape.separator, at_least_one: true, stop_after_first: single } };
  }
  return { type: "structural_tag", format: { type: "triggered_tags", triggers: [shape.trigger], tags: tools.map(tag), stop_after_first: single } };
}

/** Harmony: the body of the call's message, the arguments of the named function or of any. */
function harmonyArgumentsTag(tools: readonly ToolArguments[], choice: ToolChoice): Record<string, unknown> {
  const body = (tool: ToolArguments) => ({ type: "grammar", grammar: tool.grammar });
  if (typeof choice === "object") {
    const tool = tools.find((candidate) => candidate.name === choice.name);
    if (tool === undefined) throw new RangeError(`toolCallStructuralTag: no tool named ${choice.name}`);
    return { type: "structural_tag", format: body(tool) };
  }
  if (choice === "auto") throw new RangeError("toolCallStructuralTag: harmony's tool_choice auto is not constrained");
  return { type: "structural_tag", format: tools.length === 1 ? body(tools[0]!) : { type: "or", elements: tools.map(body) } };
}
