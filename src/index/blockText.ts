/**
 * The identity of a text block given without an id: a hash of its whitespace-normalized
 * text, so the same text is the same block whatever its spacing. The online API
 * (src/online/blocks.ts) and the offline index build name text blocks the same way.
 */
import { createHash } from "node:crypto";

// Whitespace runs other than a lone space: replacing only those is twice as fast as /\s+/.
const WHITESPACE_TO_COLLAPSE = /(?! )\s+| \s+/g;

/** Trimmed, runs of whitespace as one space. */
export function normalizeWhitespace(text: string): string {
  return text.trim().replace(WHITESPACE_TO_COLLAPSE, " ");
}

/** SHA-256 of the whitespace-normalized text, its first 128 bits in hex. */
export function hashBlockText(text: string): string {
  return createHash("sha256").update(normalizeWhitespace(text)).digest("hex").slice(0, 32);
}

/** How a text block without an id is named in answers and schedules. */
export function textBlockLabel(hash: string): string {
  return `text:${hash}`;
}
