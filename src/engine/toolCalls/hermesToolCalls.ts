/**
 * Hermes-style tool calls (Qwen, Hermes): `<tool_call>` JSON `</tool_call>` anywhere in the text.
 * Text outside the tags is content, sent as soon as no tag can begin in it; a call whose JSON
 * does not parse stays content, tags included.
 */
import { callOf, partialMarkerLength, type ParsedToolCall, type ToolCallPiece, type ToolCallStream } from "./parsedToolCall.ts";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

function parseCall(json: string): ParsedToolCall | null {
  try {
    return callOf(JSON.parse(json.trim()));
  } catch {
    return null;
  }
}

export class HermesToolCallStream implements ToolCallStream {
  private buffer = "";
  private inside = false;

  push(text: string): ToolCallPiece {
    this.buffer += text;
    const piece: ToolCallPiece = { content: "", calls: [] };
    for (;;) {
      if (!this.inside) {
        const at = this.buffer.indexOf(OPEN);
        if (at < 0) {
          const keep = partialMarkerLength(this.buffer, OPEN);
          piece.content += this.buffer.slice(0, this.buffer.length - keep);
          this.buffer = this.buffer.slice(this.buffer.length - keep);
          return piece;
        }
        piece.content += this.buffer.slice(0, at);
        this.buffer = this.buffer.slice(at + OPEN.length);
        this.inside = true;
      } else {
        const at = this.buffer.indexOf(CLOSE);
        if (at < 0) return piece;
        const call = parseCall(this.buffer.slice(0, at));
        if (call !== null) piece.calls.push(call);
        else piece.content += OPEN + this.buffer.slice(0, at) + CLOSE;
        this.buffer = this.buffer.slice(at + CLOSE.length);
        this.inside = false;
      }
    }
  }

  end(): ToolCallPiece {
    const rest = this.buffer;
    this.buffer = "";
    if (!this.inside) return { content: rest, calls: [] };
    this.inside = false;
    // Ended inside a tag (the model stopped before </tool_call>): a call if its JSON is whole.
    const call = parseCall(rest);
    return call !== null ? { content: "", calls: [call] } : { content: OPEN + rest, calls: [] };
  }
}
