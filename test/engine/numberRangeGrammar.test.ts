/**
 * Bounded numbers' EBNF (src/engine/numberRangeGrammar.ts), for fixed and seeded random bounds:
 * sound (every string it admits is a JSON number within the bounds) and complete on a grid (every
 * integer, and every decimal of at most 2 fraction digits for bounds of at most 2, within the
 * bounds is admitted in its shortest form). The EBNF is a regular expression, so most strings are
 * checked through its RegExp translation; a sample goes through xgrammar itself, which must agree
 * with the RegExp (its flat alternations did not: regularGrammar.ts).
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import * as xg from "@mlc-ai/web-xgrammar";
import { EmptyNumberRangeError, numberRangeGrammar, type NumberBounds } from "../../src/engine/numberRangeGrammar.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";

// Property checks through xgrammar's WebAssembly: thousands of calls, seconds on a loaded machine; not timed tests.
setDefaultTimeout(60_000);

/** The EBNF expression as a RegExp (it only uses literals, digit classes, {m,n}, *, | and parentheses). */
function regexOf(ebnf: string): RegExp {
  const source = ebnf.replace(/"([^"]*)"/g, (_, literal: string) => literal.replace(/[.\-]/g, "\\$&")).replace(/ /g, "");
  return new RegExp(`^${source}$`);
}

function inBounds(value: number, b: NumberBounds): boolean {
  return (
    (b.minimum === undefined || value >= b.minimum) &&
    (b.maximum === undefined || value <= b.maximum) &&
    (b.exclusiveMinimum === undefined || value > b.exclusiveMinimum) &&
    (b.exclusiveMaximum === undefined || value < b.exclusiveMaximum)
  );
}

const INTEGER_CASES: NumberBounds[] = [
  { minimum: 5, maximum: 123 },
  { minimum: 0, maximum: 150 },
  { minimum: -150, maximum: -3 },
  { minimum: 3 },
  { minimum: -7 },
  { maximum: -5 },
  { maximum: 42 },
  { exclusiveMinimum: 0, exclusiveMaximum: 10 },
  { minimum: 17, maximum: 4321 },
  { minimum: -4321, maximum: 150 },
  { minimum: -1000, maximum: 1000 },
  { minimum: 100, maximum: 100 },
  { minimum: 2.5, exclusiveMaximum: 7.5 },
  { minimum: 0, exclusiveMinimum: 3, maximum: 99, exclusiveMaximum: 50 },
];

const NUMBER_CASES: NumberBounds[] = [
  { minimum: 0.5, maximum: 10 },
  { minimum: -2, maximum: 2 },
  { maximum: 3.5 },
  { exclusiveMinimum: 0 },
  { exclusiveMaximum: 0, minimum: -3 },
  { exclusiveMinimum: 1.5, exclusiveMaximum: 2 },
  { minimum: -12.34, maximum: -0.05 },
  { minimum: -0.5, exclusiveMaximum: 0.25 },
  { minimum: 7 },
  { exclusiveMinimum: -3.25 },
  { minimum: 1.25, maximum: 1.25 },
];

/** A number in its shortest form (as String writes it), with at most `fraction` fraction digits. */
const shortest = (s: string, fraction: number) => new RegExp(`^-?(0|[1-9][0-9]*)${fraction > 0 ? `(\\.[0-9]{1,${fraction}})?` : ""}$`).test(s) && String(Number(s)) === s;

/** Number-like strings: signs, leading zeros, points, exponents, junk. */
function numberLike(random: () => number): string {
  const digits = (n: number) => Array.from({ length: n }, () => Math.floor(random() * 10)).join("");
  let s = random() < 0.4 ? "-" : "";
  s += random() < 0.1 ? "0" + digits(1) : digits(1 + Math.floor(random() * 4));
  if (random() < 0.6) s += "." + digits(Math.floor(random() * 8));
  if (random() < 0.05) s += "e" + digits(1);
  if (random() < 0.03) s += "x";
  return s;
}

function candidates(seed: number): string[] {
  const random = seededRandom(seed);
  const out = new Set<string>();
  for (let k = -2500; k <= 2500; k++) out.add(String(k / 100));
  for (let k = -1200; k <= 5000; k++) out.add(String(k));
  for (let i = 0; i < 20_000; i++) out.add(numberLike(random));
  return [...out];
}

/** Seeded random bounds: integers of a few magnitudes and decimals of up to 3 fraction digits, any combination of kinds. */
function randomBounds(seed: number, count: number, decimals: boolean): NumberBounds[] {
  const random = seededRandom(seed);
  const magnitude = () => [0, 1, 9, 10, 99, 100, 101, 150, 999, 1000, 4321][Math.floor(random() * 11)]! * (random() < 0.4 ? -1 : 1);
  const value = () => (decimals && random() < 0.6 ? Math.round((random() * 60 - 30) * 10 ** (1 + Math.floor(random() * 3))) / 10 ** (1 + Math.floor(random() * 3)) : magnitude());
  const out: NumberBounds[] = [];
  while (out.length < count) {
    const b: NumberBounds = {};
    let [low, high] = [value(), value()];
    if (low > high) [low, high] = [high, low];
    if (random() < 0.7) b[random() < 0.7 ? "minimum" : "exclusiveMinimum"] = low;
    if (random() < 0.7) b[random() < 0.7 ? "maximum" : "exclusiveMaximum"] = high;
    try {
      numberRangeGrammar(decimals ? "number" : "integer", b);
      out.push(b);
    } catch {
      // Empty: the refusal is tested below.
    }
  }
  return out;
}

const CASES: ["integer" | "number", NumberBounds][] = [
  ...[...INTEGER_CASES, ...randomBounds(3, 30, false)].map((b): ["integer", NumberBounds] => ["integer", b]),
  ...[...NUMBER_CASES, ...randomBounds(5, 30, true)].map((b): ["number", NumberBounds] => ["number", b]),
];

describe("numberRangeGrammar", () => {
  const all = candidates(7);

  test.each(CASES.map(([type, b]) => [type, JSON.stringify(b), b] as const))("%s %s: sound, and complete on the grid", (type, _, bounds) => {
    const regex = regexOf(numberRangeGrammar(type, bounds));
    const form = type === "integer" ? /^-?(0|[1-9][0-9]*)$/ : /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;
    const gridded = type === "integer" || [bounds.minimum, bounds.maximum, bounds.exclusiveMinimum, bounds.exclusiveMaximum].every((x) => x === undefined || Number.isInteger(x * 100));
    const wrong: string[] = [];
    for (const s of all) {
      if (regex.test(s)) {
        if (!form.test(s) || !inBounds(Number(s), bounds)) wrong.push(`admitted ${s}`);
      } else if (gridded && shortest(s, type === "integer" ? 0 : 2) && inBounds(Number(s), bounds)) {
        wrong.push(`left out ${s}`);
      }
    }
    expect(wrong.slice(0, 10)).toEqual([]);
  });

  test("xgrammar reads the EBNF as the RegExp does", async () => {
    const random = seededRandom(11);
    for (const [type, bounds] of CASES) {
      const ebnf = numberRangeGrammar(type, bounds);
      const grammar = await xg.Grammar.fromEBNF(`root ::= ${ebnf}`);
      const regex = regexOf(ebnf);
      // A sample of what it admits and of what it does not.
      const sample = all.filter((s) => random() < (regex.test(s) ? 0.02 : 0.003));
      const disagree: string[] = [];
      for (const s of sample) if ((await xg.Testings.isGrammarAcceptString(grammar, s)) !== regex.test(s)) disagree.push(s);
      expect({ type, bounds, disagree }).toEqual({ type, bounds, disagree: [] });
      grammar.dispose();
    }
  });

  test("bounds that no number can meet are refused", () => {
    expect(() => numberRangeGrammar("integer", { exclusiveMinimum: 0, exclusiveMaximum: 1 })).toThrow(EmptyNumberRangeError);
    expect(() => numberRangeGrammar("integer", { minimum: 5, maximum: 4 })).toThrow(EmptyNumberRangeError);
    expect(() => numberRangeGrammar("number", { minimum: 0.1234567, maximum: 0.1234568 })).toThrow(EmptyNumberRangeError);
  });
});
