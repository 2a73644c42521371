/**
 * Span boundaries in a prompt: positions right after a "\n" whose next character is not
 * whitespace and where no added token starts. The byte-level pre-tokenizers PieceMemoEncoder
 * reproduces always end a piece there (knownSplitPatterns.ts has the proof), and no added token
 * match crosses one when no added token contains a "\n" (the encoder checks), so a prompt's ids
 * are its spans' ids, each span but the last encoded as if a non-whitespace character followed.
 */

/**
 * Whether a UTF-16 unit may be whitespace for a split regex: JS's `\s` (which GPT-2's regex uses)
 * or Unicode's White_Space (what `\s` means in tokenizer.json patterns), and U+180E, U+200B to be
 * safe. A surrogate is no whitespace (all whitespace is in the BMP). NFC maps no other character
 * to one starting with whitespace, so a boundary stays one after normalization.
 */
export function mayBeWhitespace(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0x85) return false;
  return (
    code === 0x85 || code === 0xa0 || code === 0x1680 || code === 0x180e || (code >= 0x2000 && code <= 0x200b) ||
    code === 0x2028 || code === 0x2029 || code === 0x202f || code === 0x205f || code === 0x3000 || code === 0xfeff
  );
}

/** Whether an added token starts at a position of a text. */
export type AddedTokenAt = (text: string, at: number) => boolean;

/** For these added tokens' contents (none may be empty). */
export function addedTokenAt(contents: readonly string[]): AddedTokenAt {
  if (contents.length === 0) return () => false;
  const firsts = new Set(contents.map((c) => c.charCodeAt(0)));
  const sticky = new RegExp(contents.map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "y");
  return (text, at) => {
    if (!firsts.has(text.charCodeAt(at))) return false;
    sticky.lastIndex = at;
    return sticky.test(text);
  };
}

/**
 * The end (exclusive) of the span of `text` that starts at `from`: the first boundary after it,
 * or the text's length. An added token found at a position is the one the library's splitter
 * finds there: a match starting earlier would cover the "\n" before it.
 */
export function spanEnd(text: string, from: number, addedAt: AddedTokenAt): number {
  let newline = text.indexOf("\n", from);
  while (newline >= 0 && newline + 1 < text.length) {
    if (!mayBeWhitespace(text.charCodeAt(newline + 1)) && !addedAt(text, newline + 1)) return newline + 1;
    newline = text.indexOf("\n", newline + 1);
  }
  return text.length;
}
