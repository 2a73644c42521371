/**
 * Blocks as clients send them: an id (integer or string) or an object
 * {"id"?, "text"?, "tokens"?}. Every block gets a key that names it across
 * requests: "n:<integer>", "s:<string>", or for a text block without id
 * "t:<hash of its whitespace-normalized text>", so the same text is always the
 * same block, and 1 and "1" stay different blocks.
 */
import { hashBlockText, normalizeWhitespace, textBlockLabel } from "../index/blockText.ts";

export { normalizeWhitespace };

export type BlockInput = number | string | { id?: number | string; text?: string; tokens?: number };

export interface BlockDefaults {
  /** Tokens of a block given without "tokens" or "text". */
  blockTokens: number;
}

export interface NormalizedBlock {
  readonly key: string;
  readonly tokens: number;
  /** How responses name the block: its id, else "text:<hash>". */
  readonly label: number | string;
}

export function normalizeBlock(block: BlockInput, defaults: BlockDefaults): NormalizedBlock {
  if (typeof block === "number") return { key: `n:${block}`, tokens: defaults.blockTokens, label: block };
  if (typeof block === "string") return { key: `s:${block}`, tokens: defaults.blockTokens, label: block };
  const tokens = block.tokens ?? (block.text !== undefined ? estimateTokens(block.text) : defaults.blockTokens);
  if (block.id !== undefined) return normalizeBlock(block.id, { blockTokens: tokens });
  // One request names the same block object several times (reorder, dedup lookups, records): hash it once.
  let hash = hashOfBlock.get(block);
  if (hash === undefined) {
    hash = textHash(block.text ?? "");
    hashOfBlock.set(block, hash);
  }
  return { key: `t:${hash}`, tokens, label: textBlockLabel(hash) };
}

// Keyed by the block object: a text block's text cannot change under it in practice (requests are parsed JSON).
const hashOfBlock = new WeakMap<object, string>();

/** Whitespace-normalized text (trimmed, runs of whitespace as one space) hashed with SHA-256 (first 128 bits, hex). */
export function textHash(text: string): string {
  let hash = recentHashes.get(text);
  if (hash === undefined) {
    hash = hashBlockText(text);
    rememberHash(text, hash);
  }
  return hash;
}

// The same documents come back request after request (that is the premise of reuse), and one
// request names a document several times: remember recent hashes, bounded by characters held.
const MEMO_CHARACTERS = 16 * 1024 * 1024;
const recentHashes = new Map<string, string>();
let memoCharacters = 0;

function rememberHash(text: string, hash: string): void {
  if (memoCharacters + text.length > MEMO_CHARACTERS) forgetHashes();
  if (text.length > MEMO_CHARACTERS) return;
  // A copy as the key: `text` may be a slice of a much larger string (a document cut out of a
  // whole proxied message), and a slice keeps all of its parent alive.
  recentHashes.set(detachedCopy(text), hash);
  memoCharacters += text.length;
}

/** Forgets the remembered hashes (POST /v1/reset). */
export function forgetHashes(): void {
  recentHashes.clear();
  memoCharacters = 0;
}

/** A string with the same characters that shares no storage with `text` (the cheapest copy measured in Bun 1.4). */
function detachedCopy(text: string): string {
  return structuredClone(text);
}

/** About four characters a token: a stand-in until a tokenizer is configured. */
export function estimateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}
