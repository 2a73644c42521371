/**
 * ctxr's tokenizer of a GGUF file (ggufModelTokenizer, as `serve --model` loads it) against
 * llama.cpp's on the same file (the driver's tokenize mode: special tokens recognised, none added).
 */
import { expect } from "bun:test";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { ggufModelTokenizer } from "../../src/model/gguf/ggufTokenizer.ts";
import { llamaTokenize } from "./llamaOracle.ts";
import { ORACLE_CHAT, SENTENCE_PIECE_TEXTS, TOKENIZER_TEXTS, separatedFragments } from "./tokenizerOracleTexts.ts";

/** Pseudo-random fragments between special tokens, checked in one llama.cpp call. */
const FRAGMENTS = 300;

function splitAt(ids: readonly number[], separator: number): number[][] {
  const parts: number[][] = [[]];
  for (const id of ids) {
    if (id === separator) parts.push([]);
    else parts.at(-1)!.push(id);
  }
  return parts;
}

/**
 * Expects ctxr's ids to be llama.cpp's on every oracle text (and `moreTexts`), on the file's chat
 * template's rendering of ORACLE_CHAT, and on FRAGMENTS pseudo-random texts separated by BOS.
 * Returns how many texts were compared.
 */
export function expectLlamaTokenization(file: string, scratch: string, moreTexts: readonly string[] = []): number {
  const { tokenizer } = ggufModelTokenizer(readGgufFile(file).metadata, file);
  const texts = [...TOKENIZER_TEXTS, ...SENTENCE_PIECE_TEXTS, ...moreTexts];
  if (tokenizer.hasChatTemplate) texts.push(tokenizer.applyChatTemplate(ORACLE_CHAT, { addGenerationPrompt: true }));
  for (const text of texts) expect(tokenizer.encode(text), JSON.stringify(text)).toEqual(llamaTokenize(file, text, scratch).special);

  // Between two special tokens llama.cpp tokenizes a text on its own (BOS never strips what follows).
  const bos = tokenizer.bosTokenId;
  expect(bos, `${file} has a BOS token to separate the fragments with`).not.toBeNull();
  const { text, fragments } = separatedFragments(tokenizer.decode([bos!]), FRAGMENTS, 29);
  const ours = splitAt(tokenizer.encode(text), bos!);
  const llama = splitAt(llamaTokenize(file, text, scratch).special, bos!);
  expect(llama).toHaveLength(fragments.length);
  fragments.forEach((fragment, i) => expect(ours[i], JSON.stringify(fragment)).toEqual(llama[i]!));
  return texts.length + fragments.length;
}
