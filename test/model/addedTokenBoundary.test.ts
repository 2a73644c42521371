import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { AddedTokenBoundary, type AddedTokenFacts } from "../../src/model/addedTokenBoundary.ts";
import { byteTokenizerConfig, byteTokenizerJson } from "../../src/model/byteTokenizer.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { ggufModelTokenizer } from "../../src/model/gguf/ggufTokenizer.ts";
import { modelTokenizerFromJson, type ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { tempFolder } from "../helpers/cli.ts";
import { writeTinyGemma3 } from "../helpers/gemma3TinyModel.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

const token = (content: string, facts: Partial<AddedTokenFacts> = {}): AddedTokenFacts => ({ content, lstrip: false, normalized: false, ...facts });

describe("AddedTokenBoundary's rules", () => {
  const boundary = new AddedTokenBoundary([token("<end_of_turn>"), token("<start_of_turn>"), token("<eot>", { lstrip: true }), token("\n\n"), token("<norm>", { normalized: true })], true);
  const text = "hi<end_of_turn>\n<start_of_turn>user\nyo <eot>\n\nx<norm>";

  test("a cut in front of an added token that is matched whole", () => {
    expect(boundary.splitsAt(text, text.indexOf("<end_of_turn>"))).toBe(true);
    expect(boundary.splitsAt(text, text.indexOf("<start_of_turn>"))).toBe(true);
  });

  test("no cut elsewhere: inside a token, between plain characters, at either end", () => {
    expect(boundary.splitsAt(text, text.indexOf("<end_of_turn>") + 1)).toBe(false);
    expect(boundary.splitsAt(text, 1)).toBe(false);
    expect(boundary.splitsAt(text, 0)).toBe(false);
    expect(boundary.splitsAt(text, text.length)).toBe(false);
    expect(boundary.splitsAt(text, 2.5)).toBe(false);
  });

  test("no cut in front of a token that strips on its left, starts with whitespace, or is matched after normalization", () => {
    expect(boundary.splitsAt(text, text.indexOf("<eot>"))).toBe(false);
    expect(boundary.splitsAt(text, text.indexOf("\n\n"))).toBe(false);
    expect(boundary.splitsAt(text, text.indexOf("<norm>"))).toBe(false);
    // Without a normalizer the tokenizer matches "normalized" tokens on the raw text too.
    expect(new AddedTokenBoundary([token("<norm>", { normalized: true })], false).splitsAt("x<norm>", 1)).toBe(true);
  });

  test("no cut where an added token occurs across it", () => {
    const straddled = new AddedTokenBoundary([token("</s>"), token("a</s")], false);
    expect(straddled.splitsAt("xa</s>", 2)).toBe(false);
    expect(straddled.splitsAt("xb</s>", 2)).toBe(true);
  });

  test("the token the scan takes is the longest one at the cut", () => {
    const nested = new AddedTokenBoundary([token("<a>"), token("<a>\n", { lstrip: true })], false);
    expect(nested.splitsAt("x<a>y", 1)).toBe(true);
    expect(nested.splitsAt("x<a>\ny", 1)).toBe(false);
  });
});

/** Texts of words, spaces, newlines, turn markers and pieces of them, like a chat's. */
function chatLikeTexts(count: number, markers: readonly string[], seed: number): string[] {
  let state = seed;
  const next = (n: number) => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state % n;
  };
  const pieces = ["the", " the", "he", "at", " s", "on", "in", "er", "é", "日本", " ", "  ", "\n", "\n\n", ".", ",", "<", ">", "_", "turn", "user", "model", ...markers, ...markers.map((m) => m.slice(0, 4))];
  return Array.from({ length: count }, () => Array.from({ length: 6 + next(20) }, () => pieces[next(pieces.length)]!).join(""));
}

/** Every allowed cut of every text tokenizes apart as it does whole; some refused cuts do not (so the check can fail). */
function checkCuts(tokenizer: ModelTokenizer, texts: readonly string[]): { allowed: number; refusedDiffering: number } {
  let allowed = 0;
  let refusedDiffering = 0;
  for (const text of texts) {
    const whole = tokenizer.encode(text);
    for (let at = 1; at < text.length; at++) {
      const apart = [...tokenizer.encode(text.slice(0, at)), ...tokenizer.encode(text.slice(at))];
      const same = apart.length === whole.length && apart.every((id, i) => id === whole[i]);
      if (tokenizer.splitsAt(text, at)) {
        allowed++;
        if (!same) throw new Error(`cut at ${at} of ${JSON.stringify(text)} allowed, but ${JSON.stringify(apart)} != ${JSON.stringify(whole)}`);
      } else if (!same) refusedDiffering++;
    }
  }
  return { allowed, refusedDiffering };
}

describe("allowed cuts tokenize apart as the whole text does, on real tokenizers", () => {
  let folder: { path: string; cleanup(): void };
  beforeAll(() => {
    folder = tempFolder("ctxr-added-token-boundary-");
  });
  afterAll(() => folder.cleanup());

  test("llama.cpp gguf-py's byte-level BPE file with Gemma 3's turn markers as control tokens", () => {
    const file = writeRandomGguf("gemma3", join(folder.path, "bpe.gguf"), { layers: 1, hidden: 32, heads: 2, kvHeads: 1, ffn: 32, extraArgs: ["--special", "<start_of_turn>", "--special", "<end_of_turn>"] });
    const { tokenizer } = ggufModelTokenizer(readGgufFile(file).metadata, file);
    const { allowed, refusedDiffering } = checkCuts(tokenizer, chatLikeTexts(60, ["<start_of_turn>", "<end_of_turn>", "<|im_end|>"], 7));
    expect(allowed).toBeGreaterThan(50);
    expect(refusedDiffering).toBeGreaterThan(50);
  });

  test("a SentencePiece (llama) GGUF vocabulary with Gemma's special tokens", () => {
    const model = writeTinyGemma3(join(folder.path, "spm"), { layers: 1, hidden: 16, heads: 2, kvHeads: 1, headDim: 8, ffn: 16 });
    const { tokenizer } = ggufModelTokenizer(readGgufFile(model.gguf).metadata, model.gguf);
    const { allowed, refusedDiffering } = checkCuts(tokenizer, chatLikeTexts(60, ["<start_of_turn>", "<end_of_turn>", "<bos>"], 11));
    expect(allowed).toBeGreaterThan(50);
    expect(refusedDiffering).toBeGreaterThan(50);
  });

  test("tokenizer.json's lstrip and an added token across the cut are refused where they change the ids", () => {
    const json = byteTokenizerJson();
    const added = json.added_tokens as Record<string, unknown>[];
    added[1] = { ...added[1], lstrip: true }; // </s>
    added.push({ id: 259, content: "a<s", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
    const tokenizer = modelTokenizerFromJson({
      dir: "memory",
      tokenizerJson: json,
      config: byteTokenizerConfig(512),
      generationConfig: null,
      chatTemplate: null,
      names: { tokenizer: "tokenizer.json", config: "tokenizer_config.json", generation: "generation_config.json" },
    });
    // Each refused cut would be wrong: </s> takes the space before it; "a<s" is taken across the cut.
    for (const [text, at] of [["x </s>", 2], ["xa<s>", 2]] as const) {
      expect(tokenizer.splitsAt(text, at)).toBe(false);
      expect([...tokenizer.encode(text.slice(0, at)), ...tokenizer.encode(text.slice(at))]).not.toEqual(tokenizer.encode(text));
    }
    expect(tokenizer.splitsAt("x<s>", 1)).toBe(true);
    const { allowed } = checkCuts(tokenizer, chatLikeTexts(40, ["<s>", "</s>", "a<s"], 3));
    expect(allowed).toBeGreaterThan(20);
  });
});
