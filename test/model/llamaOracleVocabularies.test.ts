/**
 * ctxr's tokenizer against llama.cpp's on real SentencePiece vocabularies: llama.cpp's own
 * vocabulary-only files of Llama 2 ("llama-spm": a space prefix, ▁-run pieces that tie at score
 * -1e9, byte fallback) and Phi-3 ("phi-3": Microsoft's file, named "Phi3", so llama.cpp
 * right-strips the whitespace after its special tokens; [PAD] tokens of the unknown type), on
 * llama.cpp's own test texts for them (the .inp files), the oracle texts, the file's chat template
 * and 300 pseudo-random fragments. The random-weight Gemma 3 and Phi-3 files with SentencePiece
 * vocabularies are rows of llamaOracle.test.ts.
 *
 * And gpt-oss's byte-level o200k_harmony vocabulary (o200k_base's real ranks, pre-tokenizer
 * "gpt-4o", the harmony special tokens, gpt-oss's chat template: helpers/harmonyVocabulary.ts).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { tempFolder } from "../helpers/cli.ts";
import { llamaOracle, llamaVocabulary } from "../helpers/llamaOracle.ts";
import { expectLlamaTokenization } from "../helpers/tokenizerOracle.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { ggufModelTokenizer } from "../../src/model/gguf/ggufTokenizer.ts";
import { HARMONY_TEXTS, harmonyVocabularyAvailable, writeHarmonyVocabulary } from "../helpers/harmonyVocabulary.ts";

setDefaultTimeout(120_000);

let scratch: { path: string; cleanup(): void };

beforeAll(() => {
  llamaOracle();
  scratch = tempFolder("ctxr-llama-vocab-");
}, 300_000);

afterAll(() => scratch?.cleanup());

describe("ctxr's tokenizer gives llama.cpp's ids on llama.cpp's own SentencePiece vocabularies", () => {
  for (const name of ["llama-spm", "phi-3"] as const) {
    test(name, () => {
      const { file, texts } = llamaVocabulary(name);
      expect(texts.length).toBeGreaterThan(30);
      expect(expectLlamaTokenization(file, scratch.path, texts)).toBeGreaterThan(300 + texts.length);
    });
  }
});

describe.skipIf(!harmonyVocabularyAvailable)("ctxr's tokenizer gives llama.cpp's ids on gpt-oss's o200k_harmony vocabulary", () => {
  test("o200k_harmony (pre-tokenizer gpt-4o)", () => {
    const file = writeHarmonyVocabulary(scratch.path, llamaOracle().ggufPy);
    expect(expectLlamaTokenization(file, scratch.path, HARMONY_TEXTS)).toBeGreaterThan(300 + HARMONY_TEXTS.length);
    // llama.cpp's end-of-generation set for o200k_harmony: <|return|> (eos), <|call|>, <|endoftext|>; not <|end|>.
    const { tokenizer } = ggufModelTokenizer(readGgufFile(file).metadata, file);
    expect([...tokenizer.eosTokenIds].sort((a, b) => a - b)).toEqual([199999, 200002, 200012]);
    expect(tokenizer.bosTokenId).toBe(199998);
    expect(tokenizer.encode("<|end|><|start|>assistant<|channel|>final<|message|>")).toEqual([200007, 200006, 173781, 200005, 17196, 200008]);
  });
});
