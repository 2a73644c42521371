/**
 * Finds the first token of a streamed answer as it goes by: the first event whose choices carry
 * generated text (chat `delta.content`, `reasoning_content` or `tool_calls`; completion `text`)
 * or a finish reason (an answer with no text). Engines may send a role-only chunk before their
 * prefill (ctxr does), so the first bytes are not the first token.
 */
const MAX_WATCHED_CHARS = 1024 * 1024;

export class FirstTokenWatch {
  private readonly decoder = new TextDecoder();
  private pending = "";
  private found = false;

  /** Whether the first token is in `bytes` (true once, false before and after). */
  push(bytes: Uint8Array): boolean {
    if (this.found) return false;
    this.pending += this.decoder.decode(bytes, { stream: true });
    const end = this.pending.lastIndexOf("\n");
    if (end < 0) {
      // A line this long carries no first token worth finding; it is not kept.
      if (this.pending.length > MAX_WATCHED_CHARS) this.pending = "";
      return false;
    }
    const lines = this.pending.slice(0, end).split("\n");
    this.pending = this.pending.slice(end + 1);
    for (const line of lines) {
      if (line.startsWith("data:") && carriesToken(line.slice(5))) {
        this.found = true;
        this.pending = "";
        return true;
      }
    }
    return false;
  }
}

function carriesToken(payload: string): boolean {
  let event: unknown;
  try {
    event = JSON.parse(payload);
  } catch {
    return false;
  }
  const choices = (event as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices)) return false;
  return choices.some((choice: { delta?: Record<string, unknown> | null; text?: unknown; finish_reason?: unknown } | null) => {
    if (choice === null || typeof choice !== "object") return false;
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) return true;
    if (typeof choice.text === "string" && choice.text !== "") return true;
    const delta = choice.delta;
    if (delta === null || typeof delta !== "object") return false;
    const text = (value: unknown) => typeof value === "string" && value !== "";
    return text(delta.content) || text(delta.reasoning_content) || (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0);
  });
}
