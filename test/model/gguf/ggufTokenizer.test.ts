import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { completionsAddBos } from "../../../src/model/completionPrompt.ts";
import { ggufArray, ggufString, ggufUint32, type GgufMetadata } from "../../../src/model/gguf/ggufMetadata.ts";
import { ggufModelTokenizer, ggufTokenizerFiles } from "../../../src/model/gguf/ggufTokenizer.ts";
import { loadModelTokenizer, type ModelTokenizer } from "../../../src/model/modelTokenizer.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { tokenizerFolderAsGguf } from "../../helpers/ggufTokenizerMetadata.ts";
import { plainValue } from "../../../src/model/gguf/ggufMetadataValues.ts";
import { byteLevelBpeFolder, sentencePieceFolder } from "../../helpers/tokenizerFolders.ts";

const QUALITY_MODEL = join(import.meta.dir, "../../../models/quality");

/** Texts that exercise every part of tokenization: unicode, spaces, newlines, numbers, special tokens in text. */
const TEXTS = [
  "Hello, world!",
  "the truth is {\"a\": 10, \"b\": 12, \"c\": true}",
  "  leading spaces and trailing   ",
  "lines\nand\r\nmore\n\n\nlines\t\ttabs",
  "héllo wörld café é é",
  "日本語のテキスト 한국어 中文",
  "emoji 🎉👩‍👩‍👧 and ½∑ €100",
  "<s>a special token</s> in text <s>",
  "don't you'll I'm we've THEY'RE",
  "1234567890 3.14159 1,000,000",
  "x",
  " ",
  "\n",
  "",
  "the the the thethethe  the\n the",
];

function expectSameTokenizer(ours: ModelTokenizer, original: ModelTokenizer): void {
  for (const text of TEXTS) {
    const ids = original.encode(text);
    expect({ text, ids: ours.encode(text) }).toEqual({ text, ids });
    expect(ours.decode(ids)).toBe(original.decode(ids));
    expect(ours.decode(ids, { skipSpecialTokens: true })).toBe(original.decode(ids, { skipSpecialTokens: true }));
  }
  expect(ours.bosTokenId).toBe(original.bosTokenId);
  expect(ours.eosTokenIds).toEqual(original.eosTokenIds);
  expect(ours.vocabSize).toBe(original.vocabSize);
  expect(ours.vocabType).toBe(original.vocabType);
  expect(ours.prependsSpace).toBe(original.prependsSpace);
  expect(ours.encodedVocab()).toEqual(original.encodedVocab());
  for (let id = 0; id < original.vocabSize; id++) {
    expect(ours.isSpecialToken(id)).toBe(original.isSpecialToken(id));
    expect(ours.tokenBytes(id)).toEqual(original.tokenBytes(id));
  }
}

/** An array value's items. */
const items = <T>(metadata: GgufMetadata, key: string): T[] => plainValue(metadata.get(key)) as T[];

let folder: { path: string; cleanup(): void };
beforeAll(() => {
  folder = tempFolder("ctxr-gguf-tokenizer-");
});
afterAll(() => folder.cleanup());

describe("a gpt2 (byte-level BPE) vocabulary from GGUF metadata", () => {
  test("models/quality: encodes, decodes, renders its chat template and stops as its tokenizer.json does", async () => {
    const original = await loadModelTokenizer(QUALITY_MODEL);
    const metadata = tokenizerFolderAsGguf(QUALITY_MODEL, { model: "gpt2", pre: "gpt-2" });
    const { tokenizer, addBos } = ggufModelTokenizer(metadata, "quality.gguf");
    expectSameTokenizer(tokenizer, original);
    expect(addBos).toBe(await completionsAddBos(QUALITY_MODEL, original));
    expect(addBos).toBe(true);
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "4" },
      { role: "user", content: "And 3+3?" },
    ];
    expect(tokenizer.hasChatTemplate).toBe(true);
    expect(tokenizer.applyChatTemplate(messages)).toBe(original.applyChatTemplate(messages));
    expect(tokenizer.chatTemplateSource).toBe(original.chatTemplateSource);
    expect(tokenizer.dir).toBe("quality.gguf");
  });

  test("a vocabulary with merges (some of them half a character) tokenizes as its tokenizer.json", async () => {
    const dir = byteLevelBpeFolder(join(folder.path, "byte-level"));
    const original = await loadModelTokenizer(dir);
    const { tokenizer } = ggufModelTokenizer(tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "gpt-2" }), "bpe.gguf");
    expectSameTokenizer(tokenizer, original);
    expect(tokenizer.encode(" the truth")).toEqual(original.encode(" the truth"));
    expect(tokenizer.encode(" the").length).toBe(1);
  });

  test("llama-bpe and qwen2 split as Llama 3's and Qwen2's tokenizer.json (their regexes, Llama 3's ignore_merges)", async () => {
    const base = byteLevelBpeFolder(join(folder.path, "for-llama3"));
    const json = JSON.parse(await Bun.file(join(base, "tokenizer.json")).text());
    // Hugging Face's own spelling of the two families (case-insensitive contractions).
    const hfRegex = (digits: string) => `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}${digits}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
    for (const [pre, digits, ignoreMerges] of [
      ["llama-bpe", "{1,3}", true],
      ["qwen2", "", false],
    ] as const) {
      const dir = join(folder.path, pre);
      byteLevelBpeFolder(dir);
      writeFileSync(
        join(dir, "tokenizer.json"),
        JSON.stringify({
          ...json,
          pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: hfRegex(digits) }, behavior: "Isolated", invert: false }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] },
          model: { ...json.model, ignore_merges: ignoreMerges },
        }),
      );
      const original = await loadModelTokenizer(dir);
      const { tokenizer } = ggufModelTokenizer(tokenizerFolderAsGguf(dir, { model: "gpt2", pre }), `${pre}.gguf`);
      expectSameTokenizer(tokenizer, original);
      // Numbers: Llama 3 splits "1010" as "101" "0" (then "10" "1" "0"), Qwen2 each digit alone.
      expect(tokenizer.encode("1010").length).toBe(pre === "qwen2" ? 4 : 3);
    }
  });

  test("gpt-4o (Phi-4-mini) splits as its tokenizer.json's o200k regex: case changes, contractions, digits in threes", async () => {
    const dir = byteLevelBpeFolder(join(folder.path, "gpt-4o"));
    const json = JSON.parse(await Bun.file(join(dir, "tokenizer.json")).text());
    // The regex of GPT-4o's (and Phi-4-mini's) tokenizer.json, with its inline case-insensitive groups.
    const o200k =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    writeFileSync(
      join(dir, "tokenizer.json"),
      JSON.stringify({
        ...json,
        pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: o200k }, behavior: "Isolated", invert: false }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] },
      }),
    );
    const original = await loadModelTokenizer(dir);
    const { tokenizer } = ggufModelTokenizer(tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "gpt-4o" }), "gpt-4o.gguf");
    expectSameTokenizer(tokenizer, original);
    for (const text of ["HelloWORLD they'RE here", "camelCaseXMLParser 1234567", "path/to/file\r\n  x", "Ünïcödé ÀB cd"])
      expect(tokenizer.encode(text)).toEqual(original.encode(text));
    // Not the gpt-2 split: "1012" is "101" "2" here ("10" "1" "2"), one piece under gpt-2 ("10" "12").
    const gpt2 = ggufModelTokenizer(tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "gpt-2" }), "gpt-2.gguf").tokenizer;
    expect(tokenizer.encode("1012").length).toBe(3);
    expect(gpt2.encode("1012").length).toBe(2);
  });

  test("tokenizer.ggml.pre: llama-bpe adds BOS by default, gpt-2 does not; add_bos_token overrides", () => {
    const dir = byteLevelBpeFolder(join(folder.path, "bos"));
    const metadata = tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "llama-bpe" });
    metadata.delete("tokenizer.ggml.add_bos_token");
    expect(ggufTokenizerFiles(metadata).addBos).toBe(true);
    metadata.set("tokenizer.ggml.pre", ggufString("gpt-2"));
    expect(ggufTokenizerFiles(metadata).addBos).toBe(false);
    metadata.set("tokenizer.ggml.add_bos_token", { type: "bool", value: true });
    expect(ggufTokenizerFiles(metadata).addBos).toBe(true);
  });
});

describe("a llama (SentencePiece) vocabulary from GGUF metadata", () => {
  test("merges derived from scores tokenize as the tokenizer.json with merges (▁ prefix, byte fallback, specials)", async () => {
    const dir = sentencePieceFolder(join(folder.path, "spm"));
    const original = await loadModelTokenizer(dir);
    const metadata = tokenizerFolderAsGguf(dir, { model: "llama" });
    const { tokenizer, addBos } = ggufModelTokenizer(metadata, "spm.gguf");
    expectSameTokenizer(tokenizer, original);
    expect(tokenizer.encode(" the true")).toEqual(original.encode(" the true"));
    expect(tokenizer.encode("the").length).toBe(1);
    expect(tokenizer.vocabType).toBe("byte_fallback");
    expect(tokenizer.prependsSpace).toBe(true);
    // llama.cpp's SentencePiece default: BOS added unless add_bos_token says otherwise (the folder says false).
    expect(addBos).toBe(false);
    metadata.delete("tokenizer.ggml.add_bos_token");
    expect(ggufTokenizerFiles(metadata).addBos).toBe(true);
  });

  test("scores decide the merges: reversing them changes the tokenization", () => {
    const dir = sentencePieceFolder(join(folder.path, "spm-scores"));
    const metadata = tokenizerFolderAsGguf(dir, { model: "llama" });
    const { tokenizer } = ggufModelTokenizer(metadata, "a.gguf");
    const tokens = items<string>(metadata, "tokenizer.ggml.tokens");
    // '▁"' and '":' compete for the quote in '▁":' (no piece holds all three): the higher score wins.
    const defaultScores = items<number>(metadata, "tokenizer.ggml.scores");
    const scores = tokens.map((token, id) => (token === '▁"' ? 10 : defaultScores[id]!));
    const { tokenizer: swapped } = ggufModelTokenizer(tokenizerFolderAsGguf(dir, { model: "llama", scores }), "b.gguf");
    const pieces = (t: ModelTokenizer) => t.encode('":').map((id) => tokens[id]);
    expect(pieces(tokenizer)).toEqual(["▁", '":']);
    expect(pieces(swapped)).toEqual(['▁"', ":"]);
  });

  test("add_space_prefix false: no ▁ before the text", () => {
    const dir = sentencePieceFolder(join(folder.path, "spm-no-prefix"));
    const metadata = tokenizerFolderAsGguf(dir, { model: "llama" });
    metadata.set("tokenizer.ggml.add_space_prefix", { type: "bool", value: false });
    const { tokenizer } = ggufModelTokenizer(metadata, "a.gguf");
    expect(tokenizer.prependsSpace).toBe(false);
    const tokens = items<string>(metadata, "tokenizer.ggml.tokens");
    expect(tokenizer.encode("the").map((id) => tokens[id])).toEqual(["the"]);
    expect(tokenizer.decode(tokenizer.encode(" the"))).toBe(" the");
  });
});

describe("special tokens and stop ids", () => {
  test("eot and eom ids stop generation with eos; control tokens are special; plain values work as the reader's typed ones", () => {
    const dir = byteLevelBpeFolder(join(folder.path, "stops"));
    const metadata = tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "gpt-2" });
    const tokens = [...items<string>(metadata, "tokenizer.ggml.tokens"), "<|eot_id|>", "<|eom_id|>", "<tool>"];
    const types = [...items<number>(metadata, "tokenizer.ggml.token_type"), 3, 3, 4];
    const plain = new Map<string, unknown>([...metadata].map(([key, value]) => [key, value.type === "array" ? value.value.items : value.value]));
    plain.set("tokenizer.ggml.tokens", tokens);
    plain.set("tokenizer.ggml.token_type", types);
    plain.set("tokenizer.ggml.eot_token_id", tokens.length - 3);
    plain.set("tokenizer.ggml.eom_token_id", BigInt(tokens.length - 2));
    const { tokenizer } = ggufModelTokenizer(plain, "stops.gguf");
    const eos = tokens.indexOf("</s>");
    expect(tokenizer.eosTokenIds).toEqual([eos, tokens.length - 3, tokens.length - 2]);
    expect(tokenizer.isSpecialToken(tokens.length - 3)).toBe(true);
    expect(tokenizer.isSpecialToken(tokens.length - 1)).toBe(false);
    expect(tokenizer.encode("a<|eot_id|>b<tool>")).toEqual([...tokenizer.encode("a"), tokens.length - 3, ...tokenizer.encode("b"), tokens.length - 1]);
    expect(tokenizer.decode([tokens.length - 3], { skipSpecialTokens: true })).toBe("");
    expect(tokenizer.decode([tokens.length - 1], { skipSpecialTokens: true })).toBe("<tool>");
  });

  test("no chat template: hasChatTemplate false and applyChatTemplate says so", () => {
    const dir = byteLevelBpeFolder(join(folder.path, "no-template"));
    const metadata = tokenizerFolderAsGguf(dir, { model: "gpt2", pre: "gpt-2" });
    metadata.delete("tokenizer.chat_template");
    const { tokenizer } = ggufModelTokenizer(metadata, "x.gguf");
    expect(tokenizer.hasChatTemplate).toBe(false);
    expect(() => tokenizer.applyChatTemplate([{ role: "user", content: "x" }])).toThrow(/no chat template/);
  });
});

describe("errors name the key", () => {
  const base = (): GgufMetadata => tokenizerFolderAsGguf(byteLevelBpeFolder(join(folder.path, `errors-${Math.random()}`)), { model: "gpt2", pre: "gpt-2" });
  const cases: [string, (metadata: GgufMetadata) => void, RegExp][] = [
    ["missing model", (m) => m.delete("tokenizer.ggml.model"), /tokenizer\.ggml\.model is missing/],
    ["unknown model", (m) => m.set("tokenizer.ggml.model", ggufString("t5")), /tokenizer\.ggml\.model is "t5"/],
    ["model not a string", (m) => m.set("tokenizer.ggml.model", ggufUint32(2)), /tokenizer\.ggml\.model must be a string/],
    ["unknown pre", (m) => m.set("tokenizer.ggml.pre", ggufString("tekken")), /tokenizer\.ggml\.pre is "tekken", a pre-tokenizer ctxr does not know/],
    ["missing tokens", (m) => m.delete("tokenizer.ggml.tokens"), /tokenizer\.ggml\.tokens is missing/],
    ["empty tokens", (m) => m.set("tokenizer.ggml.tokens", ggufArray("string", [])), /tokenizer\.ggml\.tokens is empty/],
    ["duplicate token", (m) => m.set("tokenizer.ggml.tokens", ggufArray("string", ["a", "b", "a"])), /tokenizer\.ggml\.tokens holds "a" twice \(ids 0 and 2\)/],
    ["token_type length", (m) => m.set("tokenizer.ggml.token_type", ggufArray("int32", [1, 1])), /tokenizer\.ggml\.token_type has 2 entries for \d+ tokens/],
    ["missing merges", (m) => m.delete("tokenizer.ggml.merges"), /tokenizer\.ggml\.merges is missing/],
    ["bad merge", (m) => m.set("tokenizer.ggml.merges", ggufArray("string", ["ab"])), /tokenizer\.ggml\.merges\[0\] is "ab"/],
    ["merge of unknown tokens", (m) => m.set("tokenizer.ggml.merges", ggufArray("string", ["zz qq"])), /tokenizer\.ggml\.merges\[0\] "zz qq": "zz" is not a token/],
    ["bos out of range", (m) => m.set("tokenizer.ggml.bos_token_id", ggufUint32(99999)), /tokenizer\.ggml\.bos_token_id is 99999, not a token id/],
    ["eot not an integer", (m) => m.set("tokenizer.ggml.eot_token_id", ggufString("x")), /tokenizer\.ggml\.eot_token_id must be an integer/],
    ["llama without scores", (m) => m.set("tokenizer.ggml.model", ggufString("llama")), /tokenizer\.ggml\.scores is missing/],
  ];
  for (const [name, edit, message] of cases) {
    test(name, () => {
      const metadata = base();
      edit(metadata);
      expect(() => ggufTokenizerFiles(metadata)).toThrow(message);
    });
  }

  test("a SentencePiece byte token that is not <0xNN>", () => {
    const metadata = tokenizerFolderAsGguf(sentencePieceFolder(join(folder.path, "bad-byte")), { model: "llama" });
    const types = [...items<number>(metadata, "tokenizer.ggml.token_type")];
    types[3 + 256] = 6;
    metadata.set("tokenizer.ggml.token_type", ggufArray("int32", types));
    expect(() => ggufTokenizerFiles(metadata)).toThrow(/tokenizer\.ggml\.tokens\[259\] is "▁", a byte token/);
  });
});
