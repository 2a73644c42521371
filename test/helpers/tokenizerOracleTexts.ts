/**
 * Texts on which ctxr's tokenizers must give llama.cpp's ids (test/model/llamaOracle*.test.ts):
 * ordinary prose, whitespace of every kind, characters a small vocabulary lacks (byte fallback),
 * emoji and CJK, and text right beside the special tokens of the families we run (ChatML, Gemma's
 * turns, Phi-3's, SentencePiece's <s>/</s>/<unk>, Gemma's user-defined markup).
 */
import type { ChatTemplateMessage } from "../../src/model/modelTokenizer.ts";

export const TOKENIZER_TEXTS = [
  "hello the world, they are here at the station.",
  "  two  spaces\n\nand a tab\there: 12345 3.14 don't I'm we'll",
  "héllo wörld — 日本語のテキスト 🙂👍🏽 Ünïcödé ß",
  "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>so</think>the answer<|endoftext|>",
];

/** What SentencePiece vocabularies treat specially: ▁ for spaces, the prefix space, byte pieces, rstrip. */
export const SENTENCE_PIECE_TEXTS = [
  " one leading space",
  "   three leading spaces, two  inside, trailing  ",
  "                      twenty-two spaces (past the longest run piece), then words; and 9:         done",
  "line one\nline two\n\n\nthree newlines\r\nand CRLF\n",
  "\ttab\tseparated\t\tvalues\n\tindented\n",
  "    def f(x):\n        return x  # four-space indents",
  "Ωmega ∑∫ ∑ ∫ ≈ ℕ ǅ ‰ — characters missing from the vocabulary fall back to bytes",
  "emoji 🙂👍🏽🇯🇵 👨‍👩‍👧 and 😀😀",
  "東京は日本の首都です。新しい単語：量子コンピュータ。中文测试：机器学习。서울 날씨",
  "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n  spaced<end_of_turn><eos>x<bos> y",
  "<|user|>\nhi<|end|>\n<|assistant|> answer <|end|><|endoftext|>  after<|system|>\t tab",
  "<|end|>\u00a0no-break space\u3000ideographic space<|user|> \u2003em space<|end|>\r\n\v\fx<|end|>",
  "<table><tr><td>cell</td></tr></table>  <table>",
  "<0x0A> and <unk> and <mask> and <s></s> and [@BOS@] and ▁▁ already escaped ▁spaces",
  "",
];

/** A conversation whose rendering by a file's template is tokenized too. */
export const ORACLE_CHAT: ChatTemplateMessage[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "What's 2+2? Ça va?" },
  { role: "assistant", content: " Four.  " },
  { role: "user", content: "\nThanks — 日本語 too\n" },
];

/**
 * `count` pseudo-random short texts over pieces that stress merges, spaces and byte fallback,
 * joined by `separator` (a special token): llama.cpp tokenizes each text between special tokens on
 * its own, so one call checks them all. Returns the joined text and the texts.
 */
export function separatedFragments(separator: string, count: number, seed: number): { text: string; fragments: string[] } {
  const pieces = ["the", "ing", " ", " ", "  ", "an", "re", "er", "tion", "a", "e", "o", "s", "t", "th", "ab", "ba", "aba", "ll", ".", "\n", "\t", "é", "ü", "日本", "語", "中", "🙂", "1", "19", "▁", "Ωmega"];
  let state = seed >>> 0 || 1;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 2 ** 32;
  };
  const fragments: string[] = [];
  for (let i = 0; i < count; i++) {
    let fragment = "";
    const length = 1 + Math.floor(next() * 24);
    for (let j = 0; j < length; j++) fragment += pieces[Math.floor(next() * pieces.length)];
    fragments.push(fragment);
  }
  return { text: fragments.join(separator), fragments };
}
