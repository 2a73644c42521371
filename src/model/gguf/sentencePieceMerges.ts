/**
 * BPE merges for a SentencePiece vocabulary that has only pieces and scores (GGUF's
 * `tokenizer.ggml.model = "llama"`), so that a Hugging Face BPE model tokenizes as
 * llama.cpp's SPM tokenizer does. llama.cpp starts from the text's characters and, while it
 * can, joins the adjacent pair whose concatenation is a piece with the highest score (the
 * leftmost pair on a tie). The same result from BPE: a merge (left, right) for every way of
 * cutting a piece into two pieces, ranked by the whole piece's score, highest first. (This is
 * how Hugging Face's GGUF converter derives merges too.)
 *
 * A side of a cut may also be a single character that is no piece: llama.cpp joins any two
 * symbols whose text is a piece, and a character is a symbol from the start (alone, it falls
 * back to bytes). Longer strings that are no piece never become symbols.
 *
 * Where they can differ: pairs whose pieces tie on score are ranked here by id, where
 * llama.cpp takes the leftmost in the text (checked against llama.cpp on Llama 2's vocabulary,
 * whose 15 runs of ▁ all score -1e9: the same ids).
 */

export interface SentencePieceVocab {
  tokens: readonly string[];
  scores: readonly number[];
  /** Whether a piece can be made by merging (control and byte tokens cannot: they are matched whole). */
  mergeable(id: number): boolean;
}

/** [left, right] pairs, highest-ranked first. */
export function sentencePieceMerges(vocab: SentencePieceVocab): [string, string][] {
  const ids = new Map<string, number>();
  vocab.tokens.forEach((token, id) => ids.set(token, id));
  const found: { left: string; right: string; score: number; id: number; cut: number }[] = [];
  vocab.tokens.forEach((token, id) => {
    if (!vocab.mergeable(id)) return;
    const characters = Array.from(token);
    for (let cut = 1; cut < characters.length; cut++) {
      const left = characters.slice(0, cut).join("");
      const right = characters.slice(cut).join("");
      const symbol = (text: string, length: number) => length === 1 || ids.has(text);
      if (symbol(left, cut) && symbol(right, characters.length - cut)) found.push({ left, right, score: vocab.scores[id] ?? 0, id, cut });
    }
  });
  found.sort((a, b) => b.score - a.score || a.id - b.id || a.cut - b.cut);
  return found.map(({ left, right }) => [left, right]);
}
