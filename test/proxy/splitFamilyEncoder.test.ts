/**
 * PieceMemoEncoder on the Llama 3 / Qwen2 family (a Split regex then ByteLevel without regex;
 * Qwen2 with an NFC normalizer) and its span memo: built tokenizer.json files with merges for
 * whitespace, newline, digit and contraction runs (so a wrong split gives other ids), compared
 * with @huggingface/tokenizers on random unicode, code, numbers, whitespace and CRLF runs, added
 * tokens, and texts repeated with edits (span memo hits and misses), with a large and a tiny memo.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { byteToUnicode, byteTokenizerConfig, byteTokenizerJson } from "../../src/model/byteTokenizer.ts";
import { loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { LLAMA3_PATTERN, QWEN2_PATTERN } from "../../src/proxy/knownSplitPatterns.ts";
import { PieceMemoEncoder } from "../../src/proxy/pieceMemoEncoder.ts";
import { mulberry32 } from "../../src/quality/qualityRandom.ts";
import { documentText } from "../../scripts/benchProxyUpstream.ts";

// Property checks against a reference (thousands of encodings or masks): seconds on a loaded machine; not timed tests.
setDefaultTimeout(60_000);

const folders: string[] = [];
afterAll(() => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

const ADDED = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"];
/** Merged tokens: whitespace and newline runs, digits, contractions, code, words. */
const WORDS = [" the", " and", "ing", "  ", "   ", "    ", "\n\n", "\n\n\n", " \n", "  \n", "\r\n", "\r\n\r\n", " \r\n", "\t\t", "\t\n", "123", "12", "99", "'s", "'S", "'ll", "'re", " {", "});", "});\n", ");\n\n", " =", " =>", "é", "日本", "ab", "abc", "ſ", "\u00a0\u00a0", ".\n", "!\n\n"];

/** The byte tokenizer with merges that build WORDS left to right (from their UTF-8 bytes), the family's config and added tokens. */
function familyJson(pattern: string, normalizer: unknown): Record<string, unknown> {
  const json = byteTokenizerJson() as any;
  const bytes = byteToUnicode();
  let next = 259;
  for (const word of WORDS) {
    const chars = [...new TextEncoder().encode(word)].map((b) => bytes[b]!);
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
  for (const content of ADDED) json.added_tokens.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  json.normalizer = normalizer;
  json.model.ignore_merges = true;
  json.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  return json;
}

function tokenizerFolder(json: Record<string, unknown>): string {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-split-"));
  folders.push(folder);
  writeFileSync(join(folder, "tokenizer.json"), JSON.stringify(json));
  writeFileSync(join(folder, "tokenizer_config.json"), JSON.stringify(byteTokenizerConfig(4096)));
  return folder;
}

const ALPHABET = [
  "a", "b", "abc", "X", "the", " the", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "  \n", "\n ", "\u00a0", "\u0085", "\u3000", "\u2028", "\ufeff",
  "1", "42", "12345", "٣٤", "'s", "'S", "'LL", "'re", "'", "ſ", "K", "-", ".", "!", "{", "});", " =>", "<", ">", "|", "é", "e\u0301", "\u0301", "A\u030a", "\u212b", "\u1100\u1161",
  "日本", "🙂", "\ud83d", "Ω", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|begin_of_text|>", "<|eot", "<s>",
];

function randomTexts(seed: number, count: number, maxParts = 40): string[] {
  const next = mulberry32(seed);
  return Array.from({ length: count }, () => Array.from({ length: 1 + (next() % maxParts) }, () => ALPHABET[next() % ALPHABET.length]).join(""));
}

const CODE = `function add(a, b) {\n  return a + b;\n}\n\nconst x = add(1, 22);  \nconsole.log(x);\r\n\tif (x > 100) {\n\t\tthrow new Error("it's too big!");\n\t}\n`;

/** A document of lines and its variants: a changed word, an inserted and a deleted line, trailing whitespace, CRLF, added tokens at line starts. */
function editedTexts(): string[] {
  const lines = documentText(3, 1200).split(" ").reduce<string[]>((acc, word, i) => (i % 9 === 0 ? [...acc, word] : [...acc.slice(0, -1), `${acc.at(-1)} ${word}`]), []);
  const base = lines.join("\n");
  const variants = [
    base,
    lines.map((l, i) => (i === 3 ? l.replace(/\w+/, "CHANGED") : l)).join("\n"),
    [...lines.slice(0, 5), "an inserted line, with 12345 numbers", ...lines.slice(5)].join("\n"),
    [...lines.slice(0, 2), ...lines.slice(3)].join("\n"),
    lines.join("  \n"),
    lines.join(" \n\n"),
    lines.join("\r\n"),
    lines.join("\n<|eot_id|>"),
    `${lines.join("\n")}\n`,
    `${lines.join("\n")}\n  `,
    `<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n${base}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n`,
    CODE,
    CODE.replace("22", "23"),
    CODE.replaceAll("\n", "\r\n"),
  ];
  // The same spans as the last span and followed by a boundary, both ways round.
  // More spans than one concat call takes.
  const manyLines = Array.from({ length: 9000 }, (_, i) => `line ${i}`).join("\n");
  return [...variants, manyLines, "abc  \n", "abc  \nb", "abc  \n", "x\nabc  \n\n", "x\nabc  \n\nb", "x\nabc  \n\n"];
}

async function expectLibraryIds(dir: string, spanMemoBytes?: number): Promise<void> {
  const tokenizer = await loadModelTokenizer(dir);
  const pieces = await PieceMemoEncoder.load(dir, tokenizer.encode, spanMemoBytes === undefined ? {} : { spanMemoBytes });
  expect(pieces).not.toBeNull();
  const texts = [...editedTexts(), "", " ", "\n", "\n\n", ...randomTexts(11, 1500), ...randomTexts(12, 100, 400)];
  // Twice: the second pass reads remembered spans (or, with a tiny memo, mostly remembered pieces).
  for (let pass = 0; pass < 2; pass++) {
    for (const text of texts) expect({ text, ids: pieces!.encode(text) }).toEqual({ text, ids: tokenizer.encode(text) });
  }
}

describe("PieceMemoEncoder, Llama 3 / Qwen2 family", () => {
  test("the merges make splits matter (a wrong split would change ids)", async () => {
    const tokenizer = await loadModelTokenizer(tokenizerFolder(familyJson(LLAMA3_PATTERN, null)));
    expect(tokenizer.encode("  \n").length).toBe(1);
    expect(tokenizer.encode("12399").length).toBe(2);
    expect(tokenizer.encode("\r\n\r\n").length).toBe(1);
  });

  test("Llama 3's pattern: the library's ids", async () => {
    await expectLibraryIds(tokenizerFolder(familyJson(LLAMA3_PATTERN, null)));
  });

  test("Qwen2's pattern with NFC: the library's ids", async () => {
    await expectLibraryIds(tokenizerFolder(familyJson(QWEN2_PATTERN, { type: "NFC" })));
  });

  test("a span memo of a few kB (generations turn over) and none: the library's ids", async () => {
    const dir = tokenizerFolder(familyJson(LLAMA3_PATTERN, null));
    await expectLibraryIds(dir, 4096);
    await expectLibraryIds(dir, 0);
  });

  test("a remembered span costs no library call; an edited line costs only its own pieces", async () => {
    const dir = tokenizerFolder(familyJson(LLAMA3_PATTERN, null));
    const tokenizer = await loadModelTokenizer(dir);
    const calls: string[] = [];
    const pieces = (await PieceMemoEncoder.load(dir, (text) => (calls.push(text), tokenizer.encode(text))))!;
    const text = "first line\nsecond line\nthird line";
    pieces.encode(text);
    calls.length = 0;
    expect(pieces.encode(text)).toEqual(tokenizer.encode(text));
    expect(calls).toEqual([]);
    expect(pieces.encode("first line\nsecond lime\nthird line")).toEqual(tokenizer.encode("first line\nsecond lime\nthird line"));
    expect(calls).toEqual([" lime"]);
  });

  test("other patterns, normalizers and layouts get null", async () => {
    const variants: Record<string, unknown>[] = [
      familyJson(LLAMA3_PATTERN.replace("\\p{N}{1,3}", "\\p{N}{1,2}"), null),
      familyJson(String.raw`\w+|[^\w\s]+|\s+`, null),
      familyJson(LLAMA3_PATTERN, { type: "NFKC" }),
      familyJson(LLAMA3_PATTERN, { type: "Sequence", normalizers: [] }),
    ];
    const isolatedNot = familyJson(LLAMA3_PATTERN, null) as any;
    isolatedNot.pre_tokenizer.pretokenizers[0].behavior = "Removed";
    const prefixed = familyJson(LLAMA3_PATTERN, null) as any;
    prefixed.pre_tokenizer.pretokenizers[1].add_prefix_space = true;
    const extra = familyJson(LLAMA3_PATTERN, null) as any;
    extra.pre_tokenizer.pretokenizers.push({ type: "Digits", individual_digits: true });
    const normalizedAdded = familyJson(QWEN2_PATTERN, { type: "NFC" }) as any;
    normalizedAdded.added_tokens.at(-1).normalized = true;
    for (const json of [...variants, isolatedNot, prefixed, extra, normalizedAdded]) expect(await PieceMemoEncoder.load(tokenizerFolder(json), () => [])).toBeNull();
  });
});
