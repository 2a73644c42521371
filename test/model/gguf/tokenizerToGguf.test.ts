import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { metadataArray, metadataBool, metadataNumber, metadataString } from "../../../src/model/gguf/ggufMetadata.ts";
import { TOKEN_TYPE, tokenizerToGguf } from "../../../src/model/gguf/tokenizerToGguf.ts";
import { byteTokenizerConfig, byteTokenizerJson } from "../../../src/model/byteTokenizer.ts";
import { byteLevelBpeFolder, sentencePieceFolder } from "../../helpers/tokenizerFolders.ts";

const scratch = mkdtempSync(join(tmpdir(), "ctxr-tok-gguf-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const readFolder = (dir: string) => ({
  tokenizerJson: JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")),
});

describe("tokenizer metadata for GGUF", () => {
  test("byte-level BPE: gpt2 model, merges as strings, control specials, padding rows unused", () => {
    const { tokenizerJson, tokenizerConfig } = readFolder(byteLevelBpeFolder(join(scratch, "bpe")));
    const m = tokenizerToGguf({ tokenizerJson, tokenizerConfig, modelConfig: { vocab_size: 400 }, chatTemplateFile: "{{ messages }}" });
    expect(metadataString(m, "tokenizer.ggml.model")).toBe("gpt2");
    expect(metadataString(m, "tokenizer.ggml.pre")).toBe("gpt-2");
    const tokens = metadataArray(m, "tokenizer.ggml.tokens").items as string[];
    const types = metadataArray(m, "tokenizer.ggml.token_type").items as number[];
    expect(tokens).toHaveLength(400);
    expect(tokens[399]).toBe("[PAD399]");
    expect(types[399]).toBe(TOKEN_TYPE.unused);
    const bos = metadataNumber(m, "tokenizer.ggml.bos_token_id");
    expect(tokens[bos]).toBe("<s>");
    expect(types[bos]).toBe(TOKEN_TYPE.control);
    expect(types[65]).toBe(TOKEN_TYPE.normal);
    const merges = metadataArray(m, "tokenizer.ggml.merges").items as string[];
    expect(merges.length).toBe((tokenizerJson.model.merges as unknown[]).length);
    for (const merge of merges) expect(merge.split(" ")).toHaveLength(2);
    expect(metadataBool(m, "tokenizer.ggml.add_bos_token")).toBe(false);
    expect(metadataString(m, "tokenizer.chat_template")).toBe("{{ messages }}");
    expect(m.has("tokenizer.ggml.scores")).toBe(false);
  });

  test("SentencePiece-style BPE: llama model, byte and unknown types, scores follow merge ranks", () => {
    const { tokenizerJson, tokenizerConfig } = readFolder(sentencePieceFolder(join(scratch, "spm")));
    const m = tokenizerToGguf({ tokenizerJson, tokenizerConfig, modelConfig: {}, chatTemplateFile: null });
    expect(metadataString(m, "tokenizer.ggml.model")).toBe("llama");
    expect(m.has("tokenizer.ggml.merges")).toBe(false);
    const tokens = metadataArray(m, "tokenizer.ggml.tokens").items as string[];
    const types = metadataArray(m, "tokenizer.ggml.token_type").items as number[];
    const scores = metadataArray(m, "tokenizer.ggml.scores").items as number[];
    expect(types[0]).toBe(TOKEN_TYPE.unknown);
    expect(types[1]).toBe(TOKEN_TYPE.control);
    expect(types[3 + 0x41]).toBe(TOKEN_TYPE.byte);
    expect(metadataNumber(m, "tokenizer.ggml.unknown_token_id")).toBe(0);
    const score = (text: string) => scores[tokens.indexOf(text)]!;
    expect(score("▁t")).toBeGreaterThan(score("th")); // "▁ t" is merge 0, "t h" merge 1
    expect(score("th")).toBeGreaterThan(score("10"));
    expect(score("é")).toBeLessThan(score("10")); // not a merge result: below every merge
    expect(m.has("tokenizer.chat_template")).toBe(false);
  });

  test("the tiny model's tokenizer: ids from tokenizer_config, template from the config", () => {
    const m = tokenizerToGguf({ tokenizerJson: byteTokenizerJson(), tokenizerConfig: byteTokenizerConfig(100), modelConfig: { vocab_size: 259, pad_token_id: 258 }, chatTemplateFile: null });
    expect(metadataNumber(m, "tokenizer.ggml.eos_token_id")).toBe(257);
    expect(metadataNumber(m, "tokenizer.ggml.padding_token_id")).toBe(258);
    expect(metadataBool(m, "tokenizer.ggml.add_bos_token")).toBe(true);
    expect(metadataString(m, "tokenizer.chat_template")).toContain("[INST]");
  });

  test("the pre-tokenizer of Llama 3 and Qwen2 is told by their Split regex", () => {
    const split = (digits: string) => ({
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|${digits}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+` }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    });
    const pre = (digits: string) => {
      const tokenizerJson = { pre_tokenizer: split(digits), model: { type: "BPE", vocab: { a: 0 }, merges: [] } };
      return metadataString(tokenizerToGguf({ tokenizerJson, tokenizerConfig: null, modelConfig: {}, chatTemplateFile: null }), "tokenizer.ggml.pre");
    };
    expect(pre("\\p{N}{1,3}")).toBe("llama-bpe");
    expect(pre("\\p{N}")).toBe("qwen2");
  });

  test("unsupported tokenizers are refused with the reason", () => {
    const base = { tokenizerConfig: null, modelConfig: {}, chatTemplateFile: null };
    expect(() => tokenizerToGguf({ ...base, tokenizerJson: { model: { type: "Unigram", vocab: [] } } })).toThrow('model type "Unigram" is not supported');
    expect(() => tokenizerToGguf({ ...base, tokenizerJson: { model: { type: "BPE", vocab: { a: 0 }, merges: [] } } })).toThrow("neither byte-level BPE");
    expect(() => tokenizerToGguf({ ...base, tokenizerJson: { pre_tokenizer: { type: "ByteLevel" }, model: { type: "BPE", vocab: { a: -1 } } } })).toThrow('vocab entry "a" has a bad id -1');
  });
});
