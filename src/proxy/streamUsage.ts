/**
 * Usage of streamed answers the client did not ask usage for. OpenAI-compatible engines (vLLM,
 * SGLang, llama.cpp's server, ctxr) report a streamed answer's token usage only with
 * `stream_options.include_usage`, and many clients never send it. The proxy asks for it itself
 * (`withUsageRequested`), reads the usage as it goes by, and hands the client the stream it would
 * have had without the option (`HiddenUsageFilter`): the usage-only chunk (empty `choices`)
 * dropped, and a `usage` member removed from the other chunks, every other byte as sent.
 */

/** The body with `stream_options.include_usage: true`, or null when it needs none (not streamed, or the client asked). */
export function withUsageRequested(body: Record<string, unknown>): Record<string, unknown> | null {
  if (body.stream !== true) return null;
  const options = body.stream_options;
  if (options !== null && typeof options === "object" && !Array.isArray(options) && (options as Record<string, unknown>).include_usage === true) return null;
  const kept = options !== null && typeof options === "object" && !Array.isArray(options) ? options : {};
  return { ...body, stream_options: { ...kept, include_usage: true } };
}

/**
 * Whether an error answer (status, body text) refuses the stream_options the proxy added: a hosted
 * API may reject fields it does not know ("Unrecognized request argument supplied: stream_options",
 * "extra inputs are not permitted" at stream_options).
 */
export function refusesStreamOptions(status: number, text: string): boolean {
  return (status === 400 || status === 422) && /stream_options|include_usage/.test(text);
}

/** The end of the JSON value that starts at `start` (a string, an object, an array, or a literal). */
function valueEnd(text: string, start: number): number {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      i++;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      if (depth === 0) return i + 1;
    } else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (depth === 0) return i;
      depth--;
      if (depth === 0) return i + 1;
    } else if (depth === 0 && (c === "," || c === " " || c === "\t" || c === "\r" || c === "\n")) return i;
  }
  return text.length;
}

const skipSpace = (text: string, i: number) => {
  while (i < text.length && (text[i] === " " || text[i] === "\t" || text[i] === "\r" || text[i] === "\n")) i++;
  return i;
};

/**
 * `json` (one JSON object's text) without its top-level member `key`, every other character as it
 * was; `json` itself when it has no such member.
 */
export function withoutTopLevelMember(json: string, key: string): string {
  let i = skipSpace(json, 0);
  if (json[i] !== "{") return json;
  i++;
  // The start of the current member's text, with the comma before it (or after it for the first).
  let previousEnd = i;
  let first = true;
  for (;;) {
    i = skipSpace(json, i);
    if (json[i] !== '"') return json;
    const keyEnd = valueEnd(json, i);
    const name = JSON.parse(json.slice(i, keyEnd)) as string;
    i = skipSpace(json, keyEnd);
    if (json[i] !== ":") return json;
    const end = valueEnd(json, skipSpace(json, i + 1));
    const after = skipSpace(json, end);
    if (name === key) {
      // The first member leaves with the comma after it; any other with the comma before it.
      if (first) return json.slice(0, previousEnd) + (json[after] === "," ? json.slice(skipSpace(json, after + 1)) : json.slice(after));
      return json.slice(0, previousEnd) + json.slice(end);
    }
    if (json[after] !== ",") return json;
    previousEnd = end;
    first = false;
    i = after + 1;
  }
}

/** An SSE data line's event, changed as the client would have had it without include_usage: null drops it. */
export function hiddenUsageLine(line: string): string | null {
  if (!line.startsWith("data:") || !line.includes('"usage"')) return line;
  const payload = line.slice(5);
  let event: unknown;
  try {
    event = JSON.parse(payload);
  } catch {
    return line;
  }
  if (event === null || typeof event !== "object" || Array.isArray(event) || !("usage" in event)) return line;
  const choices = (event as { choices?: unknown }).choices;
  if (Array.isArray(choices) && choices.length === 0) return null;
  return `data:${withoutTopLevelMember(payload, "usage")}`;
}

/** The longest line held back to see whether it carries usage. */
export const MAX_HELD_CHARS = 1024 * 1024;

/**
 * A streamed answer's text, piece by piece, with the usage the proxy asked for taken out (see
 * hiddenUsageLine); a dropped event's blank line goes with it. Lines are handed on once complete.
 */
export class HiddenUsageFilter {
  private pending = "";
  private droppedEvent = false;
  /** A line longer than MAX_HELD_CHARS is passed on as it comes, unchanged, up to its end. */
  private passingLine = false;

  push(text: string): string {
    let out = "";
    if (this.passingLine) {
      const newline = text.indexOf("\n");
      if (newline < 0) return text;
      this.passingLine = false;
      out = text.slice(0, newline + 1);
      text = text.slice(newline + 1);
    }
    this.pending += text;
    const end = this.pending.lastIndexOf("\n");
    if (end >= 0) {
      out += this.lines(this.pending.slice(0, end + 1));
      this.pending = this.pending.slice(end + 1);
    }
    // Never held without bound: no usage chunk is this long.
    if (this.pending.length > MAX_HELD_CHARS) {
      out += this.pending;
      this.pending = "";
      this.passingLine = true;
      this.droppedEvent = false;
    }
    return out;
  }

  /** What is left at the end of the stream. */
  flush(): string {
    const rest = this.pending;
    this.pending = "";
    return rest === "" ? "" : this.lines(rest);
  }

  private lines(text: string): string {
    let out = "";
    let start = 0;
    while (start < text.length) {
      const newline = text.indexOf("\n", start);
      const end = newline < 0 ? text.length : newline + 1;
      const line = text.slice(start, end);
      start = end;
      const body = line.replace(/\r?\n$/, "");
      if (body === "") {
        if (this.droppedEvent) continue;
        out += line;
        continue;
      }
      this.droppedEvent = false;
      const kept = hiddenUsageLine(body);
      if (kept === null) {
        this.droppedEvent = true;
        continue;
      }
      out += kept === body ? line : kept + line.slice(body.length);
    }
    return out;
  }
}
