/**
 * Where a text may be cut so that tokenizing the two sides apart gives the same ids as tokenizing
 * it whole: in front of an added token that the tokenizer splits out whole.
 *
 * A Hugging Face tokenizer (tokenizer.json, and the one a GGUF file's vocabulary converts to)
 * first cuts the text at its added tokens (the ones matched before normalization: those with
 * `normalized: false`, or all when the tokenizer has no normalizer), scanning left to right and
 * taking the longest added token that starts at each position; every piece between is then
 * normalized, pre-tokenized and tokenized on its own. The pre-tokenizer's only look at the
 * outside is whether a piece is the text's first (Metaspace's prepend_scheme "first"), and a cut
 * in front of an added token never makes a text piece first. So encode(a + b) = encode(a) ++
 * encode(b) when b starts with such a token and
 * - no added token occurs across the cut (the scan could take it and never stop at the cut);
 * - the token does not strip the whitespace on its left (lstrip would take it from `a`'s end);
 * - the token does not start with whitespace (a token before it with rstrip would trim it).
 * Each condition is checked, none assumed: a cut that fails one is refused.
 */

export interface AddedTokenFacts {
  content: string;
  /** Strips the whitespace on its left (tokenizer.json's lstrip). */
  lstrip: boolean;
  /** Matched after normalization (tokenizer.json's normalized). */
  normalized: boolean;
}

export class AddedTokenBoundary {
  /** The tokens matched on the raw text, by their first character. */
  private readonly byFirst = new Map<string, string[]>();
  /** Those that do not strip on their left, as a set. */
  private readonly clean = new Set<string>();
  /** For each character, the (token, index) pairs whose token has it at that index (index ≥ 1): the tokens that may straddle a cut in front of it. */
  private readonly straddling = new Map<string, { token: string; index: number }[]>();

  /** `hasNormalizer`: whether tokenizer.json has a normalizer (without one, normalized tokens are matched on the raw text too). */
  constructor(tokens: readonly AddedTokenFacts[], hasNormalizer: boolean) {
    for (const token of tokens) {
      const content = token.content;
      if (content.length === 0 || (token.normalized && hasNormalizer)) continue;
      const first = content[0]!;
      const list = this.byFirst.get(first);
      if (list === undefined) this.byFirst.set(first, [content]);
      else list.push(content);
      if (!token.lstrip && !/^\s/u.test(content)) this.clean.add(content);
      for (let index = 1; index < content.length; index++) {
        const character = content[index]!;
        const pairs = this.straddling.get(character);
        if (pairs === undefined) this.straddling.set(character, [{ token: content, index }]);
        else pairs.push({ token: content, index });
      }
    }
  }

  /** Whether encode(text) is provably encode(text.slice(0, at)) followed by encode(text.slice(at)). */
  splitsAt(text: string, at: number): boolean {
    if (!Number.isSafeInteger(at) || at <= 0 || at >= text.length) return false;
    const matched = this.longestAt(text, at);
    if (matched === null || !this.clean.has(matched)) return false;
    for (const { token, index } of this.straddling.get(text[at]!) ?? []) {
      if (index <= at && text.startsWith(token, at - index)) return false;
    }
    return true;
  }

  /** The longest raw-matched added token starting at `at`, as the tokenizer's scan takes it. */
  private longestAt(text: string, at: number): string | null {
    let longest: string | null = null;
    for (const content of this.byFirst.get(text[at]!) ?? []) {
      if ((longest === null || content.length > longest.length) && text.startsWith(content, at)) longest = content;
    }
    return longest;
  }
}
