/**
 * Seeded random JSON schemas within what structured outputs support (xgrammar 0.1.27's schema
 * conversion): objects with required and optional properties (nested), arrays with minItems and
 * maxItems, enums and consts, strings with minLength/maxLength, integers and numbers with
 * inclusive or exclusive bounds, booleans, nulls, type unions and anyOf (over any of these, or over
 * consts alone).
 *
 * Left out, because xgrammar ignores them or treats them loosely (an answer could then be
 * grammatical and still break the schema): pattern and format (pattern-free by design here),
 * oneOf (compiled as anyOf: overlapping branches break "exactly one"), allOf, not, if/then/else,
 * uniqueItems, multipleOf, minProperties/maxProperties, patternProperties, dependentRequired.
 */
import { seededRandom } from "../../src/index/seededRandom.ts";
import { integer, pick, type Random } from "./fuzzRandom.ts";

export type Schema = Record<string, unknown>;

const NAMES = ["id", "name", "age", "tags", "score", "items", "ok", "note", "kind", "value", "x", "y", "size", "city", "when", "läge", "a b", 'q"t'];
const WORDS = ["red", "green", "blue", "yes", "no", "a", "ß", "日本", 'say "hi"', "back\\slash", "", "tab\there"];

const chance = (random: Random, p: number) => random() < p;

/** A bound for integers (one of a few magnitudes, either sign). */
const integerBound = (random: Random) => pick(random, [0, 1, 9, 10, 99, 100, 150, 1000, 4321]) * (chance(random, 0.3) ? -1 : 1);
/** A bound for numbers: an integer or a short decimal. */
const numberBound = (random: Random) => (chance(random, 0.5) ? integerBound(random) : Math.round((random() * 40 - 20) * 100) / 100);

function numeric(random: Random, type: "integer" | "number"): Schema {
  const schema: Schema = { type };
  const bound = type === "integer" ? integerBound : numberBound;
  let low = chance(random, 0.6) ? bound(random) : null;
  let high = chance(random, 0.6) ? bound(random) : null;
  if (low !== null && high !== null && low > high) [low, high] = [high, low];
  // An exclusive pair needs room between the bounds.
  const exclusive = chance(random, 0.25) && !(low !== null && high !== null && high - low < 2);
  if (low !== null) schema[exclusive ? "exclusiveMinimum" : "minimum"] = low;
  if (high !== null) schema[exclusive ? "exclusiveMaximum" : "maximum"] = high;
  return schema;
}

function string(random: Random): Schema {
  const schema: Schema = { type: "string" };
  // Mostly bounded: a random-weight model's free strings run for hundreds of bytes.
  if (chance(random, 0.85)) schema.maxLength = 1 + integer(random, 12);
  if (chance(random, 0.3)) schema.minLength = Math.min(integer(random, 4), (schema.maxLength as number | undefined) ?? 4);
  return schema;
}

function enumeration(random: Random): Schema {
  const values = new Set<string | number | boolean | null>();
  for (let n = 2 + integer(random, 3); values.size < n; ) values.add(pick(random, [pick(random, WORDS), integerBound(random), null, true, false, 2.5]));
  return chance(random, 0.2) ? { const: [...values][0] } : { enum: [...values] };
}

function object(random: Random, depth: number): Schema {
  if (chance(random, 0.08)) return { type: "object" };
  const names = [...NAMES].sort(() => random() - 0.5).slice(0, 1 + integer(random, 4));
  const properties = Object.fromEntries(names.map((name) => [name, schemaOf(random, depth + 1)]));
  const required = names.filter(() => chance(random, 0.6));
  return { type: "object", properties, required, additionalProperties: false };
}

function array(random: Random, depth: number): Schema {
  const schema: Schema = { type: "array", items: schemaOf(random, depth + 1) };
  if (chance(random, 0.5)) schema.minItems = integer(random, 3);
  schema.maxItems = ((schema.minItems as number | undefined) ?? 0) + integer(random, 4);
  return schema;
}

/** A schema `depth` levels down (from 3 down, leaves only). */
function schemaOf(random: Random, depth: number): Schema {
  const kinds = depth >= 3 ? ["string", "integer", "number", "boolean", "null", "enum", "union"] : ["object", "array", "string", "integer", "number", "boolean", "enum", "anyOf", "union"];
  switch (pick(random, kinds)) {
    case "object":
      return object(random, depth);
    case "array":
      return array(random, depth);
    case "string":
      return string(random);
    case "integer":
      return numeric(random, "integer");
    case "number":
      return numeric(random, "number");
    case "boolean":
      return { type: "boolean" };
    case "null":
      return { type: "null" };
    case "enum":
      return enumeration(random);
    case "anyOf":
      // Sometimes over consts alone (xgrammar merges such alternatives wrongly when they share a prefix).
      if (chance(random, 0.3)) return { anyOf: (enumeration(random).enum as unknown[] | undefined)?.map((value) => ({ const: value })) ?? [enumeration(random)] };
      return { anyOf: Array.from({ length: 2 + integer(random, 2) }, () => schemaOf(random, depth + 1)) };
    default:
      return { type: [pick(random, ["string", "integer", "number", "boolean"]), "null"] };
  }
}

/** The `index`-th schema of a seeded sequence: mostly objects at the root, as json_schema is used. */
export function randomSchema(seed: number, index: number): Schema {
  const random = seededRandom((seed * 7919 + index * 104729 + 1) >>> 0);
  for (let i = 0; i < 3; i++) random();
  return chance(random, 0.8) ? object(random, 0) : schemaOf(random, 0);
}
