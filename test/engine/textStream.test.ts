import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { EOS_TOKEN_ID } from "../../src/model/byteTokenizer.ts";
import { type ModelTokenizer, loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { Xoshiro128 } from "../../src/model/normalRandom.ts";
import { type StreamDecoder, TokenTextStream } from "../../src/engine/textStream.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { tempFolder } from "../helpers/cli.ts";

let folder: { path: string; cleanup(): void };
let tokenizer: ModelTokenizer;
beforeAll(async () => {
  folder = tempFolder("ctxr-text-stream-");
  const dir = join(folder.path, "tiny");
  writeModelFolder(dir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
  tokenizer = await loadModelTokenizer(dir);
});
afterAll(() => folder.cleanup());

const bytesOf = (text: string) => [...new TextEncoder().encode(text)];
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe("TokenTextStream over a byte-level tokenizer", () => {
  test("ASCII: each token's text as it comes", () => {
    const stream = new TokenTextStream(tokenizer);
    expect(bytesOf("Hi there").map((id) => stream.push(id))).toEqual(["H", "i", " ", "t", "h", "e", "r", "e"]);
    expect(stream.pending).toBe(false);
    expect(stream.flush()).toBe("");
  });

  test("a multi-byte character is held until its last byte", () => {
    const stream = new TokenTextStream(tokenizer);
    expect(bytesOf("a日🎉b").map((id) => stream.push(id))).toEqual(["a", "", "", "日", "", "", "", "🎉", "b"]);
  });

  test("flush releases an incomplete character as U+FFFD", () => {
    const stream = new TokenTextStream(tokenizer);
    expect(stream.push(0x61)).toBe("a");
    expect(stream.push(0xe6)).toBe("");
    expect(stream.push(0x97)).toBe("");
    expect(stream.pending).toBe(true);
    expect(stream.flush()).toBe("\uFFFD");
    expect(stream.flush()).toBe("");
    // The stream goes on after a flush.
    expect(stream.push(0x62)).toBe("b");
  });

  test("invalid bytes become U+FFFD once a later token settles them", () => {
    const stream = new TokenTextStream(tokenizer);
    const ids = [0x80, 0xe6, 0x97, 0x41, 0xe6, 0x97, 0xa5];
    const pieces = ids.map((id) => stream.push(id));
    expect(pieces).toEqual(["", "", "", "\uFFFD\uFFFDA", "", "", "日"]);
    expect(pieces.join("")).toBe(tokenizer.decode(ids));
  });

  test("special tokens: kept as text, or skipped", () => {
    const kept = new TokenTextStream(tokenizer);
    expect([0x61, EOS_TOKEN_ID, 0x62].map((id) => kept.push(id))).toEqual(["a", "</s>", "b"]);
    const skipped = new TokenTextStream(tokenizer, { skipSpecialTokens: true });
    expect([0x61, EOS_TOKEN_ID, 0x62].map((id) => skipped.push(id))).toEqual(["a", "", "b"]);
    expect(skipped.flush()).toBe("");
  });

  test("random byte streams: the pieces join to the decode of all ids, never split a character", () => {
    const random = new Xoshiro128(21);
    const pick = (n: number) => random.nextUint32() % n;
    for (let round = 0; round < 200; round++) {
      const ids: number[] = [];
      const length = 1 + pick(40);
      while (ids.length < length) {
        const kind = pick(10);
        if (kind === 0) ids.push(pick(256)); // any byte, valid or not
        else if (kind === 1) ids.push(EOS_TOKEN_ID);
        else if (kind < 5) ids.push(...bytesOf(String.fromCodePoint(32 + pick(95))));
        else if (kind < 7) ids.push(...bytesOf(String.fromCodePoint(0xa0 + pick(0x700))));
        else if (kind < 9) ids.push(...bytesOf(String.fromCodePoint(0x4e00 + pick(0x5000))));
        else ids.push(...bytesOf(String.fromCodePoint(0x1f300 + pick(0x300))));
      }
      for (const skipSpecialTokens of [false, true]) {
        const stream = new TokenTextStream(tokenizer, { skipSpecialTokens });
        const pieces = ids.map((id) => stream.push(id));
        pieces.push(stream.flush());
        expect(pieces.join("")).toBe(tokenizer.decode(ids, { skipSpecialTokens }));
        for (const piece of pieces) expect(LONE_SURROGATE.test(piece)).toBe(false);
        expect(stream.pushAll([])).toBe("");
      }
    }
  });

  test("pushAll returns what the ids complete together", () => {
    const stream = new TokenTextStream(tokenizer);
    expect(stream.pushAll(bytesOf("日本").slice(0, 4))).toBe("日");
    expect(stream.pushAll(bytesOf("日本").slice(4))).toBe("本");
  });
});

describe("TokenTextStream over a decoder that reads tokens in context", () => {
  // SentencePiece-style: "▁" marks a space and a text's leading space is dropped.
  const pieces = ["▁Hello", "▁world", "!", "▁again", "<0xE6>", "<0x97>", "<0xA5>"];
  const decoder: StreamDecoder = {
    decode(ids) {
      const bytes: number[] = [];
      for (const id of ids) {
        const piece = pieces[id]!;
        const byte = /^<0x([0-9A-F]{2})>$/.exec(piece);
        if (byte) bytes.push(parseInt(byte[1]!, 16));
        else bytes.push(...bytesOf(piece.replaceAll("▁", " ")));
      }
      return new TextDecoder().decode(new Uint8Array(bytes)).replace(/^ /, "");
    },
  };

  test("pieces keep the spaces that a lone token's decode would drop", () => {
    const stream = new TokenTextStream(decoder);
    const ids = [0, 1, 2, 3, 4, 5, 6, 1];
    const out = ids.map((id) => stream.push(id));
    expect(out).toEqual(["Hello", " world", "!", " again", "", "", "日", " world"]);
    expect(out.join("")).toBe(decoder.decode(ids));
  });

  test("context ids from the prompt: the first word keeps its space", () => {
    const stream = new TokenTextStream(decoder, { contextIds: [3, 2, 0] });
    expect([1, 2].map((id) => stream.push(id))).toEqual([" world", "!"]);
  });
});
