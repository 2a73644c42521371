/**
 * Small tokenizer folders of the two families real models ship, for grammar tests that must hold
 * for every vocabulary type: a GPT-2-style byte-level BPE with merges (tokens that span several
 * bytes, some of them half a character), and a SentencePiece-style (Llama 2) BPE with byte
 * fallback and ▁ for spaces. Written as tokenizer.json and tokenizer_config.json.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { byteToUnicode } from "../../src/model/byteTokenizer.ts";

const SPECIALS = ["<s>", "</s>"];

function added(ids: number[]): unknown[] {
  return SPECIALS.map((content, i) => ({ id: ids[i], content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
}

function write(dir: string, tokenizer: Record<string, unknown>): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tokenizer));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({ bos_token: "<s>", eos_token: "</s>", add_bos_token: false }));
  return dir;
}

/** Byte-level BPE: the 256 byte symbols, then merges of frequent JSON and text pairs (one of them half of "é"). */
export function byteLevelBpeFolder(dir: string): string {
  const bytes = byteToUnicode();
  const vocab: Record<string, number> = {};
  bytes.forEach((symbol, byte) => (vocab[symbol] = byte));
  const space = bytes[32]!;
  const pairs: [string, string][] = [
    ['"', ":"],
    [space, '"'],
    [",", space],
    [space + '"', "a"],
    ["t", "h"],
    ["th", "e"],
    [space, "the"],
    ["1", "0"],
    ["1", "2"],
    [bytes[0xc3]!, bytes[0xa9]!],
    ["{", '"'],
    ['"', "}"],
    ["t", "r"],
    ["tr", "u"],
    ["tru", "e"],
    [bytes[0xe2]!, bytes[0x82]!],
  ];
  const merges: string[] = [];
  for (const [left, right] of pairs) {
    vocab[left + right] = Object.keys(vocab).length;
    merges.push(`${left} ${right}`);
  }
  const next = Object.keys(vocab).length;
  return write(dir, {
    version: "1.0",
    added_tokens: added([next, next + 1]),
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: { ...vocab, "<s>": next, "</s>": next + 1 }, merges },
  });
}

/** SentencePiece-style: <0xNN> byte tokens, ▁ for spaces (prepended), some whole pieces. */
export function sentencePieceFolder(dir: string): string {
  const vocab: Record<string, number> = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let byte = 0; byte < 256; byte++) vocab[`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + byte;
  const pieces = ["▁", "a", "e", "t", "h", "r", "u", "n", "1", "0", "2", '"', ":", ",", "{", "}", "[", "]", "▁t", "th", "▁th", "the", "▁the", "tr", "tru", "true", '":', '▁"', "10", "é"];
  for (const piece of pieces) vocab[piece] = Object.keys(vocab).length;
  const merges = ["▁ t", "t h", "▁t h", "th e", "▁th e", "t r", "tr u", "tru e", '" :', '▁ "', "1 0"];
  return write(dir, {
    version: "1.0",
    added_tokens: [
      { id: 0, content: "<unk>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ...added([1, 2]),
    ],
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "▁" }, { type: "Replace", pattern: { String: " " }, content: "▁" }] },
    pre_tokenizer: null,
    post_processor: null,
    decoder: {
      type: "Sequence",
      decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }],
    },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  });
}
