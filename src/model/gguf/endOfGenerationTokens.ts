/**
 * Tokens that end generation by their text, as llama.cpp's vocabulary loader finds them
 * (llama-vocab.cpp, "auto-detect special tokens by text"): GGUF files name one eos (and maybe an
 * eot) id, yet chat turns end with another token: Phi-3's `<|end|>` beside its eos
 * `<|endoftext|>`, ChatML's `<|im_end|>`, Llama 3's `<|eot_id|>`. llama.cpp stops on each of
 * them; so do we. Its one exception: a vocabulary with o200k_harmony's `<|return|>` and
 * `<|call|>` (gpt-oss) uses `<|end|>` inside a turn, so `<|end|>` does not end it there.
 *
 * Pure: the token texts in, the ids found out (in id order).
 */

const END_OF_GENERATION_TEXTS = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|eom_id|>",
  "<EOT>",
  "<|end_of_text|>",
  "<｜end▁of▁sentence｜>",
]);

export function endOfGenerationIds(tokens: readonly string[]): number[] {
  const harmony = tokens.includes("<|return|>") && tokens.includes("<|call|>");
  const ids: number[] = [];
  tokens.forEach((text, id) => {
    if (END_OF_GENERATION_TEXTS.has(text) && !(harmony && text === "<|end|>")) ids.push(id);
  });
  return ids;
}
