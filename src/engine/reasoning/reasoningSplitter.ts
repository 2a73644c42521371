/**
 * An answer's text split into reasoning and content as it arrives, one small state machine per
 * choice: opening (undecided: whitespace and a prefix of `<think>` are held back) → reasoning
 * (text up to `</think>`; a marker that may be arriving is held back) → content. A `<think>` at
 * the very start of an answer that starts inside the reasoning is dropped (the model wrote the tag
 * its template had already opened). What end() releases at the end belongs where the state says:
 * an answer cut before `</think>` is all reasoning. Pieces joined give the same split as
 * splitReasoning over the whole text, however the text is chunked.
 */
import { partialMarkerLength, type ParsedToolCall } from "../toolCalls/parsedToolCall.ts";
import { THINK_CLOSE, THINK_OPEN, type ThinkStart } from "./reasoningParser.ts";

export interface ReasoningPiece {
  reasoning: string;
  content: string;
  /** Tool calls completed in the piece (harmony's commentary messages; none for <think>). */
  calls?: ParsedToolCall[];
}

/** Where an answer stands: undecided (it may still open its reasoning), reasoning, or content. */
export type AnswerPhase = "opening" | "reasoning" | "content";

/** An answer's text split into reasoning, content (and calls) as it arrives: <think> or harmony. */
export interface AnswerSplitter {
  push(text: string): ReasoningPiece;
  end(): ReasoningPiece;
  /** Whether the answer has reasoning. */
  readonly reasoned: boolean;
  /** Whether what comes now is content (where an output constraint applies). */
  readonly inContent: boolean;
  readonly phase: AnswerPhase;
}

type SplitterState = "opening" | "leading" | "reasoning" | "content";

export class ReasoningSplitter implements AnswerSplitter {
  private state: SplitterState;
  private held = "";
  private entered = false;

  constructor(start: ThinkStart) {
    this.state = start === "content" ? "content" : start === "opening" ? "opening" : "leading";
    this.entered = this.state === "leading";
  }

  /** Whether the answer has reasoning (it started inside it or opened `<think>`). */
  get reasoned(): boolean {
    return this.entered;
  }

  /** Whether the reasoning is over (or never was): what comes now is content. */
  get inContent(): boolean {
    return this.state === "content";
  }

  get phase(): AnswerPhase {
    if (this.inContent) return "content";
    return this.entered ? "reasoning" : "opening";
  }

  push(text: string): ReasoningPiece {
    const piece: ReasoningPiece = { reasoning: "", content: "" };
    if (this.state === "content") {
      piece.content = text;
      return piece;
    }
    this.held += text;
    for (;;) {
      if (this.state === "opening" || this.state === "leading") {
        const start = this.held.trimStart();
        if (start.startsWith(THINK_OPEN)) {
          this.held = start.slice(THINK_OPEN.length);
          this.state = "reasoning";
          this.entered = true;
          continue;
        }
        if (THINK_OPEN.startsWith(start)) return piece;
        this.state = this.state === "opening" ? "content" : "reasoning";
        continue;
      }
      if (this.state === "reasoning") {
        const at = this.held.indexOf(THINK_CLOSE);
        if (at >= 0) {
          piece.reasoning += this.held.slice(0, at);
          this.held = this.held.slice(at + THINK_CLOSE.length);
          this.state = "content";
          continue;
        }
        const keep = partialMarkerLength(this.held, THINK_CLOSE);
        piece.reasoning += this.held.slice(0, this.held.length - keep);
        this.held = this.held.slice(this.held.length - keep);
        return piece;
      }
      piece.content += this.held;
      this.held = "";
      return piece;
    }
  }

  /** The end of the answer: what was held back, where the state puts it. */
  end(): ReasoningPiece {
    const rest = this.held;
    this.held = "";
    if (this.state === "opening") {
      this.state = "content";
      return { reasoning: "", content: rest };
    }
    if (this.state === "content") return { reasoning: "", content: rest };
    return { reasoning: rest, content: "" };
  }
}

/** A whole answer's reasoning (null: none, or empty) and content (null: the answer reasoned and said nothing after). */
export interface SplitAnswer {
  reasoning: string | null;
  content: string | null;
}

export function splitReasoning(start: ThinkStart, text: string): SplitAnswer {
  const splitter = new ReasoningSplitter(start);
  const first = splitter.push(text);
  const last = splitter.end();
  return answerOf(splitter.reasoned, first.reasoning + last.reasoning, first.content + last.content);
}

/** The message fields of a split: empty reasoning is none; empty content after reasoning is none. */
export function answerOf(reasoned: boolean, reasoning: string, content: string): SplitAnswer {
  return { reasoning: reasoning === "" ? null : reasoning, content: reasoned && content === "" ? null : content };
}
