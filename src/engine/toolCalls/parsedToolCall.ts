/** A tool call parsed from generated text, and the streaming parsers' shape. */

export interface ParsedToolCall {
  name: string;
  /** The arguments as JSON text (what OpenAI's function.arguments holds). */
  arguments: string;
}

/** What a piece of text turned out to be: content to pass on, calls completed in it. */
export interface ToolCallPiece {
  content: string;
  calls: ParsedToolCall[];
}

export interface ToolCallStream {
  push(text: string): ToolCallPiece;
  /** The end of the text: whatever was held back, as calls when it parses, else as content. */
  end(): ToolCallPiece;
}

/** One call object ({name, arguments | parameters}) as a ParsedToolCall, or null. */
export function callOf(value: unknown): ParsedToolCall | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const { name, arguments: args, parameters } = value as Record<string, unknown>;
  if (typeof name !== "string" || name === "") return null;
  const given = args ?? parameters ?? {};
  if (typeof given === "string") return { name, arguments: given };
  if (typeof given !== "object" || given === null || Array.isArray(given)) return null;
  return { name, arguments: JSON.stringify(given) };
}

/** The longest end of `text` that begins `marker` (held back: the marker may be arriving). */
export function partialMarkerLength(text: string, marker: string): number {
  for (let length = Math.min(marker.length - 1, text.length); length > 0; length--) if (marker.startsWith(text.slice(text.length - length))) return length;
  return 0;
}
