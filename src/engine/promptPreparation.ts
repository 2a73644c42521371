/**
 * A generation request's prompt made ready in one trip through the engine: a chat through the
 * model's template (with `documents`, split into reusable chunks: a segmented prompt), completion
 * prompts (text or token ids), or completion `segments`, all tokenized where the engine tokenizes
 * (long pieces on the tokenizer thread). The answer holds the prompt ids and, for a segmented
 * prompt, its segments; a prompt that cannot be built is a PromptError naming the request field.
 */
import type { FieldDocument } from "../chat/documentsField.ts";
import { chatSegmentTexts, checkSegmentTexts, promptTokens, SegmentedPromptError, segmentTokens, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { ChatTemplateError, ModelTokenizerError, type ChatTemplateMessage, type ChatTemplateOptions, type ModelTokenizer } from "../model/modelTokenizer.ts";

/** What a request asks to be prompted with. */
export type PromptRequest =
  /** Messages through the chat template; with documents, each document a reusable chunk. */
  | { kind: "chat"; messages: readonly ChatTemplateMessage[]; documents?: readonly FieldDocument[]; template?: ChatTemplateOptions; cacheSalt?: string }
  /** Completion prompts, each a text (BOS added as the model's tokenizer does) or token ids as given. */
  | { kind: "completion"; prompts: readonly (string | readonly number[])[] }
  /** Completion segments: chunks, then the question; BOS as the head when the model adds one. */
  | { kind: "segments"; texts: readonly string[] };

export interface PreparedPrompt {
  /** One per prompt (a chat and segments: one). */
  promptIds: number[][];
  /** A chat with documents, or segments: the prompt's chunks, whose KV is reused (promptIds[0] are its ids). */
  segments?: SegmentedPrompt;
}

/** A prompt that cannot be built from the request: `field` names the request field at fault. */
export class PromptError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
    this.name = "PromptError";
  }
}

/** How the engine tokenizes: `encode` and `encodeChat` may work off the request thread. */
export interface PromptTokenizing {
  tokenizer: Pick<ModelTokenizer, "applyChatTemplate">;
  /** BOS to put first on a completion prompt (null: the model adds none). */
  completionBos: number | null;
  encode(text: string, bos?: number | null): Promise<number[]>;
  /** `cacheSalt`: the request's (the engine may prompt a chat with ids it generated for the same salt). */
  encodeChat(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions, cacheSalt?: string): Promise<number[]>;
}

export async function preparePrompt(tokenizing: PromptTokenizing, request: PromptRequest): Promise<PreparedPrompt> {
  try {
    switch (request.kind) {
      case "chat":
        return await prepareChat(tokenizing, request.messages, request.documents ?? [], request.template ?? {}, request.cacheSalt);
      case "completion":
        return { promptIds: await Promise.all(request.prompts.map((prompt) => (typeof prompt === "string" ? tokenizing.encode(prompt, tokenizing.completionBos) : [...prompt]))) };
      case "segments":
        return withSegments(await completionSegments(tokenizing, request.texts));
    }
  } catch (error) {
    if (error instanceof SegmentedPromptError) throw new PromptError(error.field, error.message);
    if (request.kind === "chat" && (error instanceof ChatTemplateError || error instanceof ModelTokenizerError)) throw new PromptError("messages", error.message);
    throw error;
  }
}

async function prepareChat(tokenizing: PromptTokenizing, messages: readonly ChatTemplateMessage[], documents: readonly FieldDocument[], template: ChatTemplateOptions, cacheSalt: string | undefined): Promise<PreparedPrompt> {
  if (documents.length === 0) return { promptIds: [await tokenizing.encodeChat(messages, template, cacheSalt)] };
  const texts = chatSegmentTexts(tokenizing.tokenizer, messages, documents, template);
  const [head, question, ...chunks] = await Promise.all([texts.head, texts.question, ...texts.chunks].map((text) => tokenizing.encode(text)));
  return withSegments(segmentTokens(head!, chunks, question!));
}

async function completionSegments(tokenizing: PromptTokenizing, texts: readonly string[]): Promise<SegmentedPrompt> {
  checkSegmentTexts(texts);
  const ids = await Promise.all(texts.map((text) => tokenizing.encode(text)));
  const bos = tokenizing.completionBos;
  return segmentTokens(bos === null ? [] : [bos], ids.slice(0, -1), ids.at(-1)!);
}

function withSegments(segments: SegmentedPrompt): PreparedPrompt {
  return { promptIds: [promptTokens(segments)], segments };
}
