/**
 * Identity of a prompt chunk (the template head, a document, ...): a digest of its token ids, so
 * that the same text tokenized the same way maps to the same chunk-cache variants whatever its
 * position in a prompt (Cache-Craft §3.3, §4: one hash per chunk, independent of its prefix).
 */
import { createHash } from "node:crypto";

/** Length of a chunk hash in hex characters (128 bits of SHA-256). */
export const CHUNK_HASH_HEX_LENGTH = 32;

/**
 * Hex digest of the token ids written as u32 little-endian: the first 32 hex characters of
 * their SHA-256. Every id must be an integer in [0, 2^32); an empty chunk has a hash too.
 */
export function chunkHash(tokens: ArrayLike<number>): string {
  return createHash("sha256").update(tokenIdBytes(tokens, "chunkHash")).digest("hex").slice(0, CHUNK_HASH_HEX_LENGTH);
}

/** Token ids as u32 little-endian bytes; every id must be an integer in [0, 2^32) (`fn` names the caller in the error). */
export function tokenIdBytes(tokens: ArrayLike<number>, fn: string): Uint8Array {
  const bytes = new Uint8Array(tokens.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    if (!Number.isInteger(token) || token < 0 || token > 0xffffffff) {
      throw new RangeError(`${fn}: token ${i} must be an integer in [0, 2^32) (got ${token})`);
    }
    view.setUint32(i * 4, token, true);
  }
  return bytes;
}
