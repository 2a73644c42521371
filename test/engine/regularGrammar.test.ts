/**
 * Deterministic EBNF for regular languages (src/engine/regularGrammar.ts), read by xgrammar
 * itself: seeded random sets of words (quotes, backslashes, multi-byte characters, words that are
 * prefixes of others) and random sequences of repeated digit classes; xgrammar must accept
 * exactly the language. Flat alternations are where xgrammar 0.1.27 goes wrong
 * (mlc-ai/xgrammar#618): the last test shows it still does, which is why the module exists.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import * as xg from "@mlc-ai/web-xgrammar";
import { digitRange, literal, regularGrammar, type Atom } from "../../src/engine/regularGrammar.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";

// Property checks through xgrammar's WebAssembly: thousands of calls, seconds on a loaded machine; not timed tests.
setDefaultTimeout(60_000);

const ALPHABET = ["a", "b", "-", '"', "\\", "é", "ß", "日"];

function randomWords(random: () => number): string[] {
  const word = () => Array.from({ length: 1 + Math.floor(random() * 4) }, () => ALPHABET[Math.floor(random() * ALPHABET.length)]).join("");
  const words = new Set(Array.from({ length: 2 + Math.floor(random() * 6) }, word));
  // Often one word a prefix of another (the shape xgrammar merges wrongly).
  const some = [...words][0]!;
  if (random() < 0.5) words.add(some + ALPHABET[Math.floor(random() * ALPHABET.length)]);
  if (random() < 0.3) words.add("-" + some);
  return [...words];
}

/** Every string of up to `length` characters over the alphabet. */
function allStrings(length: number): string[] {
  const out = [""];
  for (let i = 0; i < out.length; i++) if ([...out[i]!].length < length) for (const c of ALPHABET) out.push(out[i]! + c);
  return out.slice(1);
}

const ebnfString = (text: string) => `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

async function disagreements(ebnf: string, probes: string[], member: (s: string) => boolean): Promise<string[]> {
  const grammar = await xg.Grammar.fromEBNF(`root ::= ${ebnf}`);
  const wrong: string[] = [];
  for (const s of probes) if ((await xg.Testings.isGrammarAcceptString(grammar, s)) !== member(s)) wrong.push(s);
  grammar.dispose();
  return wrong;
}

describe("regularGrammar", () => {
  const probes = allStrings(3);

  test("finite sets of words: xgrammar accepts exactly the words", async () => {
    const random = seededRandom(21);
    for (let trial = 0; trial < 60; trial++) {
      const words = randomWords(random);
      const ebnf = regularGrammar(words.map(literal));
      const wrong = await disagreements(ebnf, [...new Set([...probes, ...words, ...words.map((w) => w + "a"), ...words.map((w) => w.slice(1))])].filter((s) => s !== ""), (s) => words.includes(s));
      expect({ words, ebnf, wrong }).toEqual({ words, ebnf, wrong: [] });
    }
  });

  test("repeated digit classes, bounded and unbounded: xgrammar agrees with the RegExp", async () => {
    const random = seededRandom(22);
    const digits = Array.from({ length: 500 }, (_, i) => String(i)).concat(Array.from({ length: 100 }, () => String(Math.floor(random() * 1e7))));
    for (let trial = 0; trial < 15; trial++) {
      const sequences: Atom[][] = Array.from({ length: 1 + Math.floor(random() * 4) }, () => {
        const length = 1 + Math.floor(random() * 3);
        return Array.from({ length }, (_, i) => {
          const last = i === length - 1;
          const low = Math.floor(random() * 10);
          const high = low + Math.floor(random() * (10 - low));
          const min = Math.floor(random() * 3);
          // Unbounded: last in a sequence (regularGrammar writes self-loops only).
          const max = random() < 0.2 && last ? Infinity : min + Math.floor(random() * 3);
          return digitRange(low, high, Math.max(min, max === 0 ? 1 : 0), Math.max(max, 1));
        });
      });
      const regex = new RegExp(`^(${sequences.map((q) => q.map((a) => `[${String.fromCharCode(a.chars[0]!)}-${String.fromCharCode(a.chars.at(-1)!)}]{${a.min},${a.max === Infinity ? "" : a.max}}`).join("")).join("|")})$`);
      const wrong = await disagreements(regularGrammar(sequences), digits, (s) => regex.test(s));
      expect({ regex: regex.source, wrong }).toEqual({ regex: regex.source, wrong: [] });
    }
  });

  test("an empty language is refused", () => {
    expect(() => regularGrammar([])).toThrow();
    expect(() => regularGrammar([[]])).toThrow();
  });

  test("xgrammar 0.1.27 still reads flat alternations wrongly (else this module could go)", async () => {
    for (const words of [["10", "-10", "-100"], ["ab", "-ab", "-abc"]]) {
      const probes = [...words, "100", "1000", "abc", "abbb"];
      expect(await disagreements(words.map(ebnfString).join(" | "), probes, (s) => words.includes(s))).not.toEqual([]);
      expect(await disagreements(regularGrammar(words.map(literal)), probes, (s) => words.includes(s))).toEqual([]);
    }
  });
});
