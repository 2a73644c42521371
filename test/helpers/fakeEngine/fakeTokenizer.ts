/**
 * The fake engine's tokenizer: a simple deterministic one by default (words, numbers and single
 * other characters, each with the space before it, named by a hash: about 4 characters a token,
 * and a prompt that extends another starts with the other's tokens except at the seam, as with a
 * real BPE), or a model folder's real one (tokenizer.json and its chat template) when given.
 */
import { loadModelTokenizer } from "../../../src/model/modelTokenizer.ts";

export interface ChatMessage {
  role: string;
  content: string;
}

export interface FakeTokenizer {
  /** A completion prompt's token ids. */
  promptIds(text: string): number[];
  /** A chat request's prompt text (its ids: promptIds of it). */
  chatPrompt(messages: readonly ChatMessage[]): string;
}

/** Ids below this are never produced (room for special tokens). */
const FIRST_ID = 16;
const VOCABULARY = 50_000;
const PIECES = /\s*[\p{L}\p{N}]+|\s*[^\s\p{L}\p{N}]|\s+/gu;

function pieceId(piece: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < piece.length; i++) hash = Math.imul(hash ^ piece.charCodeAt(i), 0x01000193);
  return FIRST_ID + ((hash >>> 0) % VOCABULARY);
}

export const simpleTokenizer: FakeTokenizer = {
  promptIds: (text) => Array.from(text.matchAll(PIECES), (match) => pieceId(match[0])),
  chatPrompt: (messages) => messages.map((m) => `<|${m.role}|>\n${m.content}\n`).join("") + "<|assistant|>\n",
};

/** A model folder's tokenizer and chat template, as `ctxr serve --model` and the engines use them. */
export async function folderTokenizer(dir: string): Promise<FakeTokenizer> {
  const tokenizer = await loadModelTokenizer(dir);
  return {
    promptIds: (text) => tokenizer.promptIds(text),
    chatPrompt: (messages) => tokenizer.applyChatTemplate(messages),
  };
}
