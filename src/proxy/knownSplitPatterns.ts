/**
 * The Split pre-tokenizer patterns (as tokenizer.json writes them, Oniguruma syntax) for which
 * PieceMemoEncoder's memos are proven exact. Two properties are needed of a pattern P (and of
 * GPT-2's built-in ByteLevel regex, which has them too):
 *
 * 1. Every character is in some match (no gaps), and a piece encoded alone splits into itself.
 *    P has one lookahead, `(?!\S)`, after `\s+`; the alternatives before `\s+(?!\S)` have none,
 *    so on the piece alone they fail as they did in the text, and `\s+(?!\S)` / `\s+` (whitespace
 *    pieces) take the whole piece at its end.
 * 2. Span boundaries: right after a "\n" (a "\r\n" run ends with one) followed by a character
 *    c that is not whitespace, a piece always ends. The alternatives that can match a "\n" are
 *    ` ?[^\s\p{L}\p{N}]+[\r\n]*` (the "\n" only in its final `[\r\n]*`), `\s*[\r\n]+`,
 *    `\s+(?!\S)` and `\s+` (GPT-2: the last two only): each continues past the "\n" only over
 *    whitespace, so the piece holding the "\n" ends right before c. The pieces before the
 *    boundary depend on c only through `\s`, `\S` and `[\r\n]` tests (the only classes those
 *    alternatives try on the character after a "\n"), which every non-whitespace c answers
 *    alike; no alternative looks behind. So the text's pieces are those of its spans, each span
 *    but the last split as if any non-whitespace character followed it.
 *
 * A pattern not listed here gets no memo encoder (the library encodes whole prompts).
 */

/** Llama 3 / 3.1 / 3.2 / 3.3 (tiktoken's cl100k-style split, numbers in groups of up to 3). */
export const LLAMA3_PATTERN = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

/** Qwen2 / Qwen2.5 (as Llama 3's, each digit its own piece). */
export const QWEN2_PATTERN = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

export const SPAN_SAFE_SPLIT_PATTERNS: readonly string[] = [LLAMA3_PATTERN, QWEN2_PATTERN];
