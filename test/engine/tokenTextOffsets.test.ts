import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { BOS_TOKEN_ID, EOS_TOKEN_ID } from "../../src/model/byteTokenizer.ts";
import { type ModelTokenizer, loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { TokenTextOffsets } from "../../src/engine/tokenTextOffsets.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { tempFolder } from "../helpers/cli.ts";

let folder: { path: string; cleanup(): void };
let tokenizer: ModelTokenizer;
beforeAll(async () => {
  folder = tempFolder("ctxr-text-offsets-");
  const dir = join(folder.path, "tiny");
  writeModelFolder(dir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
  tokenizer = await loadModelTokenizer(dir);
});
afterAll(() => folder.cleanup());

const bytesOf = (text: string) => [...new TextEncoder().encode(text)];

describe("TokenTextOffsets over a byte-level tokenizer", () => {
  test("special tokens left out of the text take no characters", () => {
    const offsets = new TokenTextOffsets(tokenizer, { skipSpecialTokens: true });
    expect(offsets.next([BOS_TOKEN_ID, ...bytesOf("Hi"), EOS_TOKEN_ID])).toEqual([0, 0, 1, 2]);
  });

  test("kept in the text, they count their characters", () => {
    const offsets = new TokenTextOffsets(tokenizer, { skipSpecialTokens: false });
    expect(offsets.next([BOS_TOKEN_ID, ...bytesOf("Hi")])).toEqual([0, 3, 4]);
  });

  test("the bytes of one character all begin where it does; a character outside the BMP counts once", () => {
    const offsets = new TokenTextOffsets(tokenizer, { skipSpecialTokens: true });
    expect(offsets.next(bytesOf("a日🎉b"))).toEqual([0, 1, 1, 1, 2, 2, 2, 2, 3]);
  });

  test("offsets go on across calls from `start`, and stop at `limit`", () => {
    const offsets = new TokenTextOffsets(tokenizer, { start: 5 });
    expect(offsets.next(bytesOf("ab"))).toEqual([5, 6]);
    expect(offsets.next(bytesOf("cd"))).toEqual([7, 8]);
    const limited = new TokenTextOffsets(tokenizer, { limit: 2 });
    expect(limited.next(bytesOf("abcd"))).toEqual([0, 1, 2, 2]);
  });
});
