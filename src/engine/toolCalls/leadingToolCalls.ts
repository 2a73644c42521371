/**
 * Tool calls that make up the whole answer, told by how it begins (Llama 3's JSON, Mistral's
 * [TOOL_CALLS]): until the first characters decide, text is held back; an answer that begins
 * otherwise is content, passed straight on; one that begins like calls is kept whole and parsed
 * at the end (content after all when it does not parse).
 */
import type { ParsedToolCall, ToolCallPiece, ToolCallStream } from "./parsedToolCall.ts";

export class LeadingToolCallStream implements ToolCallStream {
  private buffer = "";
  private mode: "undecided" | "content" | "calls" = "undecided";

  constructor(
    private readonly openings: readonly string[],
    private readonly parse: (text: string) => ParsedToolCall[] | null,
  ) {}

  push(text: string): ToolCallPiece {
    if (this.mode === "content") return { content: text, calls: [] };
    this.buffer += text;
    if (this.mode === "calls") return { content: "", calls: [] };
    const start = this.buffer.trimStart();
    if (start === "") return { content: "", calls: [] };
    if (this.openings.some((opening) => start.startsWith(opening))) {
      this.mode = "calls";
      return { content: "", calls: [] };
    }
    if (this.openings.some((opening) => opening.startsWith(start))) return { content: "", calls: [] };
    this.mode = "content";
    const content = this.buffer;
    this.buffer = "";
    return { content, calls: [] };
  }

  end(): ToolCallPiece {
    const rest = this.buffer;
    this.buffer = "";
    if (this.mode !== "calls") return { content: rest, calls: [] };
    const calls = this.parse(rest);
    return calls === null ? { content: rest, calls: [] } : { content: "", calls };
  }
}
