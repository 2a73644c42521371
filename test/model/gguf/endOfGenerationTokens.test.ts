import { describe, expect, test } from "bun:test";
import { ggufArray } from "../../../src/model/gguf/ggufMetadata.ts";
import { plainValue } from "../../../src/model/gguf/ggufMetadataValues.ts";
import { endOfGenerationIds } from "../../../src/model/gguf/endOfGenerationTokens.ts";
import { ggufModelTokenizer } from "../../../src/model/gguf/ggufTokenizer.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { byteLevelBpeFolder } from "../../helpers/tokenizerFolders.ts";
import { tokenizerFolderAsGguf } from "../../helpers/ggufTokenizerMetadata.ts";
import { join } from "node:path";

describe("tokens that end generation by their text (llama.cpp's auto-detection)", () => {
  test("Phi-3's <|end|> and <|endoftext|>, ChatML's <|im_end|>, Llama 3's <|eot_id|>; not other specials", () => {
    expect(endOfGenerationIds(["a", "<|end|>", "<|user|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|assistant|>"])).toEqual([1, 3, 4, 5]);
  });

  test("o200k_harmony (<|return|> and <|call|>): <|end|> stays inside a turn", () => {
    expect(endOfGenerationIds(["<|end|>", "<|return|>", "<|call|>", "x"])).toEqual([1, 2]);
    expect(endOfGenerationIds(["<|end|>", "<|return|>"])).toEqual([0, 1]);
  });

  test("a GGUF vocabulary whose eos is <|endoftext|> also stops on <|end|> (Phi-3's turn end)", () => {
    const folder = tempFolder("ctxr-eog-");
    try {
      const metadata = tokenizerFolderAsGguf(byteLevelBpeFolder(join(folder.path, "bpe")), { model: "gpt2", pre: "gpt-2" });
      const tokens = plainValue(metadata.get("tokenizer.ggml.tokens")) as string[];
      const before = ggufModelTokenizer(metadata, "a.gguf").tokenizer.eosTokenIds;
      // A control token <|end|> after the vocabulary, as Phi-3's added tokens are.
      const added = tokens.length;
      metadata.set("tokenizer.ggml.tokens", ggufArray("string", [...tokens, "<|end|>"]));
      const types = metadata.has("tokenizer.ggml.token_type") ? (plainValue(metadata.get("tokenizer.ggml.token_type")) as number[]) : tokens.map(() => 1);
      metadata.set("tokenizer.ggml.token_type", ggufArray("int32", [...types, 3]));
      const after = ggufModelTokenizer(metadata, "b.gguf").tokenizer.eosTokenIds;
      expect(before).not.toContain(added);
      expect(after).toEqual([...before, added]);
    } finally {
      folder.cleanup();
    }
  });
});
