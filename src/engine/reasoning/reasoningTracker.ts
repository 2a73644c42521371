/**
 * Where a sequence's generated tokens stand, reasoning or content, told token by token from their
 * bytes (the markers are ASCII, so the text splitter runs on each token's bytes as Latin-1
 * characters and agrees with the split of the decoded text). The engine keeps one per sequence
 * of a reasoning answer: it gates the output constraint (reasoningGatedConstraint.ts) and counts
 * the reasoning tokens for usage.
 */
import { THINK_OPEN, type ReasoningStart } from "./reasoningParser.ts";
import { answerSplitter } from "./answerSplitter.ts";
import type { AnswerSplitter } from "./reasoningSplitter.ts";

/** What the tracker needs of the model's vocabulary. */
export interface ReasoningVocabulary {
  /** A token's bytes as Latin-1 characters (one character a byte). */
  tokenBytes(id: number): string;
  /** The token that is `<think>` alone (null: the vocabulary writes it in pieces). */
  readonly openToken: number | null;
}

/** A vocabulary over a tokenizer's tokenBytes and encode, each token's bytes read once. */
export function reasoningVocabulary(tokenizer: { tokenBytes(id: number): number[]; encode(text: string): number[] }): ReasoningVocabulary {
  const cache = new Map<number, string>();
  const open = tokenizer.encode(THINK_OPEN);
  return {
    openToken: open.length === 1 ? open[0]! : null,
    tokenBytes(id) {
      let text = cache.get(id);
      if (text === undefined) {
        text = String.fromCharCode(...tokenizer.tokenBytes(id));
        cache.set(id, text);
      }
      return text;
    },
  };
}

export type ReasoningPhase = "opening" | "reasoning" | "content";

export class ReasoningTracker {
  private readonly splitter: AnswerSplitter;
  private beforeContent = 0;

  constructor(
    start: ReasoningStart,
    readonly vocabulary: ReasoningVocabulary,
  ) {
    // A harmony tool call's arguments are content: a tool-call constraint applies there.
    this.splitter = answerSplitter(start, { calls: true });
  }

  /** Where the next token goes: undecided (the answer may still open `<think>`), reasoning, or content. */
  get phase(): ReasoningPhase {
    return this.splitter.phase;
  }

  /** A generated token joins the answer. */
  push(id: number): void {
    if (this.splitter.inContent) return;
    this.beforeContent++;
    this.splitter.push(this.vocabulary.tokenBytes(id));
  }

  /** Generated tokens of the reasoning, the one that closes it included (0: the answer did not reason). */
  get reasoningTokens(): number {
    return this.splitter.reasoned ? this.beforeContent : 0;
  }
}
