/**
 * The shape a proxied request must have before the rewriter looks at it: the
 * parts ctxr reads must be what it can read. Everything else (content, the
 * completion prompt, sampling fields) is forwarded as sent and the upstream
 * decides.
 *
 *  - chat: `messages`, when present, is an array of objects, each `role` (when
 *    present) a string;
 *  - completions: `prompt` may be anything (only a string prompt is rewritten);
 *  - responses: `input`, when present, is a string or an array of item objects, each `role`
 *    (when present) a string; `instructions`, when present, a string.
 */

export interface ShapeProblem {
  field: string;
  message: string;
}

function problem(field: string, what: string): ShapeProblem {
  return { field, message: `${field}: ${what}` };
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/** The first problem with a chat request's messages, or null. */
export function chatShapeProblem(body: Record<string, unknown>): ShapeProblem | null {
  if (!("messages" in body)) return null;
  const messages = body.messages;
  if (!Array.isArray(messages)) return problem("messages", `must be an array of message objects, got ${describe(messages)}`);
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    if (message === null || typeof message !== "object" || Array.isArray(message)) return problem(`messages[${i}]`, `must be an object, got ${describe(message)}`);
    const role = (message as { role?: unknown }).role;
    if (role !== undefined && typeof role !== "string") return problem(`messages[${i}].role`, `must be a string, got ${describe(role)}`);
  }
  return null;
}

/** The first problem with a Responses request's input and instructions, or null. */
export function responsesShapeProblem(body: Record<string, unknown>): ShapeProblem | null {
  if ("instructions" in body && body.instructions !== null && typeof body.instructions !== "string") return problem("instructions", `must be a string, got ${describe(body.instructions)}`);
  if (!("input" in body) || typeof body.input === "string") return null;
  const input = body.input;
  if (!Array.isArray(input)) return problem("input", `must be a string or an array of input items, got ${describe(input)}`);
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (item === null || typeof item !== "object" || Array.isArray(item)) return problem(`input[${i}]`, `must be an object, got ${describe(item)}`);
    const role = (item as { role?: unknown }).role;
    if (role !== undefined && typeof role !== "string") return problem(`input[${i}].role`, `must be a string, got ${describe(role)}`);
  }
  return null;
}

/** The first problem with a proxied request's shape, or null (completions: any prompt goes as sent; only a string is rewritten). */
export function requestShapeProblem(kind: "chat" | "completion" | "responses", body: Record<string, unknown>): ShapeProblem | null {
  if (kind === "responses") return responsesShapeProblem(body);
  return kind === "chat" ? chatShapeProblem(body) : null;
}
