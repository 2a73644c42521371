/**
 * A Responses API request (POST /v1/responses) seen as a chat request, so that the prompt
 * rewriter (promptRewriter.ts) treats its documents as it treats chat's: `instructions` as the
 * system message, a string input as one user message, message items as messages (input_text /
 * output_text parts as text parts), function_call items as assistant turns, function_call_output
 * items as tool messages (a tool result is one document). `restore` puts the rewritten messages
 * back into the Responses request the upstream understands: instructions, message contents and
 * tool outputs rewritten, every other item as sent. Pure.
 */

type Item = Record<string, unknown>;

interface ChatViewMessage {
  role: string;
  content: unknown;
  tool_call_id?: string;
}

/** Where a view message came from: the instructions, the string input, or an input item. */
type Origin = { from: "instructions" } | { from: "input" } | { from: "item"; index: number; kind: "message" | "output" | "kept" };

export interface ResponsesChatView {
  /** The chat request the rewriter reads (the body's other fields, documents and ctxr included, as sent). */
  chat: Record<string, unknown>;
  /** The Responses request with the rewritten messages put back (`rewritten`: the rewriter's body). */
  restore(rewritten: Record<string, unknown>): Record<string, unknown>;
}

const isObject = (value: unknown): value is Item => typeof value === "object" && value !== null && !Array.isArray(value);
const TEXT_TYPES = new Set(["input_text", "output_text", "text"]);

/** Content parts with their text parts as chat's {type: "text"} (others as sent). */
function chatParts(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  return content.map((part) => (isObject(part) && TEXT_TYPES.has(part.type as string) && typeof part.text === "string" ? { type: "text", text: part.text } : part));
}

/** Chat content back as Responses content: text parts typed for the role. */
function responsesParts(content: unknown, role: unknown): unknown {
  if (!Array.isArray(content)) return content;
  const textType = role === "assistant" ? "output_text" : "input_text";
  return content.map((part) => (isObject(part) && part.type === "text" ? { ...part, type: textType } : part));
}

export function responsesChatView(body: Record<string, unknown>): ResponsesChatView {
  const messages: ChatViewMessage[] = [];
  const origins: Origin[] = [];
  if (typeof body.instructions === "string") {
    messages.push({ role: "system", content: body.instructions });
    origins.push({ from: "instructions" });
  }
  const input = body.input;
  if (typeof input === "string") {
    messages.push({ role: "user", content: input });
    origins.push({ from: "input" });
  } else if (Array.isArray(input)) {
    input.forEach((item, index) => {
      if (!isObject(item)) return;
      const type = item.type ?? (item.role !== undefined ? "message" : undefined);
      if (type === "message" && typeof item.role === "string") {
        messages.push({ role: item.role === "developer" ? "system" : item.role, content: chatParts(item.content) });
        origins.push({ from: "item", index, kind: "message" });
      } else if (type === "function_call_output") {
        messages.push({ role: "tool", content: typeof item.output === "string" ? item.output : chatParts(item.output), ...(typeof item.call_id === "string" ? { tool_call_id: item.call_id } : {}) });
        origins.push({ from: "item", index, kind: "output" });
      } else {
        // A call or a reference to earlier output: an assistant turn of the history, forwarded as sent.
        messages.push({ role: "assistant", content: JSON.stringify(item) });
        origins.push({ from: "item", index, kind: "kept" });
      }
    });
  }
  const chat: Record<string, unknown> = { ...body, messages };
  delete chat.input;
  delete chat.instructions;

  const restore = (rewritten: Record<string, unknown>): Record<string, unknown> => {
    const out: Record<string, unknown> = { ...rewritten };
    const forwarded = Array.isArray(rewritten.messages) ? (rewritten.messages as ChatViewMessage[]) : messages;
    delete out.messages;
    if ("instructions" in body) out.instructions = body.instructions;
    if (typeof input !== "string" && !Array.isArray(input)) {
      if ("input" in body) out.input = input;
      return out;
    }
    const items: unknown[] = Array.isArray(input) ? [...input] : [];
    origins.forEach((origin, position) => {
      const content = forwarded[position]?.content;
      if (origin.from === "instructions") out.instructions = content;
      else if (origin.from === "input") out.input = content;
      else if (origin.kind === "message") {
        const item = input![origin.index as never] as Item;
        items[origin.index] = { ...item, content: responsesParts(content, item.role) };
      } else if (origin.kind === "output") {
        const item = input![origin.index as never] as Item;
        items[origin.index] = { ...item, output: responsesParts(content, "tool") };
      }
    });
    if (Array.isArray(input)) out.input = items;
    return out;
  };
  return { chat, restore };
}
