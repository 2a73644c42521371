/**
 * Segmented prompts (KV-managed generation): a prompt is a head (the system and
 * template text before the documents), its chunks (documents) and the question
 * (everything after them). The head and every chunk are tokenized on their own,
 * so a chunk's tokens, and with them its hash and its cached KV, are the same
 * wherever it appears; the question is always computed.
 */
import { renderDocumentsField, type FieldDocument } from "../chat/documentsField.ts";
import type { ChatTemplateMessage, ChatTemplateOptions, ModelTokenizer } from "../model/modelTokenizer.ts";
import { chunkHash } from "./chunkHash.ts";

export interface PromptSegment {
  /** "head" (system and template text), "chunk" (a document). */
  kind: "head" | "chunk";
  tokens: number[];
  /** chunkHash(tokens): the chunk cache's key. */
  hash: string;
}

export interface SegmentedPrompt {
  /** The head first (when not empty), then the chunks in prompt order. */
  segments: PromptSegment[];
  /** The tokens after the last chunk: always computed, at least one token. */
  question: number[];
}

/** The whole prompt's token ids. */
export function promptTokens(prompt: SegmentedPrompt): number[] {
  const out: number[] = [];
  for (const segment of prompt.segments) out.push(...segment.tokens);
  out.push(...prompt.question);
  return out;
}

/** Sequence index where each segment starts, and after the last one: segments.length + 1 values. */
export function segmentBounds(prompt: SegmentedPrompt): number[] {
  const bounds = [0];
  for (const segment of prompt.segments) bounds.push(bounds[bounds.length - 1]! + segment.tokens.length);
  return bounds;
}

export function promptLength(prompt: SegmentedPrompt): number {
  return segmentBounds(prompt).at(-1)! + prompt.question.length;
}

/** Bad segmented-prompt input (no question, empty documents); `field` names the request field. */
export class SegmentedPromptError extends Error {
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
    this.name = "SegmentedPromptError";
  }
}

function segment(kind: PromptSegment["kind"], tokens: number[]): PromptSegment {
  return { kind, tokens, hash: chunkHash(tokens) };
}

const MARK = "\u0000ctxr-documents\u0000";

/**
 * A chat with documents (the `documents` field, rendered as in the proxy: a
 * <documents> element in front of the last user message). The template is
 * rendered once with a marker where the documents go; the text before it is the
 * head, each rendered document a chunk, the rest the question.
 */
export function segmentChat(
  tokenizer: Pick<ModelTokenizer, "encode" | "applyChatTemplate">,
  messages: readonly ChatTemplateMessage[],
  documents: readonly FieldDocument[],
  options?: ChatTemplateOptions,
): SegmentedPrompt {
  const texts = chatSegmentTexts(tokenizer, messages, documents, options);
  return assemble(tokenizer.encode(texts.head), texts.chunks.map((p) => tokenizer.encode(p)), tokenizer.encode(texts.question));
}

/** The texts segmentChat tokenizes, each on its own: the head, each document's chunk, the question. */
export interface ChatSegmentTexts {
  head: string;
  chunks: string[];
  question: string;
}

/** segmentChat's split, before tokenizing (the caller may tokenize the pieces where it likes, then segmentTokens). */
export function chatSegmentTexts(
  tokenizer: Pick<ModelTokenizer, "applyChatTemplate">,
  messages: readonly ChatTemplateMessage[],
  documents: readonly FieldDocument[],
  options?: ChatTemplateOptions,
): ChatSegmentTexts {
  let at = messages.findLastIndex((m) => m.role === "user");
  if (at < 0) throw new SegmentedPromptError("documents need a user message to go with", "messages");
  const marked = messages.map((m, i) => (i === at ? { ...m, content: `${MARK}${m.content}` } : m));
  const text = tokenizer.applyChatTemplate(marked, options);
  const split = text.indexOf(MARK);
  if (split < 0 || text.indexOf(MARK, split + 1) >= 0) {
    throw new SegmentedPromptError("the model's chat template does not place the user message's text once in the prompt; send the documents inside the message instead", "documents");
  }
  const rendered = renderDocumentsField(documents);
  const open = "<documents>\n";
  // Every document ends with its newline, so its tokens do not depend on being last.
  const close = "</documents>\n\n";
  const parts = documents.map((d, i) => {
    const one = renderDocumentsField([d]);
    const body = one.slice(open.length, one.length - "\n</documents>".length);
    if (body.length === 0 || d.text.length === 0) throw new SegmentedPromptError(`documents[${i}].text is empty`, `documents[${i}].text`);
    return `${body}\n`;
  });
  // The pieces must concatenate to exactly what the proxy renders.
  if (open + parts.join("") + "</documents>" !== rendered) throw new Error("segmentChat: document rendering drifted from renderDocumentsField");
  return { head: text.slice(0, split) + open, chunks: parts, question: close + text.slice(split + MARK.length) };
}

/**
 * Explicit segments (/v1/completions `segments`): every segment but the last is a
 * chunk, the last is the question; `bos` (when the model adds one) is the head.
 */
export function segmentTexts(tokenizer: Pick<ModelTokenizer, "encode">, texts: readonly string[], bos: number | null): SegmentedPrompt {
  checkSegmentTexts(texts);
  const chunks = texts.slice(0, -1).map((t) => tokenizer.encode(t));
  return assemble(bos === null ? [] : [bos], chunks, tokenizer.encode(texts.at(-1)!));
}

/** SegmentedPromptError when explicit segments cannot make a prompt (none, or one empty). */
export function checkSegmentTexts(texts: readonly string[]): void {
  if (texts.length === 0) throw new SegmentedPromptError("segments must hold at least the question", "segments");
  texts.forEach((t, i) => {
    if (t.length === 0) throw new SegmentedPromptError(`segments[${i}] is empty`, `segments[${i}]`);
  });
}

/** A prompt from token ids already split (tests, benchmarks). */
export function segmentTokens(head: number[], chunks: number[][], question: number[]): SegmentedPrompt {
  return assemble(head, chunks, question);
}

function assemble(head: number[], chunks: number[][], question: number[]): SegmentedPrompt {
  if (question.length === 0) throw new SegmentedPromptError("the question is empty: the prompt needs at least one token after the documents", "question");
  const segments: PromptSegment[] = [];
  if (head.length > 0) segments.push(segment("head", head));
  chunks.forEach((tokens, i) => {
    if (tokens.length === 0) throw new SegmentedPromptError(`chunk ${i} has no tokens`, `documents[${i}]`);
    segments.push(segment("chunk", tokens));
  });
  return { segments, question };
}
