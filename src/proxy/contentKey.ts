/**
 * The mirror's content key of a block: a 64-bit hash (wyhash) of its token ids chained on its
 * parent's key. Fast where the engine's own prefix cache uses SHA-256: a collision here only
 * misjudges where a prompt is cached (a routing choice), it never serves anyone's KV, so
 * collision resistance against crafted prompts is not needed, and 64 bits make an accidental one
 * unlikely (about 1 in 10^7 at a million blocks). Tokenizing and keying sit on the proxy's
 * request path, where SHA-256 cost 0.9 ms for a 60K-token prompt.
 */
import { wyhash } from "../runtime/hashing.ts";

/** A block's content key (bigints are Map keys by value). */
export type ContentKey = bigint;

let scratch = new Uint32Array(64);

/** The key a chain starts from. */
export function rootContentKey(name: string): ContentKey {
  return BigInt.asUintN(64, BigInt(wyhash(name)));
}

export function chainedContentKey(parent: ContentKey, tokens: ArrayLike<number>, start: number, end: number): ContentKey {
  const count = end - start;
  if (scratch.length < count) scratch = new Uint32Array(Math.max(count, 2 * scratch.length));
  for (let i = 0; i < count; i++) scratch[i] = tokens[start + i]!;
  return BigInt(wyhash(new Uint8Array(scratch.buffer, 0, count * 4), parent));
}
