/**
 * The structural tag (xgrammar) that makes a model's tool calls well-formed: each call is its
 * family's opening (with the function's name), arguments that follow the function's parameter
 * schema, and its closing, exactly as the matching parser (toolCallFormat.ts) reads them.
 *
 * - tool_choice "auto": free text, and wherever the model starts a call (the trigger) the call
 *   must be complete and valid;
 * - "required": the answer is one or more calls (one with parallel_tool_calls false);
 * - a named function: the answer is one call of it.
 */
import type { ToolCallFormat } from "./toolCallFormat.ts";

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

const SHAPES: Record<ToolCallFormat, CallShape> = {
  hermes: { begin: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `, end: "}\n</tool_call>", trigger: "<tool_call>", separator: "\n", several: true },
  llama3_json: { begin: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `, end: "}", trigger: '{"name": ', separator: "; ", several: true },
  // Mistral writes several calls as one array; calls are made one at a time here.
  mistral: { begin: (name) => `[TOOL_CALLS][{"name": ${JSON.stringify(name)}, "arguments": `, end: "}]", trigger: "[TOOL_CALLS]", separator: "", several: false },
};

export function toolCallStructuralTag(format: ToolCallFormat, tools: readonly ToolArguments[], choice: ToolChoice, parallel: boolean): Record<string, unknown> {
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
