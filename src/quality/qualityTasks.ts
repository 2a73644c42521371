/**
 * Synthetic multi-document tasks for measuring answer quality under KV reuse
 * (issue 12): pure and deterministic, one example from one seed. The training
 * script's mirror, scripts/quality_tasks.py, makes byte-identical examples (a test
 * checks it), so the model is trained on exactly the text the benchmark sends.
 *
 * Every fact is a record line "K417\n": a key of one capital letter, then a value of
 * three digits. Keys are distinct within an example, and so are values. A question is
 * "?K" and the answer is the value; the model ends it with ANSWER_END ("\n"). Records
 * are all 5 bytes (5 tokens of the byte-level tokenizer), so "the record before me" is
 * always 5 tokens back. One-letter keys right before the value make the lookup the
 * plainest induction (find the earlier "K", copy what follows), which a small model
 * learns in minutes on two CPU cores; two-letter keys behind "=" ("KQ=417") stayed at
 * chance for an hour of training (models/quality-runs/). Keys avoid "D" and "P", the
 * capitals of the annotation templates ("[Doc 1]", "Please ..."), so a key letter is
 * only ever followed by digits.
 *
 * The four families:
 * - lookup (a): 3-6 documents of 1-3 records; the question asks one record.
 * - dependence (b): 4-8 documents of one record each; one of them (never the first),
 *   the referrer, is "M^^^\n": its value is the value of the record right before it
 *   in this prompt. Each "^" stands for one digit, so the model learns to copy the
 *   previous record's digits into the "^" tokens while it reads them (prefill): a
 *   cached referrer computed after another neighbour holds that neighbour's value
 *   (`stale`) until its tokens are recomputed. `warmOrder` is such an order: the
 *   referrer follows another record there.
 * - retrieval (c): about `retrievalBytes` bytes of 5-byte lines in documents of 32
 *   lines: up to 24 records (one per key letter) scattered among filler lines of four
 *   small letters.
 * - order (d): two turns. Turn 1: labelled documents, then the earlier question with
 *   its answer. Turn 2: documents again labelled (some repeated from turn 1, some new)
 *   in relevance order ("original"), or reordered the way the context index shares a
 *   prefix (repeated ones first) behind ContextPilot's priority annotation
 *   ("annotated"); with `dedup`, a repeated document is replaced by the note "Please
 *   refer to [Doc N] in the previous conversation." The text comes from the server's
 *   own annotation templates (src/online/annotations.ts).
 *
 * Sending an example: POST /v1/completions with `segments: [...documents, question]`
 * (each document a cached chunk, the question always computed), `temperature: 0`,
 * `max_tokens: answer.length + 1`, `stop: [ANSWER_END]`; the answer is right when the
 * text equals `answer`. The server's tokens are <s> then the bytes of `prompt`
 * (= documents.join("") + question): see src/kv/segmentedPrompt.ts, segmentTexts.
 */
import { DEFAULT_TEMPLATES, dedupAnnotation, docLabel, priorityAnnotation } from "../online/annotations.ts";
import { QualityRandom, exampleSeed } from "./qualityRandom.ts";

export const QUALITY_FAMILIES = ["lookup", "dependence", "retrieval", "order"] as const;
export type QualityFamily = (typeof QUALITY_FAMILIES)[number];

export const ANSWER_END = "\n";
/** What a referrer writes instead of its digits: one mark per digit. */
export const REFERENCE_MARK = "^";
export const VALUE_DIGITS = 3;
export const RECORD_BYTES = 1 + VALUE_DIGITS + 1;
export const RETRIEVAL_LINES_PER_DOCUMENT = 32;
/** Capital letters that may be keys: all but D and P (the annotation templates' capitals). */
export const KEY_LETTERS = "ABCEFGHIJKLMNOQRSTUVWXYZ";
export const RETRIEVAL_MAX_RECORDS = KEY_LETTERS.length;
export const DEFAULT_RETRIEVAL_BYTES = 2048;

export type OrderVariant = "original" | "annotated";

export interface QualityOptions {
  /** retrieval: bytes of documents, rounded down to whole 5-byte lines (default 2048). */
  retrievalBytes?: number;
  /** dependence: percent of questions that ask the referrer (default 100; the others ask an ordinary record). */
  referrerPercent?: number;
  /** order: documents of turn 2 in relevance order, or reordered with the priority annotation (default "annotated"). */
  order?: OrderVariant;
  /** order: repeated documents replaced by a note (default true). */
  dedup?: boolean;
}

export interface QualityExample {
  family: QualityFamily;
  /** The example's own seed (exampleSeed(set seed, index)). */
  seed: number;
  /** The chunks, each ending with "\n". */
  documents: string[];
  /** The last segment: "?K". */
  question: string;
  /** The expected text, without ANSWER_END. */
  answer: string;
  /** documents.join("") + question: the text after <s>. */
  prompt: string;
  /** Every key in the prompt with its value (a referrer's resolved), in order of first appearance. */
  facts: [string, string][];
  /** dependence: the referrer's document index. */
  referrer?: number;
  /** dependence, when the question asks the referrer: the answer a referrer cached after warmOrder's neighbour gives. */
  stale?: string;
  /** dependence: an order of the documents (indices) in which the referrer follows another record. */
  warmOrder?: number[];
  /** order: the variant rendered. */
  order?: OrderVariant;
  dedup?: boolean;
}

const SMALL_LETTERS = "abcdefghijklmnopqrstuvwxyz";

interface Fact {
  key: string;
  value: string;
}

/** Draws distinct keys and distinct values. */
class FactSource {
  private readonly keys = new Set<string>();
  private readonly values = new Set<string>();

  constructor(private readonly random: QualityRandom) {}

  fact(): Fact {
    let key: string;
    do key = KEY_LETTERS[this.random.below(KEY_LETTERS.length)]!;
    while (this.keys.has(key));
    this.keys.add(key);
    let value: string;
    do value = String(this.random.below(10 ** VALUE_DIGITS)).padStart(VALUE_DIGITS, "0");
    while (this.values.has(value));
    this.values.add(value);
    return { key, value };
  }
}

function record(fact: Fact): string {
  return `${fact.key}${fact.value}\n`;
}

function question(key: string): string {
  return `?${key}`;
}

function finish(
  family: QualityFamily,
  seed: number,
  documents: string[],
  asked: Fact,
  facts: Fact[],
  extra: Partial<QualityExample> = {},
): QualityExample {
  const q = question(asked.key);
  return {
    family,
    seed,
    documents,
    question: q,
    answer: asked.value,
    prompt: documents.join("") + q,
    facts: facts.map((f) => [f.key, f.value]),
    ...extra,
  };
}

function lookup(seed: number): QualityExample {
  const random = new QualityRandom(seed);
  const source = new FactSource(random);
  const documents: string[] = [];
  const facts: Fact[] = [];
  const count = random.between(3, 6);
  for (let d = 0; d < count; d++) {
    const records = random.between(1, 3);
    let text = "";
    for (let r = 0; r < records; r++) {
      const fact = source.fact();
      facts.push(fact);
      text += record(fact);
    }
    documents.push(text);
  }
  return finish("lookup", seed, documents, random.pick(facts), facts);
}

function dependence(seed: number, referrerPercent: number): QualityExample {
  const random = new QualityRandom(seed);
  const source = new FactSource(random);
  const count = random.between(4, 8);
  const own: Fact[] = [];
  for (let d = 0; d < count; d++) own.push(source.fact());
  const referrer = random.between(1, count - 1);
  const facts = own.map((f, d) => (d === referrer ? { key: f.key, value: own[d - 1]!.value } : f));
  const documents = own.map((f, d) => (d === referrer ? `${f.key}${REFERENCE_MARK.repeat(VALUE_DIGITS)}\n` : record(f)));
  let warmOrder: number[];
  do warmOrder = random.shuffled(documents.map((_, d) => d));
  while (warmOrder.indexOf(referrer) === 0 || warmOrder[warmOrder.indexOf(referrer) - 1] === referrer - 1);
  const asksReferrer = random.chance(referrerPercent);
  let asked: Fact;
  if (asksReferrer) asked = facts[referrer]!;
  else {
    const others = facts.filter((_, d) => d !== referrer);
    asked = random.pick(others);
  }
  const extra: Partial<QualityExample> = { referrer };
  if (asksReferrer) extra.stale = own[warmOrder[warmOrder.indexOf(referrer) - 1]!]!.value;
  extra.warmOrder = warmOrder;
  return finish("dependence", seed, documents, asked, facts, extra);
}

function retrieval(seed: number, bytes: number): QualityExample {
  const random = new QualityRandom(seed);
  const source = new FactSource(random);
  const lines = Math.floor(bytes / RECORD_BYTES);
  if (lines < 1) throw new RangeError(`retrievalBytes ${bytes} holds no ${RECORD_BYTES}-byte line`);
  const records = Math.min(lines, RETRIEVAL_MAX_RECORDS);
  // Which lines are records: the first `records` of a shuffled order of line numbers.
  const isRecord = new Array<boolean>(lines).fill(false);
  for (const line of random.shuffled([...Array(lines).keys()]).slice(0, records)) isRecord[line] = true;
  const facts: Fact[] = [];
  const documents: string[] = [];
  let text = "";
  for (let line = 0; line < lines; line++) {
    if (isRecord[line]) {
      const fact = source.fact();
      facts.push(fact);
      text += record(fact);
    } else {
      for (let i = 0; i < RECORD_BYTES - 1; i++) text += SMALL_LETTERS[random.below(26)]!;
      text += "\n";
    }
    if ((line + 1) % RETRIEVAL_LINES_PER_DOCUMENT === 0 || line === lines - 1) {
      documents.push(text);
      text = "";
    }
  }
  return finish("retrieval", seed, documents, random.pick(facts), facts);
}

function order(seed: number, variant: OrderVariant, dedup: boolean): QualityExample {
  const random = new QualityRandom(seed);
  const source = new FactSource(random);
  const drawDocument = (): Fact[] => {
    const records = random.between(1, 2);
    const out: Fact[] = [];
    for (let r = 0; r < records; r++) out.push(source.fact());
    return out;
  };
  const firstCount = random.between(2, 3);
  const first: Fact[][] = [];
  for (let d = 0; d < firstCount; d++) first.push(drawDocument());
  const earlier = random.pick(first.flat());
  const repeatedCount = random.between(1, firstCount - 1);
  const repeated = random.shuffled([...Array(firstCount).keys()]).slice(0, repeatedCount).sort((x, y) => x - y);
  const fresh: Fact[][] = [];
  const freshCount = random.between(1, 2);
  for (let d = 0; d < freshCount; d++) fresh.push(drawDocument());
  // Turn 2's documents in relevance order: ids < firstCount are turn-1 documents, the others fresh ones.
  const relevance = random.shuffled([...repeated, ...fresh.map((_, i) => firstCount + i)]);
  const asked = random.pick(random.pick(relevance.map((id) => (id < firstCount ? first[id]! : fresh[id - firstCount]!))));
  const body = (facts: Fact[]) => facts.map(record).join("");
  const documents: string[] = first.map((facts, d) => `${docLabel(DEFAULT_TEMPLATES, d)}\n${body(facts)}`);
  documents.push(`${question(earlier.key)}${earlier.value}\n`);
  // The context index puts the shared (repeated) documents first, in their earlier order.
  const sent = variant === "annotated" ? [...relevance].sort((x, y) => x - y) : relevance;
  if (variant === "annotated") documents.push(`${priorityAnnotation(DEFAULT_TEMPLATES, sent.map((id) => relevance.indexOf(id)))}\n`);
  sent.forEach((id, position) => {
    const label = docLabel(DEFAULT_TEMPLATES, position);
    if (id < firstCount && dedup) documents.push(`${label}\n${dedupAnnotation(DEFAULT_TEMPLATES, docLabel(DEFAULT_TEMPLATES, id))}\n`);
    else documents.push(`${label}\n${body(id < firstCount ? first[id]! : fresh[id - firstCount]!)}`);
  });
  const facts = [...first.flat(), ...sent.filter((id) => id >= firstCount).flatMap((id) => fresh[id - firstCount]!)];
  return finish("order", seed, documents, asked, facts, { order: variant, dedup });
}

/** One example of a family from its own seed. */
export function qualityExample(family: QualityFamily, seed: number, options: QualityOptions = {}): QualityExample {
  switch (family) {
    case "lookup":
      return lookup(seed >>> 0);
    case "dependence":
      return dependence(seed >>> 0, options.referrerPercent ?? 100);
    case "retrieval":
      return retrieval(seed >>> 0, options.retrievalBytes ?? DEFAULT_RETRIEVAL_BYTES);
    case "order":
      return order(seed >>> 0, options.order ?? "annotated", options.dedup ?? true);
  }
}

/**
 * Examples 0..count-1 of the set seeded by `seed`: example i has seed exampleSeed(seed, i)
 * and family families[i % families.length].
 */
export function qualityExamples(
  seed: number,
  count: number,
  families: readonly QualityFamily[] = QUALITY_FAMILIES,
  options: QualityOptions = {},
): QualityExample[] {
  const out: QualityExample[] = [];
  for (let i = 0; i < count; i++) out.push(qualityExample(families[i % families.length]!, exampleSeed(seed, i), options));
  return out;
}
