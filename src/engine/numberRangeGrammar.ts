/**
 * EBNF for the JSON numbers within a JSON schema's bounds (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum), replacing xgrammar 0.1.27's conversion, which admits numbers out of range
 * (an integer maximum of 150 lets 151-159 through, a minimum of 3 lets 1 and 2 through, number
 * bounds let 2.5 past a maximum of 2 and "3x5" past one of 3.5).
 *
 * Sound by construction, not complete: integers come in canonical form; numbers as integers, or
 * with a fraction of at most 6 digits: as many as the bounds have, or fewer followed by any digits
 * that keep them in range (no exponents, no "-0"; past 17 integer digits only within the nearer
 * bound's length). Decimal arithmetic is exact (bigint): a bound is its shortest decimal string.
 * Written deterministically (regularGrammar.ts). Pure.
 */
import { atom, digitRange, regularGrammar, type Atom } from "./regularGrammar.ts";

export interface NumberBounds {
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
}

/** Most fraction digits a bounded number may have. */
const MAX_FRACTION_DIGITS = 6;
/** Most integer digits a number bounded far away may have (unless its other bound has more). */
const MAX_INTEGER_DIGITS = 17;

export class EmptyNumberRangeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EmptyNumberRangeError";
  }
}

/** A decimal: mantissa · 10^exponent. */
interface Decimal {
  mantissa: bigint;
  exponent: number;
}

function decimalOf(x: number): Decimal {
  const [digits, power] = x.toExponential().split("e") as [string, string];
  const [whole, fraction = ""] = digits.split(".") as [string, string?];
  return { mantissa: BigInt(whole + fraction), exponent: Number(power) - fraction.length };
}

/** Fraction digits a decimal needs (none for integers). */
function fractionDigits(d: Decimal): number {
  let { mantissa, exponent } = d;
  while (mantissa !== 0n && mantissa % 10n === 0n) {
    mantissa /= 10n;
    exponent++;
  }
  return Math.max(0, -exponent);
}

const pow10 = (n: number) => 10n ** BigInt(n);
const floorDiv = (a: bigint, b: bigint) => (a >= 0n ? a / b : -((-a + b - 1n) / b));
const ceilDiv = (a: bigint, b: bigint) => -floorDiv(-a, b);

/** ⌊d · 10^scale⌋ or ⌈d · 10^scale⌉. */
function scaled(d: Decimal, scale: number, round: "floor" | "ceil"): bigint {
  const shift = d.exponent + scale;
  if (shift >= 0) return d.mantissa * pow10(shift);
  return round === "floor" ? floorDiv(d.mantissa, pow10(-shift)) : ceilDiv(d.mantissa, pow10(-shift));
}

/** Whether d · 10^scale is an integer. */
const exact = (d: Decimal, scale: number) => scaled(d, scale, "floor") === scaled(d, scale, "ceil");

/** A digit string's positions, each a [low, high] digit range. */
type Digits = [number, number][];

/** Every digit string of equal length from `low` to `high` (leading zeros kept), as alternatives. */
function sameLength(low: string, high: string): Digits[] {
  if (low.length === 0) return [[]];
  const [a, b] = [Number(low[0]), Number(high[0])];
  const [lowRest, highRest] = [low.slice(1), high.slice(1)];
  if (a === b) return sameLength(lowRest, highRest).map((rest) => [[a, a], ...rest]);
  const zeros = "0".repeat(lowRest.length);
  const nines = "9".repeat(lowRest.length);
  const out: Digits[] = [];
  let from = a;
  if (lowRest !== zeros) {
    out.push(...sameLength(lowRest, nines).map((rest): Digits => [[a, a], ...rest]));
    from = a + 1;
  }
  const to = highRest !== nines ? b - 1 : b;
  if (from <= to) out.push([[from, to], ...Array.from({ length: lowRest.length }, (): [number, number] => [0, 9])]);
  if (highRest !== nines) out.push(...sameLength(zeros, highRest).map((rest): Digits => [[b, b], ...rest]));
  return out;
}

const atomsOf = (digits: Digits, point: number | null): Atom[] => {
  const atoms = digits.map(([low, high]) => digitRange(low, high));
  if (point !== null) atoms.splice(point, 0, atom("."));
  return atoms;
};

type Sequence = Atom[];

/**
 * The strings of the non-negative integers m in [low, high] (high null: unbounded) written as
 * m · 10^-scale with exactly `scale` fraction digits, as EBNF alternatives.
 */
function unsignedScaled(low: bigint, high: bigint | null, scale: number): Sequence[] {
  // A far top bound is brought down to 17 integer digits beyond the bottom's: the grammar grows
  // with every length it spans (10^308 would take seconds and megabytes), and a sound subset is enough.
  const longest = Math.max(String(low).length, MAX_INTEGER_DIGITS + scale);
  if (high !== null && String(high).length > longest) high = pow10(longest) - 1n;
  if (high !== null && low > high) return [];
  const out: Sequence[] = [];
  const one = pow10(scale);
  // Below 1 (scale > 0): "0." and `scale` digits, leading zeros and all.
  if (scale > 0 && low < one) {
    const top = high === null || high >= one ? one - 1n : high;
    out.push(...sameLength(String(low).padStart(scale + 1, "0"), String(top).padStart(scale + 1, "0")).map((d) => atomsOf(d, 1)));
    low = one;
    if (high !== null && low > high) return out;
  }
  // Canonical digit strings, one length at a time; unbounded: all longer ones in one alternative.
  const lowLength = String(low).length;
  const highLength = high === null ? lowLength : String(high).length;
  for (let length = lowLength; length <= highLength; length++) {
    const from = length === lowLength ? String(low) : "1" + "0".repeat(length - 1);
    const to = high !== null && length === highLength ? String(high) : "9".repeat(length);
    out.push(...sameLength(from, to).map((d) => atomsOf(d, scale > 0 ? length - scale : null)));
  }
  if (high === null) {
    const rest = highLength - scale;
    out.push([digitRange(1, 9), digitRange(0, 9, rest), digitRange(0, 9, 0, Infinity), ...(scale > 0 ? [atom("."), digitRange(0, 9, scale)] : [])]);
  }
  return out;
}

/** Alternatives for the integers m in [low, high] (nulls: unbounded) written with `scale` fraction digits, signed. */
function signedScaled(low: bigint | null, high: bigint | null, scale: number): Sequence[] {
  const out: Sequence[] = [];
  if (high === null || high >= 0n) out.push(...unsignedScaled(low === null || low < 0n ? 0n : low, high, scale));
  if (low === null || low < 0n) {
    const top = high === null || high > -1n ? -1n : high;
    out.push(...unsignedScaled(-top, low === null ? null : -low, scale).map(negative));
  }
  return out;
}

const negative = (sequence: Sequence): Sequence => [atom("-"), ...sequence];

interface Bound {
  value: Decimal;
  exclusive: boolean;
}

function tighter(inclusive: number | undefined, exclusive: number | undefined, pick: (a: number, b: number) => boolean): Bound | null {
  if (inclusive === undefined && exclusive === undefined) return null;
  if (exclusive === undefined || (inclusive !== undefined && pick(inclusive, exclusive))) return { value: decimalOf(inclusive!), exclusive: false };
  return { value: decimalOf(exclusive), exclusive: true };
}

/**
 * The alternatives at one scale: numbers written with exactly `scale` fraction digits in range,
 * and, for numbers, those followed by up to MAX_FRACTION_DIGITS − scale more digits (a "." first
 * at scale 0) where every such continuation stays in range.
 */
function atScale(low: Bound | null, high: Bound | null, scale: number, integer: boolean): Sequence[] {
  // Exact: m / 10^scale within the bounds.
  const lowM = low === null ? null : low.exclusive ? scaled(low.value, scale, "floor") + 1n : scaled(low.value, scale, "ceil");
  const highM = high === null ? null : high.exclusive ? scaled(high.value, scale, "ceil") - 1n : scaled(high.value, scale, "floor");
  const out = lowM !== null && highM !== null && lowM > highM ? [] : signedScaled(lowM, highM, scale);
  const more = MAX_FRACTION_DIGITS - scale;
  if (integer || more <= 0) return out;
  const point = scale === 0 ? [atom(".")] : [];
  const suffix = [...point, digitRange(0, 9, 1, more)];
  // Digits that are not all zeros: a value strictly past m / 10^scale.
  const nonZero = [...point, digitRange(0, 9, 0, more - 1), digitRange(1, 9)];
  // Extended, m ≥ 0: the value lies in [m, m + 1) / 10^scale, so m + 1 must not pass the top bound.
  const top = high === null ? null : scaled(high.value, scale, "floor") - 1n;
  const from = lowM === null || lowM < 0n ? 0n : lowM;
  if (top === null || from <= top) out.push(...unsignedScaled(from, top, scale).map((s) => [...s, ...suffix]));
  // An exclusive bottom bound m / 10^scale itself, followed by digits not all zeros (0.5 over exclusiveMinimum 0).
  const edge = low?.exclusive && exact(low.value, scale) ? lowM! - 1n : null;
  if (edge !== null && edge >= 0n && (top === null || edge <= top)) out.push(...unsignedScaled(edge, edge, scale).map((s) => [...s, ...nonZero]));
  // Extended, written "-k…": the value lies in (−(k + 1), −k] / 10^scale.
  const kLow = high === null ? 0n : high.exclusive ? 1n - scaled(high.value, scale, "ceil") : -scaled(high.value, scale, "floor");
  const kHigh = low === null ? null : -scaled(low.value, scale, "ceil") - 1n;
  const kFrom = kLow < 0n ? 0n : kLow;
  if (kHigh === null || kFrom <= kHigh) out.push(...unsignedScaled(kFrom, kHigh, scale).map((s) => negative([...s, ...suffix])));
  // An exclusive top bound −k / 10^scale itself, followed by digits not all zeros (−0.5 under exclusiveMaximum 0).
  const kEdge = high?.exclusive && exact(high.value, scale) ? kLow - 1n : null;
  if (kEdge !== null && kEdge >= 0n && (kHigh === null || kEdge <= kHigh)) out.push(...unsignedScaled(kEdge, kEdge, scale).map((s) => negative([...s, ...nonZero])));
  return out;
}

/** An EBNF expression for the integers (or numbers) within `bounds`; EmptyNumberRangeError when none can be written. */
/** The integers (or numbers) within `bounds` as sequences for regularGrammar; EmptyNumberRangeError when none can be written. */
export function numberRangeSequences(type: "integer" | "number", bounds: NumberBounds): Atom[][] {
  const low = tighter(bounds.minimum, bounds.exclusiveMinimum, (inclusive, exclusive) => inclusive > exclusive);
  const high = tighter(bounds.maximum, bounds.exclusiveMaximum, (inclusive, exclusive) => inclusive < exclusive);
  const integer = type === "integer";
  // Numbers: every scale up to the bounds' fraction digits, so that 1.5 is there beside 1.25.
  const finest = integer ? 0 : Math.min(MAX_FRACTION_DIGITS, Math.max(0, ...[low, high].map((bound) => (bound === null ? 0 : fractionDigits(bound.value)))));
  const sequences = Array.from({ length: finest + 1 }, (_, scale) => atScale(low, high, scale, integer)).flat();
  if (sequences.length === 0) throw new EmptyNumberRangeError(`no ${type} ${integer ? "" : `of at most ${MAX_FRACTION_DIGITS} fraction digits `}lies within ${JSON.stringify(bounds)}`);
  return sequences;
}

/** An EBNF expression for the integers (or numbers) within `bounds`; EmptyNumberRangeError when none can be written. */
export function numberRangeGrammar(type: "integer" | "number", bounds: NumberBounds): string {
  return regularGrammar(numberRangeSequences(type, bounds));
}
