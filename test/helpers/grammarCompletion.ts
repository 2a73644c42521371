/**
 * Whether a constrained answer cut by max_tokens is a prefix of a valid answer. A fresh
 * constraint for the same request (the same compiled grammar, a new xgrammar matcher) takes the
 * answer's tokens — it throws on one the grammar rejects — and the grammar itself then completes
 * the answer: at each step its mask (with the UTF-8 filter) over fixed preference scores that
 * favour closing (end of text, quote, brace, bracket, comma) and short literals, so the cheapest
 * way out is taken. The completed text is then checked by the caller (JSON.parse and ajv): a
 * grammar that accepts a prefix no valid answer starts with cannot pass. Token-level acceptance
 * alone would be circular — the engine already fed the same matcher those tokens.
 */
import type { GrammarConstraint } from "../../src/engine/grammarConstraint.ts";
import type { ModelTokenizer } from "../../src/model/modelTokenizer.ts";

/** Bytes preferred by the completion, most preferred first; any other allowed byte comes after them, whitespace last. */
const PREFERRED = `"}],:0123456789-.ntrufalse{[abcdefghijklmnopqrstuvwxyz`;

/** Preference scores for every id (the model's logits width): end-of-text tokens first, then PREFERRED's bytes in order. */
export function completionPreferences(tokenizer: ModelTokenizer, vocab: number): Float32Array {
  const scores = new Float32Array(vocab);
  for (let id = 0; id < vocab; id++) {
    const bytes = id < tokenizer.vocabSize && !tokenizer.isSpecialToken(id) ? tokenizer.tokenBytes(id) : [];
    if (bytes.length === 0) continue;
    const at = bytes.length === 1 ? PREFERRED.indexOf(String.fromCharCode(bytes[0]!)) : -1;
    const whitespace = bytes.every((b) => b === 0x20 || b === 0x0a || b === 0x09 || b === 0x0d);
    scores[id] = at >= 0 ? 100 - at : whitespace ? -10 : 0;
  }
  for (const id of tokenizer.eosTokenIds) if (id < vocab) scores[id] = 1000;
  return scores;
}

/** The answer's tokens fed to `constraint` (throws when it rejects one), then the tokens that complete it, end-of-text excluded; null when the grammar reaches a dead end or `limit` tokens pass. */
export async function completeAnswer(constraint: GrammarConstraint, tokens: readonly number[], preferences: Float32Array, stopIds: readonly number[], limit = 2000): Promise<number[] | null> {
  for (const id of tokens) constraint.accept(id);
  const completion: number[] = [];
  while (!constraint.terminated && completion.length < limit) {
    const forced = await constraint.jumpForward(limit - completion.length);
    completion.push(...forced);
    if (constraint.terminated) break;
    await constraint.ready();
    const masked = constraint.masked(preferences);
    let best = -1;
    for (let id = 0; id < masked.length; id++) if (masked[id]! > -Infinity && (best < 0 || masked[id]! > masked[best]!)) best = id;
    if (best < 0) return null;
    constraint.accept(best);
    completion.push(best);
  }
  if (!constraint.terminated) return null;
  return completion.filter((id) => !stopIds.includes(id));
}

/** The text of token ids, strictly: malformed UTF-8 throws. */
export function strictText(tokenizer: ModelTokenizer, ids: readonly number[]): string {
  const bytes = ids.flatMap((id) => (tokenizer.isSpecialToken(id) ? [] : tokenizer.tokenBytes(id)));
  return new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bytes));
}
