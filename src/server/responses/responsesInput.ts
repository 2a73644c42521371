/**
 * A Responses API request as the chat request the engine's chat pipeline serves
 * (openai/chatPreparation.ts): `instructions` first as a system message, then the continued response's
 * conversation (previous_response_id), then `input` — a string (one user message) or items:
 * messages with input_text / output_text parts, function_call items (an assistant message's
 * tool_calls, consecutive calls joined into one), function_call_output items (tool messages) and
 * item_reference items (an item of a stored response). The flat function tools, tool_choice and
 * text.format become chat's nested tools, tool_choice and response_format; max_output_tokens
 * becomes max_tokens. Pure: a problem is a ResponsesInputError naming the Responses field, and
 * chatFieldOrigin maps a field the chat pipeline names back to the Responses field.
 */
import type { ChatCompletionBody } from "../openaiSchemas.ts";
import type { ResponsesBody } from "./responsesSchema.ts";

export class ResponsesInputError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = "ResponsesInputError";
  }
}

/** A chat message as the chat pipeline reads it (and as a stored conversation keeps it). */
export interface ChatMessage {
  role: string;
  content: string;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** A chat request and where each of its messages came from. */
export interface TranslatedRequest {
  chat: ChatCompletionBody;
  /** The conversation without instructions: the previous one and this input (what a continuing response starts from). */
  conversation: ChatMessage[];
  /** By chat message index: the Responses field it came from ("instructions", "input[2]", "previous_response_id"). */
  origins: string[];
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `${typeof value} ${JSON.stringify(value)}`;
}

const TEXT_PART_TYPES = new Set(["input_text", "output_text", "text"]);

/** A message's content (a string or text parts) as text; parts joined with "\n" as chat's are. */
function contentText(content: unknown, role: string, field: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw new ResponsesInputError(field, `must be a string or an array of content parts, got ${describe(content)}`);
  return content
    .map((part, index) => {
      const at = `${field}[${index}]`;
      if (!isObject(part)) throw new ResponsesInputError(at, `must be a content part object, got ${describe(part)}`);
      if (TEXT_PART_TYPES.has(part.type as string)) {
        if (typeof part.text !== "string") throw new ResponsesInputError(`${at}.text`, `must be a string, got ${describe(part.text)}`);
        return part.text;
      }
      if (part.type === "refusal" && role === "assistant" && typeof part.refusal === "string") return part.refusal;
      throw new ResponsesInputError(`${at}.type`, `content part type ${JSON.stringify(part.type)} is not supported (text only: input_text, output_text)`);
    })
    .join("\n");
}

const ROLES = new Set(["user", "system", "developer", "assistant"]);

function nonEmptyString(value: unknown, field: string): string {
  if (typeof value !== "string" || value === "") throw new ResponsesInputError(field, `must be a non-empty string, got ${describe(value)}`);
  return value;
}

/** Appends one input item's messages (a function call may join the assistant message before it). */
function addItem(messages: ChatMessage[], origins: string[], item: Record<string, unknown>, field: string, resolve: (id: string) => Record<string, unknown> | undefined, resolving = false): void {
  const type = item.type ?? (item.role !== undefined ? "message" : undefined);
  switch (type) {
    case "message": {
      const role = item.role;
      if (typeof role !== "string" || !ROLES.has(role)) throw new ResponsesInputError(`${field}.role`, `must be "user", "system", "developer" or "assistant", got ${describe(role)}`);
      messages.push({ role: role === "developer" ? "system" : role, content: contentText(item.content, role, `${field}.content`) });
      origins.push(field);
      return;
    }
    case "function_call": {
      const call = {
        id: nonEmptyString(item.call_id, `${field}.call_id`),
        type: "function" as const,
        function: { name: nonEmptyString(item.name, `${field}.name`), arguments: typeof item.arguments === "string" ? item.arguments : "" },
      };
      if (typeof item.arguments !== "string") throw new ResponsesInputError(`${field}.arguments`, `must be a JSON string, got ${describe(item.arguments)}`);
      const last = messages.at(-1);
      if (last !== undefined && last.role === "assistant" && origins.at(-1) !== "previous_response_id") {
        (last.tool_calls ??= []).push(call);
        return;
      }
      messages.push({ role: "assistant", content: "", tool_calls: [call] });
      origins.push(field);
      return;
    }
    case "function_call_output": {
      const callId = nonEmptyString(item.call_id, `${field}.call_id`);
      messages.push({ role: "tool", tool_call_id: callId, content: contentText(item.output, "tool", `${field}.output`) });
      origins.push(field);
      return;
    }
    // The model's past reasoning (an item of an earlier response, given back) is not shown to it
    // again: thinking models' templates drop it too.
    case "reasoning":
      if (!Array.isArray(item.summary)) throw new ResponsesInputError(`${field}.summary`, `must be an array, got ${describe(item.summary)}`);
      if (item.content !== undefined && item.content !== null && !Array.isArray(item.content)) throw new ResponsesInputError(`${field}.content`, `must be an array, got ${describe(item.content)}`);
      return;
    case "item_reference": {
      const id = nonEmptyString(item.id, `${field}.id`);
      const referenced = resolving ? undefined : resolve(id);
      if (referenced === undefined) throw new ResponsesInputError(`${field}.id`, `no stored item ${JSON.stringify(id)} (it belongs to no stored response, or was forgotten)`);
      addItem(messages, origins, referenced, field, resolve, true);
      return;
    }
    default:
      throw new ResponsesInputError(`${field}.type`, `input item type ${JSON.stringify(type)} is not supported (message, function_call, function_call_output, reasoning, item_reference)`);
  }
}

/** The flat Responses tools as chat's nested ones; built-in tools are refused. */
function chatTools(tools: unknown[]): unknown[] {
  return tools.map((tool, index) => {
    const field = `tools[${index}]`;
    if (!isObject(tool)) throw new ResponsesInputError(field, `must be a tool object, got ${describe(tool)}`);
    if (tool.type !== "function") throw new ResponsesInputError(`${field}.type`, `tool type ${JSON.stringify(tool.type)} is not supported: only "function" tools (built-in tools such as web_search and file_search are not served)`);
    for (const key of Object.keys(tool)) {
      if (!["type", "name", "description", "parameters", "strict"].includes(key)) throw new ResponsesInputError(`${field}.${key}`, "unknown field of a function tool");
    }
    if (tool.strict !== undefined && tool.strict !== null && typeof tool.strict !== "boolean") throw new ResponsesInputError(`${field}.strict`, "must be a boolean");
    // Arguments are always held to the parameters' schema (strict or not).
    return { type: "function", function: { name: tool.name, ...(tool.description != null ? { description: tool.description } : {}), ...(tool.parameters != null ? { parameters: tool.parameters } : {}) } };
  });
}

function chatToolChoice(choice: unknown): unknown {
  if (choice === undefined || choice === null || typeof choice === "string") return choice;
  if (isObject(choice) && choice.type === "function") {
    if (typeof choice.name !== "string") throw new ResponsesInputError("tool_choice.name", "must be a string naming a function tool");
    return { type: "function", function: { name: choice.name } };
  }
  throw new ResponsesInputError("tool_choice", 'must be "none", "auto", "required" or {"type": "function", "name": ...} (built-in tools and allowed_tools are not supported)');
}

/** text.format as chat's response_format (undefined: free text). */
function responseFormat(text: Record<string, unknown> | null | undefined): unknown {
  if (text === undefined || text === null) return undefined;
  for (const key of Object.keys(text)) {
    if (key === "format") continue;
    if (key === "verbosity" && (text.verbosity === null || text.verbosity === undefined)) continue;
    throw new ResponsesInputError(`text.${key}`, key === "verbosity" ? "the served model has no verbosity setting" : "unknown field of text");
  }
  const format = text.format;
  if (format === undefined || format === null) return undefined;
  if (!isObject(format)) throw new ResponsesInputError("text.format", `must be an object with a "type", got ${describe(format)}`);
  switch (format.type) {
    case "text":
      return undefined;
    case "json_object":
      return { type: "json_object" };
    case "json_schema":
      if (format.schema === undefined) throw new ResponsesInputError("text.format.schema", "required");
      return { type: "json_schema", json_schema: { name: format.name ?? "response", schema: format.schema, ...(format.strict != null ? { strict: format.strict } : {}) } };
    default:
      throw new ResponsesInputError("text.format.type", `must be "text", "json_object" or "json_schema", got ${describe(format.type)}`);
  }
}

/**
 * The chat request of a Responses request. `previous`: the continued response's conversation
 * (null: none); `resolve`: a stored item by id (for item_reference).
 */
export function translateResponsesRequest(body: ResponsesBody, previous: readonly ChatMessage[] | null, resolve: (id: string) => Record<string, unknown> | undefined): TranslatedRequest {
  const conversation: ChatMessage[] = previous === null ? [] : [...previous];
  const origins: string[] = conversation.map(() => "previous_response_id");
  if (typeof body.input === "string") {
    conversation.push({ role: "user", content: body.input });
    origins.push("input");
  } else {
    body.input.forEach((item, index) => addItem(conversation, origins, item, `input[${index}]`, resolve));
  }
  const messages = body.instructions != null ? [{ role: "system", content: body.instructions }, ...conversation] : conversation;
  if (body.instructions != null) origins.unshift("instructions");

  const format = responseFormat(body.text as Record<string, unknown> | null | undefined);
  const chat: Record<string, unknown> = {
    model: body.model ?? undefined,
    messages,
    max_tokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    top_k: body.top_k ?? undefined,
    seed: body.seed ?? undefined,
    stop: body.stop ?? undefined,
    repetition_penalty: body.repetition_penalty ?? undefined,
    logit_bias: body.logit_bias ?? undefined,
    ignore_eos: body.ignore_eos ?? undefined,
    skip_special_tokens: body.skip_special_tokens ?? undefined,
    include_stop_str_in_output: body.include_stop_str_in_output ?? undefined,
    cache_salt: body.cache_salt ?? undefined,
    tools: body.tools != null ? chatTools(body.tools) : undefined,
    tool_choice: chatToolChoice(body.tool_choice),
    parallel_tool_calls: body.parallel_tool_calls ?? undefined,
    response_format: format,
    documents: body.documents ?? undefined,
    ctxr: body.ctxr ?? undefined,
  };
  for (const key of Object.keys(chat)) if (chat[key] === undefined) delete chat[key];
  return { chat: chat as ChatCompletionBody, conversation, origins };
}

/** The Responses field of a field the chat pipeline named. */
export function chatFieldOrigin(field: string, origins: readonly string[]): string {
  const message = /^messages\[(\d+)\]/.exec(field);
  if (message !== null) return origins[Number(message[1])] ?? "input";
  if (field === "messages" || field === "prompt") return "input";
  const tool = /^tools\[(\d+)\]\.function(\..*)?$/.exec(field);
  if (tool !== null) return `tools[${tool[1]}]${tool[2] ?? ""}`;
  if (field.startsWith("tool_choice")) return "tool_choice";
  if (field.startsWith("response_format.json_schema")) return `text.format${field.slice("response_format.json_schema".length)}`;
  if (field.startsWith("response_format")) return "text.format";
  if (field === "max_tokens") return "max_output_tokens";
  return field;
}

/** Items (a response's output, say) as the chat messages a continuing response starts from. */
export function itemsAsMessages(items: readonly Record<string, unknown>[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const origins: string[] = [];
  items.forEach((item, index) => addItem(messages, origins, item, `output[${index}]`, () => undefined));
  return messages;
}
