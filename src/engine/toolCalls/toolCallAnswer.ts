/**
 * The assistant message an answer with tool calls makes, whole or streamed, so that the streamed
 * deltas assemble to exactly the whole message (what OpenAI's SDKs and the Vercel and LangChain
 * clients rely on):
 *
 * - without calls, the content is the text as the parser leaves it;
 * - with calls, content that is only whitespace (the newline between hermes calls, the space
 *   before a call) is no content: null, as OpenAI answers; other content is kept as it is.
 *
 * Streamed, whitespace-only content is held back until the first other character shows it is
 * real content (then it goes out with it), or the end shows there were no calls (then it goes out
 * as the whole content); once content has gone out, every later piece goes out as it comes.
 */
import { toolCallStream, type ToolCallFormat } from "./toolCallFormat.ts";
import type { ParsedToolCall, ToolCallPiece, ToolCallStream } from "./parsedToolCall.ts";

export interface ToolCallAnswer {
  /** null: the answer is calls only. */
  content: string | null;
  calls: ParsedToolCall[];
}

/** The message of a whole answer. */
export function wholeToolCallAnswer(format: ToolCallFormat, text: string): ToolCallAnswer {
  const parser = toolCallStream(format);
  const first = parser.push(text);
  const last = parser.end();
  const calls = [...first.calls, ...last.calls];
  const content = first.content + last.content;
  return { content: calls.length > 0 && content.trim() === "" ? null : content, calls };
}

/** An answer's text as it is generated, to content deltas and completed calls that join to wholeToolCallAnswer's. */
export class ToolCallAnswerStream {
  private readonly parser: ToolCallStream;
  /** Whitespace-only content not yet known to be content. */
  private held = "";
  private contentSent = false;
  private callCount = 0;

  constructor(format: ToolCallFormat) {
    this.parser = toolCallStream(format);
  }

  /** Calls completed so far. */
  get calls(): number {
    return this.callCount;
  }

  push(text: string): ToolCallPiece {
    return this.release(this.parser.push(text), false);
  }

  end(): ToolCallPiece {
    return this.release(this.parser.end(), true);
  }

  private release(piece: ToolCallPiece, last: boolean): ToolCallPiece {
    this.callCount += piece.calls.length;
    let content = piece.content;
    if (!this.contentSent) {
      this.held += content;
      content = "";
      if (this.held.trim() !== "" || (last && this.callCount === 0)) {
        content = this.held;
        this.held = "";
        this.contentSent = content !== "";
      }
    }
    return { content, calls: piece.calls };
  }
}
