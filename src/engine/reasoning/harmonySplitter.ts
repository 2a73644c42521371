/**
 * gpt-oss's harmony answers split as they arrive: the answer is a run of messages, each a header
 * (`<|channel|>NAME`, maybe ` to=RECIPIENT` and a content type, `<|constrain|>json`), then
 * `<|message|>`, its body and an end (`<|end|>`, or the stop tokens `<|call|>` / `<|return|>`,
 * whose text the engine leaves out); the next message opens with `<|start|>assistant`. The
 * prompt's generation prompt already opened the first (`<|start|>assistant`).
 *
 * - the analysis channel is the reasoning (reasoning_content);
 * - a message to `functions.NAME` (the commentary channel) is a tool call: its body, the JSON
 *   arguments, complete when the message ends (when calls are not parsed, its body is content);
 * - any other message (final, a commentary preamble) is content; except that where the request
 *   names the call (tool_choice naming a function, or "required" with one tool: `forcedCall`),
 *   the first body that is not analysis is that call whatever its header says (the constraint
 *   held that body to the function's arguments).
 *
 * Headers never reach the output; a header cut off by the end of the answer is dropped, except an
 * answer with no harmony markup at all, which is all content. Bodies stream out as they come, a
 * marker that may be arriving held back. Pieces joined give the split of the whole text, however
 * it is chunked.
 */
import type { ParsedToolCall } from "../toolCalls/parsedToolCall.ts";
import { partialMarkerLength } from "../toolCalls/parsedToolCall.ts";
import type { AnswerPhase, AnswerSplitter, ReasoningPiece } from "./reasoningSplitter.ts";

export const HARMONY_MARKERS = {
  start: "<|start|>",
  channel: "<|channel|>",
  message: "<|message|>",
  end: "<|end|>",
  call: "<|call|>",
  return: "<|return|>",
  constrain: "<|constrain|>",
} as const;

const BODY_ENDS = [HARMONY_MARKERS.end, HARMONY_MARKERS.call, HARMONY_MARKERS.return, HARMONY_MARKERS.start];
const FUNCTIONS = "functions.";

/** A message header's parts. */
export interface HarmonyHeader {
  channel: string | null;
  recipient: string | null;
}

/** The channel and recipient of a header (`<|start|>assistant to=functions.f<|channel|>commentary json`, in either order). */
export function parseHarmonyHeader(header: string): HarmonyHeader {
  const text = header.replaceAll(HARMONY_MARKERS.start, " ").replaceAll(HARMONY_MARKERS.constrain, " ");
  const channel = /<\|channel\|>\s*([^\s<]+)/.exec(text)?.[1] ?? null;
  const recipient = /(?:^|\s|>)to=([^\s<]+)/.exec(text)?.[1] ?? null;
  return { channel, recipient };
}

type BodyKind = "reasoning" | "content" | "call";

export class HarmonySplitter implements AnswerSplitter {
  private held = "";
  private inHeader = true;
  private kind: BodyKind = "content";
  private callName = "";
  private callBody = "";
  private sawMarkup = false;
  private analysis = false;
  private contentStarted = false;

  /** `calls`: whether messages to functions.* are tool calls (else their bodies are content); `forcedCall`: see above. */
  constructor(private readonly options: { calls: boolean; forcedCall?: string } = { calls: true }) {}

  get reasoned(): boolean {
    return this.analysis;
  }

  get inContent(): boolean {
    return this.contentStarted;
  }

  /** Free (reasoning) until the first body that is not analysis begins: there an output constraint applies. */
  get phase(): AnswerPhase {
    return this.contentStarted ? "content" : "reasoning";
  }

  push(text: string): ReasoningPiece {
    const piece: ReasoningPiece = { reasoning: "", content: "", calls: [] };
    this.held += text;
    for (;;) {
      if (this.inHeader) {
        const at = this.held.indexOf(HARMONY_MARKERS.message);
        if (at < 0) return piece;
        this.openBody(this.held.slice(0, at));
        this.held = this.held.slice(at + HARMONY_MARKERS.message.length);
        continue;
      }
      const end = firstMarker(this.held, BODY_ENDS);
      if (end === null) {
        const keep = Math.max(...BODY_ENDS.map((marker) => partialMarkerLength(this.held, marker)));
        this.emit(piece, this.held.slice(0, this.held.length - keep));
        this.held = this.held.slice(this.held.length - keep);
        return piece;
      }
      this.emit(piece, this.held.slice(0, end.at));
      this.closeBody(piece);
      // A new message's <|start|> stays: it is part of the next header.
      this.held = this.held.slice(end.at + (end.marker === HARMONY_MARKERS.start ? 0 : end.marker.length));
      this.inHeader = true;
    }
  }

  /** The end of the answer: a body in progress ends there (a call is complete: its <|call|> was the stop token). */
  end(): ReasoningPiece {
    const piece: ReasoningPiece = { reasoning: "", content: "", calls: [] };
    const rest = this.held;
    this.held = "";
    if (this.inHeader) {
      // No markup at all: the model did not write harmony; its text is the answer.
      if (!this.sawMarkup && !rest.includes("<|")) {
        piece.content = rest;
        this.contentStarted ||= rest !== "";
      }
      return piece;
    }
    this.emit(piece, rest);
    this.closeBody(piece);
    this.inHeader = true;
    return piece;
  }

  private openBody(header: string): void {
    this.sawMarkup = true;
    const { channel, recipient } = parseHarmonyHeader(header);
    this.inHeader = false;
    if (channel === "analysis" && recipient === null) {
      this.kind = "reasoning";
      this.analysis = true;
      return;
    }
    const first = !this.contentStarted;
    this.contentStarted = true;
    const named = recipient !== null && recipient.startsWith(FUNCTIONS) ? recipient.slice(FUNCTIONS.length) : null;
    const forced = first && this.options.calls ? this.options.forcedCall : undefined;
    if (this.options.calls && (named !== null || forced !== undefined)) {
      this.kind = "call";
      this.callName = named ?? forced!;
      this.callBody = "";
      return;
    }
    this.kind = "content";
  }

  private emit(piece: ReasoningPiece, text: string): void {
    if (text === "") return;
    if (this.kind === "reasoning") piece.reasoning += text;
    else if (this.kind === "content") piece.content += text;
    else this.callBody += text;
  }

  private closeBody(piece: ReasoningPiece): void {
    if (this.kind !== "call") return;
    const call: ParsedToolCall = { name: this.callName, arguments: this.callBody.trim() === "" ? "{}" : this.callBody.trim() };
    piece.calls!.push(call);
    this.kind = "content";
  }
}

/** The first of `markers` in `text`, and where. */
function firstMarker(text: string, markers: readonly string[]): { at: number; marker: string } | null {
  let best: { at: number; marker: string } | null = null;
  for (const marker of markers) {
    const at = text.indexOf(marker);
    if (at >= 0 && (best === null || at < best.at)) best = { at, marker };
  }
  return best;
}
