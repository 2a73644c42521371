/**
 * PieceMemoEncoder (the proxy's prompt tokenization for byte-level BPE tokenizers) gives exactly
 * the ids of @huggingface/tokenizers' encode: on the repository's byte-level model, on a
 * byte-level BPE with merges, for documents, rendered chats and random texts of letters, digits,
 * whitespace runs, contractions, other scripts, emoji and special tokens; other tokenizers get null.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { byteToUnicode, byteTokenizerConfig, byteTokenizerJson } from "../../src/model/byteTokenizer.ts";
import { loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { PieceMemoEncoder } from "../../src/proxy/pieceMemoEncoder.ts";
import { mulberry32 } from "../../src/quality/qualityRandom.ts";
import { documentText } from "../../scripts/benchProxyUpstream.ts";

const folders: string[] = [];
afterAll(() => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

function tokenizerFolder(json: Record<string, unknown>): string {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-pieces-"));
  folders.push(folder);
  writeFileSync(join(folder, "tokenizer.json"), JSON.stringify(json));
  writeFileSync(join(folder, "tokenizer_config.json"), JSON.stringify(byteTokenizerConfig(4096)));
  return folder;
}

/** The byte tokenizer plus merges that build these words left to right (Ġ: a leading space). */
function bpeWithMerges(words: string[]): Record<string, unknown> {
  const json = byteTokenizerJson() as { model: { vocab: Record<string, number>; merges: string[] } };
  const space = byteToUnicode()[32]!;
  let next = 259;
  for (const word of words.map((w) => w.replace(/^ /, space))) {
    const chars = [...word];
    let token = chars[0]!;
    for (const char of chars.slice(1)) {
      const merged = token + char;
      if (json.model.vocab[merged] === undefined) {
        json.model.merges.push(`${token} ${char}`);
        json.model.vocab[merged] = next++;
      }
      token = merged;
    }
  }
  return json;
}

const ALPHABET = ["a", "e", "t", "h", "n", "s", "X", "1", "42", " ", "  ", "\n", "\n\n", "\t", "'s", "'ll", "'", "-", ".", "<", ">", "é", "日本", "🙂", "١٢", "<s>", "</s>", "<pad>", " the", " and", "ing"];

function randomTexts(count: number): string[] {
  const next = mulberry32(7);
  return Array.from({ length: count }, () => Array.from({ length: 1 + (next() % 40) }, () => ALPHABET[next() % ALPHABET.length]).join(""));
}

async function expectSameIds(dir: string): Promise<void> {
  const tokenizer = await loadModelTokenizer(dir);
  const pieces = await PieceMemoEncoder.load(dir, tokenizer.encode);
  expect(pieces).not.toBeNull();
  const chat = tokenizer.applyChatTemplate([
    { role: "system", content: "Be brief." },
    { role: "user", content: `<document id="1">${documentText(1, 600)}</document>\n\nWhat's in it?` },
    { role: "assistant", content: " It's about   rivers.\n" },
    { role: "user", content: "And the 2nd one's?" },
  ]);
  const texts = [chat, documentText(2), documentText("x", 300), "", " ", "  end  ", ...randomTexts(2000)];
  // Twice: the second pass reads the remembered pieces.
  for (let pass = 0; pass < 2; pass++) {
    for (const text of texts) expect({ text, ids: pieces!.encode(text) }).toEqual({ text, ids: tokenizer.encode(text) });
  }
}

describe("PieceMemoEncoder", () => {
  test("the repository's byte-level model (models/quality): the library's ids", async () => {
    await expectSameIds(resolve(import.meta.dirname, "../../models/quality"));
  });

  test("a byte-level BPE with merges: the library's ids", async () => {
    const dir = tokenizerFolder(bpeWithMerges([" the", " and", "ing", " document", "Document", " river", "'s", " 1", "42", "th", "he", "in", " a", "en"]));
    const tokenizer = await loadModelTokenizer(dir);
    expect(tokenizer.encode(" the thing").length).toBeLessThan(" the thing".length);
    await expectSameIds(dir);
  });

  test("whitespace merges and spans (the same span last and followed, edited lines): the library's ids", async () => {
    // Ġ: a space, Ċ: a newline. GPT-2's `\s+(?!\S)` splits "  \n" before a letter, not at the end.
    const dir = tokenizerFolder(bpeWithMerges(["ĠĠ", "ĠĠĊ", "ĊĊ", "ĠĊ", "ĠĠĠ", " the", "ing"]));
    const tokenizer = await loadModelTokenizer(dir);
    expect(tokenizer.encode("a  \n").length).toBe(2);
    expect(tokenizer.encode("a  \nb").length).toBe(4);
    const pieces = await PieceMemoEncoder.load(dir, tokenizer.encode);
    const lines = documentText(5, 900).split(". ");
    const texts = [
      "a  \n", "a  \nb", "a  \n", "x\na  \n\n", "x\na  \n\nb", "x\na  \n\n", "a  \n<s>b", "a \n \nb\n",
      lines.join(".\n"), lines.join(".  \n"), lines.join(". \n\n"), lines.join(".\r\n"), lines.join(".\n<s>"),
      lines.map((l, i) => (i === 2 ? `${l} edited` : l)).join(".\n"), [...lines.slice(0, 3), "inserted", ...lines.slice(3)].join(".\n"),
    ];
    for (let pass = 0; pass < 2; pass++) {
      for (const text of texts) expect({ text, ids: pieces!.encode(text) }).toEqual({ text, ids: tokenizer.encode(text) });
    }
  });

  test("tokenizers of other kinds get null", async () => {
    const normalized = { ...byteTokenizerJson(), normalizer: { type: "NFKC" } };
    const prefixed = { ...byteTokenizerJson(), pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, use_regex: true } };
    const stripped = byteTokenizerJson() as { added_tokens: { lstrip: boolean }[] };
    stripped.added_tokens[0]!.lstrip = true;
    for (const json of [normalized, prefixed, stripped]) expect(await PieceMemoEncoder.load(tokenizerFolder(json), () => [])).toBeNull();
  });
});
