/**
 * OpenAI chat `messages` to the {role, content} strings a chat template takes.
 *
 * content may be a string or an array of content parts; text parts ({type: "text",
 * text}) are joined with "\n" (as vLLM does), and an assistant's refusal parts
 * ({type: "refusal", refusal}) count as text. Any other part (image_url,
 * input_audio, file...) is a ChatMessagesError naming the message and part. An
 * assistant message may have null or no content (one that only calls tools): it
 * becomes "". The "developer" role (OpenAI's newer name for system) becomes
 * "system", which chat templates know; any role other than OpenAI's (system,
 * developer, user, assistant, tool) is an error naming it, as OpenAI answers, not
 * left to a chat template that might skip it. An assistant's `tool_calls` are kept with
 * their arguments parsed from JSON (chat templates render them as objects, as vLLM
 * passes them), and a tool message's `tool_call_id`, and `name`; an assistant's
 * `refusal` is its text when it has no content; an assistant's `reasoning_content` (vLLM's name for
 * the reasoning an earlier answer gave apart) is kept for the templates that render it (Qwen3's
 * reads reasoning_content, gpt-oss's the same text as `thinking`). Any other field (audio,
 * function_call...) is an error naming it, not ignored. Written without zod so the
 * engine can use it on any parsed JSON.
 */
import type { ChatTemplateMessage } from "../model/modelTokenizer.ts";

export class ChatMessagesError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChatMessagesError";
  }
}

export const TEXT_PART_SEPARATOR = "\n";

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `${typeof value} ${JSON.stringify(value)}`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function partText(part: unknown, where: string, role: string): string {
  if (!isObject(part)) throw new ChatMessagesError(`${where} must be a content part object, got ${describe(part)}`);
  const type = part.type;
  if (type === "text") {
    if (typeof part.text !== "string") throw new ChatMessagesError(`${where}.text must be a string, got ${describe(part.text)}`);
    return part.text;
  }
  if (type === "refusal" && role === "assistant") {
    if (typeof part.refusal !== "string") throw new ChatMessagesError(`${where}.refusal must be a string, got ${describe(part.refusal)}`);
    return part.refusal;
  }
  if (typeof type !== "string") throw new ChatMessagesError(`${where}.type must be a string, got ${describe(type)}`);
  throw new ChatMessagesError(`${where}: content part type ${JSON.stringify(type)} is not supported (only text parts are)`);
}

/** The text of one message's content. */
export function messageContentText(content: unknown, role: string, where = "content"): string {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) {
    if (role === "assistant") return "";
    throw new ChatMessagesError(`${where} is missing; a ${role} message needs text`);
  }
  if (Array.isArray(content)) {
    return content.map((part, index) => partText(part, `${where}[${index}]`, role)).join(TEXT_PART_SEPARATOR);
  }
  throw new ChatMessagesError(`${where} must be a string or an array of content parts, got ${describe(content)}`);
}

/** The request field a ChatMessagesError is about ("messages[2].content[0].type: ..." → "messages[2].content[0].type"), and its message without it. */
export function chatMessagesErrorField(error: ChatMessagesError): { field: string; message: string } {
  const field = /^(messages(\[\d+\])?(\.[A-Za-z_]+|\[\d+\])*)/.exec(error.message)?.[1] ?? "messages";
  return { field, message: error.message.replace(/^[^\s:]+:?\s*/, "") };
}

/** OpenAI's chat roles ("function", deprecated, is not served). */
export const CHAT_ROLES: ReadonlySet<string> = new Set(["system", "developer", "user", "assistant", "tool"]);

/** The message fields read here; any other is refused, not ignored. */
const MESSAGE_FIELDS = new Set(["role", "content", "name", "tool_calls", "tool_call_id", "refusal", "reasoning_content"]);

/** Why some known OpenAI message fields are refused. */
const UNSUPPORTED_MESSAGE_FIELDS: Record<string, string> = {
  audio: "audio is not supported (text only)",
  function_call: "deprecated by OpenAI; give tool_calls",
};

/** normalizeChatMessages for a request handler: a ChatMessagesError becomes `toError(field, message)`. */
export function requestChatMessages(messages: unknown, toError: (field: string, message: string) => Error): ChatTemplateMessage[] {
  try {
    return normalizeChatMessages(messages);
  } catch (error) {
    if (!(error instanceof ChatMessagesError)) throw error;
    const { field, message } = chatMessagesErrorField(error);
    throw toError(field, message);
  }
}

/** Normalizes a request's messages; throws ChatMessagesError naming the offending field. */
export function normalizeChatMessages(messages: unknown): ChatTemplateMessage[] {
  if (!Array.isArray(messages)) throw new ChatMessagesError(`messages must be an array, got ${describe(messages)}`);
  if (messages.length === 0) throw new ChatMessagesError("messages must not be empty");
  return messages.map((message, index) => {
    const where = `messages[${index}]`;
    if (!isObject(message)) throw new ChatMessagesError(`${where} must be an object, got ${describe(message)}`);
    const role = message.role;
    if (typeof role !== "string" || role.length === 0) throw new ChatMessagesError(`${where}.role must be a non-empty string, got ${describe(role)}`);
    if (!CHAT_ROLES.has(role)) throw new ChatMessagesError(`${where}.role: unknown role ${JSON.stringify(role)}; use one of ${[...CHAT_ROLES].join(", ")}`);
    for (const key of Object.keys(message)) {
      if (!MESSAGE_FIELDS.has(key)) throw new ChatMessagesError(`${where}.${key}: ${UNSUPPORTED_MESSAGE_FIELDS[key] ?? "is not a chat message field this server knows"}`);
    }
    // An assistant's refusal (OpenAI's own field) is its text when it has no content.
    const refusal = role === "assistant" && (message.content === null || message.content === undefined) && typeof message.refusal === "string" ? message.refusal : undefined;
    const content = refusal ?? messageContentText(message.content, role, `${where}.content`);
    const normalized: ChatTemplateMessage = { role: role === "developer" ? "system" : role, content };
    if (message.tool_calls !== undefined && message.tool_calls !== null) normalized.tool_calls = toolCalls(message.tool_calls, `${where}.tool_calls`);
    if (typeof message.tool_call_id === "string") normalized.tool_call_id = message.tool_call_id;
    else if (message.tool_call_id !== undefined && message.tool_call_id !== null) throw new ChatMessagesError(`${where}.tool_call_id must be a string, got ${describe(message.tool_call_id)}`);
    if (typeof message.name === "string") normalized.name = message.name;
    const reasoning = message.reasoning_content;
    if (reasoning !== undefined && reasoning !== null) {
      if (role !== "assistant") throw new ChatMessagesError(`${where}.reasoning_content: only an assistant message has reasoning`);
      if (typeof reasoning !== "string") throw new ChatMessagesError(`${where}.reasoning_content must be a string, got ${describe(reasoning)}`);
      normalized.reasoning_content = reasoning;
    }
    return normalized;
  });
}

function toolCalls(value: unknown, where: string): NonNullable<ChatTemplateMessage["tool_calls"]> {
  if (!Array.isArray(value)) throw new ChatMessagesError(`${where} must be an array, got ${describe(value)}`);
  return value.map((call, index) => {
    const at = `${where}[${index}]`;
    if (!isObject(call)) throw new ChatMessagesError(`${at} must be an object, got ${describe(call)}`);
    if (call.type !== undefined && call.type !== "function") throw new ChatMessagesError(`${at}.type must be "function", got ${describe(call.type)}`);
    const fn = call.function;
    if (!isObject(fn) || typeof fn.name !== "string" || fn.name === "") throw new ChatMessagesError(`${at}.function must be an object with a name`);
    let args: unknown = fn.arguments ?? {};
    if (typeof args === "string") {
      try {
        args = JSON.parse(args === "" ? "{}" : args);
      } catch {
        throw new ChatMessagesError(`${at}.function.arguments must be a JSON string, got ${JSON.stringify(fn.arguments).slice(0, 80)}`);
      }
    }
    return { ...(typeof call.id === "string" ? { id: call.id } : {}), type: "function" as const, function: { name: fn.name, arguments: args } };
  });
}
