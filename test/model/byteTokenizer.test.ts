import { describe, expect, test } from "bun:test";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import {
  BOS_TOKEN_ID,
  BYTE_TOKENIZER_VOCAB,
  EOS_TOKEN_ID,
  PAD_TOKEN_ID,
  byteToUnicode,
  byteTokenizerConfig,
  byteTokenizerJson,
} from "../../src/model/byteTokenizer.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { Xoshiro128 } from "../../src/model/normalRandom.ts";

/** The tokenizer as the server will load it: from the checkpoint's JSON files. */
function loadTokenizer(): { tokenizer: Tokenizer; config: Record<string, unknown> } {
  const files = new Map(
    tinyModelFiles({ ...TINY_MODEL_DEFAULTS }).map((file) => [file.name, new TextDecoder().decode(Buffer.concat([...file.chunks()]))]),
  );
  const json = JSON.parse(files.get("tokenizer.json")!);
  const config = JSON.parse(files.get("tokenizer_config.json")!);
  return { tokenizer: new Tokenizer(json, config), config };
}

const bytesOf = (text: string) => [...new TextEncoder().encode(text)];

describe("byte-level tokenizer in @huggingface/tokenizers", () => {
  const { tokenizer, config } = loadTokenizer();

  test("259 tokens: byte b is token b, then <s>, </s>, <pad>", () => {
    const vocab = tokenizer.get_vocab(true);
    expect(vocab.size).toBe(BYTE_TOKENIZER_VOCAB);
    const table = byteToUnicode();
    expect(new Set(table).size).toBe(256);
    for (let b = 0; b < 256; b++) expect(tokenizer.token_to_id(table[b]!)).toBe(b);
    expect(tokenizer.token_to_id("<s>")).toBe(BOS_TOKEN_ID);
    expect(tokenizer.token_to_id("</s>")).toBe(EOS_TOKEN_ID);
    expect(tokenizer.token_to_id("<pad>")).toBe(PAD_TOKEN_ID);
    expect([...tokenizer.get_added_tokens_decoder().keys()].sort()).toEqual([256, 257, 258]);
  });

  test("encoding is <s> then one token per UTF-8 byte; without special tokens just the bytes", () => {
    expect(tokenizer.encode("Hello, ctxr!").ids).toEqual([256, 72, 101, 108, 108, 111, 44, 32, 99, 116, 120, 114, 33]);
    expect(tokenizer.encode("héllo 日本 🎉", { add_special_tokens: false }).ids).toEqual(bytesOf("héllo 日本 🎉"));
    expect(tokenizer.encode("").ids).toEqual([256]);
  });

  test("special tokens in text become their ids; decoding can keep or skip them", () => {
    const ids = tokenizer.encode("a</s>b<pad>", { add_special_tokens: false }).ids;
    expect(ids).toEqual([97, EOS_TOKEN_ID, 98, PAD_TOKEN_ID]);
    expect(tokenizer.decode(ids)).toBe("a</s>b<pad>");
    expect(tokenizer.decode(ids, { skip_special_tokens: true })).toBe("ab");
  });

  test("text round-trips through encode and decode, whitespace, punctuation and Unicode included", () => {
    const texts = [
      "Hello, ctxr!",
      "  leading and trailing  ",
      "tabs\tand\nnew\r\nlines\n\n",
      "don't , . ? ! spaces before punctuation",
      "naïve café — “quotes” ½ ∑ 漢字 한국어 العربية 🎉👩‍👩‍👧",
      "\u0000\u0001\u007f control characters",
    ];
    const random = new Xoshiro128(9);
    for (let i = 0; i < 50; i++) {
      const codePoints = Array.from({ length: 1 + (random.nextUint32() % 40) }, () => {
        const kind = random.nextUint32() % 4;
        if (kind === 0) return 32 + (random.nextUint32() % 95);
        if (kind === 1) return 0xa0 + (random.nextUint32() % 0x700);
        if (kind === 2) return 0x4e00 + (random.nextUint32() % 0x5000);
        return 0x1f300 + (random.nextUint32() % 0x300);
      });
      texts.push(String.fromCodePoint(...codePoints));
    }
    for (const text of texts) {
      const ids = tokenizer.encode(text).ids;
      expect(ids).toEqual([BOS_TOKEN_ID, ...bytesOf(text)]);
      expect(tokenizer.decode(ids, { skip_special_tokens: true })).toBe(text);
    }
  });

  test("tokenizer_config.json names the special tokens and keeps spaces as they are", () => {
    expect(config).toMatchObject({
      bos_token: "<s>",
      eos_token: "</s>",
      pad_token: "<pad>",
      add_bos_token: true,
      add_eos_token: false,
      clean_up_tokenization_spaces: false,
      model_max_length: TINY_MODEL_DEFAULTS.maxPositions,
    });
    expect(byteTokenizerConfig(100).model_max_length).toBe(100);
    expect((byteTokenizerJson().model as { merges: unknown[] }).merges).toEqual([]);
  });

  test("the chat template renders Llama-style prompts with @huggingface/jinja", () => {
    const template = new Template(config.chat_template as string);
    const render = (messages: { role: string; content: string }[]) =>
      template.render({ messages, bos_token: "<s>", eos_token: "</s>", add_generation_prompt: true });
    expect(render([{ role: "user", content: "Hi" }])).toBe("<s>[INST] Hi [/INST]");
    expect(
      render([
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello" },
        { role: "user", content: "Bye" },
      ]),
    ).toBe("<s><<SYS>>\nBe brief.\n<</SYS>>\n\n[INST] Hi [/INST] Hello</s>[INST] Bye [/INST]");
    expect(() => render([{ role: "tool", content: "x" }])).toThrow("Only system, user and assistant roles are supported");
    // The rendered prompt tokenizes with its special tokens recognised (encode without adding another <s>).
    const ids = tokenizer.encode(render([{ role: "user", content: "Hi" }]), { add_special_tokens: false }).ids;
    expect(ids).toEqual([BOS_TOKEN_ID, ...bytesOf("[INST] Hi [/INST]")]);
  });
});
