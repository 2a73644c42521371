/**
 * Span boundaries (promptSpans.ts): a piece of GPT-2's, Llama 3's and Qwen2's split regexes
 * always ends at one, the pieces before it are those of the text cut there with any
 * non-whitespace character after it, mayBeWhitespace covers JS's and Unicode's whitespace, and
 * NFC starts no non-whitespace character with whitespace.
 */
import { describe, expect, test } from "bun:test";
import { LLAMA3_PATTERN, QWEN2_PATTERN } from "../../src/proxy/knownSplitPatterns.ts";
import { GPT2_PIECES, onigurumaToJs } from "../../src/proxy/preTokenizerRegex.ts";
import { addedTokenAt, mayBeWhitespace, spanEnd } from "../../src/proxy/promptSpans.ts";
import { mulberry32 } from "../../src/quality/qualityRandom.ts";

const REGEXES: [string, RegExp][] = [
  ["GPT-2", GPT2_PIECES],
  ["Llama 3", new RegExp(onigurumaToJs(LLAMA3_PATTERN)!, "gu")],
  ["Qwen2", new RegExp(onigurumaToJs(QWEN2_PATTERN)!, "gu")],
];
const PARTS = ["a", "Ab", " x", "1", "123456", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u0085", "\u2028", "\ufeff", "'s", "'", ".", "});", "é", "🙂", "日", "<", "\ud800"];

/** [start, end) of each piece, gaps included. */
function pieceBounds(text: string, regex: RegExp): number[] {
  const ends: number[] = [];
  let at = 0;
  for (const match of text.matchAll(regex)) {
    if (match.index > at) ends.push(match.index);
    at = match.index + match[0].length;
    ends.push(at);
  }
  if (at < text.length) ends.push(text.length);
  return ends;
}

describe("span boundaries", () => {
  test.each(REGEXES)("%s: a piece ends at every boundary, and the pieces before it do not depend on what follows", (_, regex) => {
    const next = mulberry32(21);
    let boundaries = 0;
    for (let n = 0; n < 3000; n++) {
      const text = Array.from({ length: 1 + (next() % 30) }, () => PARTS[next() % PARTS.length]).join("");
      const ends = pieceBounds(text, regex);
      for (let start = 0; start < text.length; ) {
        const end = spanEnd(text, start, addedTokenAt(["<s>"]));
        if (end < text.length) {
          boundaries++;
          expect({ text, end, ends: ends.includes(end) }).toEqual({ text, end, ends: true });
          for (const follower of ["x", "7", ".", "日"]) {
            expect(pieceBounds(text.slice(0, end) + follower, regex).filter((e) => e <= end)).toEqual(ends.filter((e) => e <= end));
          }
        }
        start = end;
      }
    }
    expect(boundaries).toBeGreaterThan(1000);
  });

  test("boundaries: after a newline, before a character that is no whitespace and where no added token starts", () => {
    const added = addedTokenAt(["<s>", "</s>"]);
    const ends = (text: string) => {
      const out: number[] = [];
      for (let start = 0; start < text.length; start = spanEnd(text, start, added)) out.push(spanEnd(text, start, added));
      return out;
    };
    expect(ends("a\nb\r\nc")).toEqual([2, 5, 6]);
    expect(ends("a\n b\n\nc\n")).toEqual([6, 8]);
    expect(ends("a\n<s>\nb")).toEqual([6, 7]);
    expect(ends("a\n</s>x\n<x\nb")).toEqual([8, 11, 12]);
    expect(ends("a\n\u00a0b\n\u3000c")).toEqual([7]);
    expect(ends("")).toEqual([]);
  });

  test("mayBeWhitespace covers JS's \\s and White_Space; NFC starts no other character with whitespace", () => {
    const whitespace = /[\s\p{White_Space}]/u;
    for (let code = 0; code < 0x10000; code++) {
      const char = String.fromCharCode(code);
      if (whitespace.test(char)) expect({ code, may: mayBeWhitespace(code) }).toEqual({ code, may: true });
    }
    for (let code = 0; code <= 0x10ffff; code++) {
      if (code >= 0xd800 && code <= 0xdfff) continue;
      const char = String.fromCodePoint(code);
      if (mayBeWhitespace(char.charCodeAt(0))) continue;
      for (const text of [char, `${char}\u0301`, `${char}\u0308\u0301`]) {
        const first = text.normalize("NFC").charCodeAt(0);
        if (mayBeWhitespace(first)) expect({ code, first }).toBeNull();
      }
    }
  });
});
