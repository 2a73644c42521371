/**
 * The split regex read from tokenizer.json (preTokenizerRegex.ts): Llama 3's pattern compiles to
 * the JS the library would run (White_Space for \s, ASCII-only case folding), unsupported
 * Oniguruma syntax is refused, and only the families' layouts are accepted.
 */
import { describe, expect, test } from "bun:test";
import { LLAMA3_PATTERN, QWEN2_PATTERN } from "../../src/proxy/knownSplitPatterns.ts";
import { GPT2_PIECES, onigurumaToJs, pieceSplitting } from "../../src/proxy/preTokenizerRegex.ts";

const sequence = (pattern: string) => ({
  type: "Sequence",
  pretokenizers: [
    { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
});

describe("onigurumaToJs", () => {
  test("Llama 3's pattern", () => {
    expect(onigurumaToJs(LLAMA3_PATTERN)).toBe(
      String.raw`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\p{White_Space}\p{L}\p{N}]+[\r\n]*|\p{White_Space}*[\r\n]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+`,
    );
  });

  test("case folding is ASCII only, as the library's; \\s is White_Space (U+0085, not U+FEFF)", () => {
    const regex = new RegExp(onigurumaToJs(LLAMA3_PATTERN)!, "gu");
    expect("it'S'ſ".match(regex)).toEqual(["it", "'S", "'ſ"]);
    expect("a\u0085\ufeffb".match(regex)).toEqual(["a", "\u0085", "\ufeffb"]);
  });

  test("unsupported syntax is refused", () => {
    for (const pattern of [".", "a$", "^a", String.raw`\w+`, String.raw`\d`, String.raw`\b`, "(?<=a)b", "a++", "a{1,3}+", "a*?", "[[a]]", "[a&&b]", String.raw`\p{Foo}`, String.raw`[\p{L}-z]`, "(a", "a)", "(?i)a", "(?>a)", "a{x}", "]"]) {
      expect({ pattern, js: onigurumaToJs(pattern) }).toEqual({ pattern, js: null });
    }
    expect(onigurumaToJs("[a-z_-]+|\\.|x{2}")).toBe("[a-z_\\-]+|\\.|x{2}");
  });
});

describe("pieceSplitting", () => {
  test("GPT-2's ByteLevel, Llama 3's and Qwen2's sequences, with no normalizer or NFC", () => {
    expect(pieceSplitting({ normalizer: null, pre_tokenizer: { type: "ByteLevel", use_regex: true } })?.regex).toBe(GPT2_PIECES);
    expect(pieceSplitting({ normalizer: null, pre_tokenizer: sequence(LLAMA3_PATTERN) })?.nfc).toBe(false);
    expect(pieceSplitting({ normalizer: { type: "NFC" }, pre_tokenizer: sequence(QWEN2_PATTERN) })?.nfc).toBe(true);
  });

  test("anything else is null", () => {
    const configs = [
      { normalizer: { type: "NFD" }, pre_tokenizer: sequence(LLAMA3_PATTERN) },
      { pre_tokenizer: sequence(LLAMA3_PATTERN) },
      { normalizer: null, pre_tokenizer: sequence(`${LLAMA3_PATTERN}|x`) },
      { normalizer: null, pre_tokenizer: { ...sequence(LLAMA3_PATTERN), pretokenizers: sequence(LLAMA3_PATTERN).pretokenizers.reverse() } },
      { normalizer: null, pre_tokenizer: { type: "ByteLevel", use_regex: false } },
      { normalizer: null, pre_tokenizer: { type: "Metaspace" } },
    ];
    for (const config of configs) expect(pieceSplitting(config)).toBeNull();
  });
});
