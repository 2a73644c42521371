import { describe, expect, test } from "bun:test";
import { sentencePieceMerges } from "../../../src/model/gguf/sentencePieceMerges.ts";

describe("sentencePieceMerges: BPE merges that tokenize as llama.cpp's SPM tokenizer", () => {
  test("every cut of a piece into two pieces, ranked by the whole piece's score", () => {
    const tokens = ["a", "b", "c", "ab", "bc", "abc"];
    const scores = [-10, -11, -12, -2, -1, -3];
    expect(sentencePieceMerges({ tokens, scores, mergeable: () => true })).toEqual([
      ["b", "c"],
      ["a", "b"],
      ["a", "bc"],
      ["ab", "c"],
    ]);
  });

  test("a side may be a single character that is no piece (llama.cpp joins any symbols whose text is a piece)", () => {
    const tokens = ["m", "e", "me", "Ωm", "Ωme", "xyz"];
    const scores = [-5, -6, -1, -2, -3, -4];
    // "Ωm" = Ω + m though Ω is no piece; "xyz" has no cut into symbols ("xy", "yz" are no pieces).
    expect(sentencePieceMerges({ tokens, scores, mergeable: () => true })).toEqual([
      ["m", "e"],
      ["Ω", "m"],
      ["Ω", "me"],
      ["Ωm", "e"],
    ]);
  });

  test("pieces that are not mergeable (control, byte) are never made by a merge", () => {
    const tokens = ["<", "s", ">", "<s", "<s>"];
    const scores = [-1, -1, -1, -2, 0];
    expect(sentencePieceMerges({ tokens, scores, mergeable: (id) => id !== 4 })).toEqual([["<", "s"]]);
  });
});
