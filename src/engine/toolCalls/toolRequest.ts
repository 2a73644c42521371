/**
 * A chat request's tools: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` checked and
 * resolved against the model — the format its tool calls are written in (the server's
 * --tool-call-parser, or detected from the chat template) and whether its template renders tools
 * at all. Pure; errors name the request field.
 */
import { detectToolCallFormat, type ToolCallFormat } from "./toolCallFormat.ts";
import type { ToolChoice } from "./toolCallGrammar.ts";

export interface ToolFunction {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
}

export interface ToolRequest {
  /** The tools as the chat template's `tools` variable takes them. */
  tools: { type: "function"; function: ToolFunction }[];
  /** null: tool_choice "none" (tools shown, calls not parsed). */
  choice: ToolChoice | null;
  parallel: boolean;
  format: ToolCallFormat;
}

export class ToolRequestError extends Error {
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
    this.name = "ToolRequestError";
  }
}

const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

function toolsOf(value: unknown): ToolRequest["tools"] {
  if (!Array.isArray(value)) throw new ToolRequestError("must be an array of tools", "tools");
  const names = new Set<string>();
  return value.map((tool, index) => {
    const field = `tools[${index}]`;
    if (!isObject(tool) || tool.type !== "function") throw new ToolRequestError('must be {"type": "function", "function": {...}}', `${field}.type`);
    const fn = tool.function;
    if (!isObject(fn)) throw new ToolRequestError("must be an object with a name", `${field}.function`);
    if (typeof fn.name !== "string" || !FUNCTION_NAME.test(fn.name)) throw new ToolRequestError("must be 1 to 64 letters, digits, _ or -", `${field}.function.name`);
    if (names.has(fn.name)) throw new ToolRequestError(`${fn.name} is declared twice`, `${field}.function.name`);
    names.add(fn.name);
    if (fn.description !== undefined && typeof fn.description !== "string") throw new ToolRequestError("must be a string", `${field}.function.description`);
    if (fn.parameters !== undefined && !isObject(fn.parameters)) throw new ToolRequestError("must be a JSON schema object", `${field}.function.parameters`);
    const out: ToolFunction = { name: fn.name };
    if (fn.description !== undefined) out.description = fn.description as string;
    if (fn.parameters !== undefined) out.parameters = fn.parameters as Record<string, unknown>;
    return { type: "function" as const, function: out };
  });
}

function choiceOf(value: unknown, names: readonly string[]): ToolChoice | null {
  if (value === undefined || value === null || value === "auto") return "auto";
  if (value === "none") return null;
  if (value === "required") return "required";
  if (isObject(value) && value.type === "function" && isObject(value.function) && typeof value.function.name === "string") {
    const name = value.function.name;
    if (!names.includes(name)) throw new ToolRequestError(`names ${JSON.stringify(name)}, which is not in tools`, "tool_choice");
    return { name };
  }
  throw new ToolRequestError('must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}', "tool_choice");
}

/**
 * The request's tools (null when it gives none); `parser` is the server's --tool-call-parser
 * (null: detect from the template).
 */
export function toolRequestOf(body: { tools?: unknown; tool_choice?: unknown; parallel_tool_calls?: unknown }, template: string | null, parser: ToolCallFormat | null): ToolRequest | null {
  if (body.tools === undefined || body.tools === null || (Array.isArray(body.tools) && body.tools.length === 0)) {
    if (body.tool_choice !== undefined && body.tool_choice !== null && body.tool_choice !== "none" && body.tool_choice !== "auto") throw new ToolRequestError("needs tools", "tool_choice");
    return null;
  }
  const tools = toolsOf(body.tools);
  const choice = choiceOf(body.tool_choice, tools.map((tool) => tool.function.name));
  if (body.parallel_tool_calls !== undefined && body.parallel_tool_calls !== null && typeof body.parallel_tool_calls !== "boolean") throw new ToolRequestError("must be a boolean", "parallel_tool_calls");
  if (template === null || !/\btools\b/.test(template)) throw new ToolRequestError("this model's chat template does not render tools (it has no `tools` variable), so the model would never see them", "tools");
  const format = parser ?? detectToolCallFormat(template);
  if (format === null) throw new ToolRequestError("the chat template's tool-call format is not one ctxr knows (hermes, llama3_json, mistral); start the server with --tool-call-parser", "tools");
  return { tools, choice, parallel: body.parallel_tool_calls !== false, format };
}
