import { describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { segmentTexts } from "../../src/kv/segmentedPrompt.ts";
import { mulberry32 } from "../../src/quality/qualityRandom.ts";
import {
  QUALITY_FAMILIES,
  KEY_LETTERS,
  RECORD_BYTES,
  REFERENCE_MARK,
  type QualityExample,
  type QualityFamily,
  type QualityOptions,
  qualityExample,
  qualityExamples,
} from "../../src/quality/qualityTasks.ts";
import { REPO_ROOT } from "../helpers/cli.ts";

const PYTHON = "/usr/bin/python3";
const SCRIPT = join(REPO_ROOT, "scripts", "quality_tasks.py");

function pythonDump(seed: number, count: number, args: string[] = []): string[] {
  const result = Bun.spawnSync([PYTHON, SCRIPT, "--dump", "--seed", String(seed), "--count", String(count), ...args], { stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`quality_tasks.py failed: ${result.stderr.toString()}`);
  return result.stdout.toString().split("\n").filter((line) => line.length > 0);
}

function many(family: QualityFamily, count: number, options: QualityOptions = {}): QualityExample[] {
  return qualityExamples(12345, count, [family], options);
}

/** The value a fact line "KVVV\n" (key letter, three digits) gives in the prompt text (null: not a plain record). */
function recordValue(prompt: string, key: string): string | null {
  const match = new RegExp(`(?:^|\\n)${key}([0-9]{3})\\n`).exec(prompt);
  return match === null ? null : match[1]!;
}

describe("the Python mirror", () => {
  const python = existsSync(PYTHON) ? test : test.skip;
  const cases: [string, number, number, string[], QualityOptions, QualityFamily[]][] = [
    ["all families", 1, 24, [], {}, [...QUALITY_FAMILIES]],
    ["all families, another seed", 987654321, 24, [], {}, [...QUALITY_FAMILIES]],
    ["dependence with ordinary questions", 5, 40, ["--family", "dependence", "--referrer-percent", "50"], { referrerPercent: 50 }, ["dependence"]],
    ["long retrieval (filler lines)", 9, 3, ["--family", "retrieval", "--retrieval-bytes", "8192"], { retrievalBytes: 8192 }, ["retrieval"]],
    ["short retrieval", 11, 6, ["--family", "retrieval", "--retrieval-bytes", "500"], { retrievalBytes: 500 }, ["retrieval"]],
    ["order, original, repeated", 13, 20, ["--family", "order", "--order", "original", "--dedup", "0"], { order: "original", dedup: false }, ["order"]],
    ["order, annotated, repeated", 14, 20, ["--family", "order", "--order", "annotated", "--dedup", "0"], { order: "annotated", dedup: false }, ["order"]],
    ["order, original, dedup", 15, 20, ["--family", "order", "--order", "original", "--dedup", "1"], { order: "original", dedup: true }, ["order"]],
    ["lookup and dependence", 4294967295, 30, ["--family", "lookup", "--family", "dependence"], {}, ["lookup", "dependence"]],
  ];
  for (const [name, seed, count, args, options, families] of cases) {
    python(`makes byte-identical examples: ${name}`, () => {
      const expected = qualityExamples(seed, count, families, options).map((e) => JSON.stringify(e));
      const actual = pythonDump(seed, count, args);
      expect(actual.length).toBe(count);
      for (let i = 0; i < count; i++) expect(actual[i]).toBe(expected[i]!);
    });
  }
});

describe("mulberry32", () => {
  test("known first outputs (the reference JavaScript implementation's)", () => {
    const next = mulberry32(0);
    // From the widely used one-liner: t = a += 0x6D2B79F5; t = Math.imul(t ^ t >>> 15, t | 1); ...
    const reference = (a: number) => () => {
      a |= 0;
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return (t ^ (t >>> 14)) >>> 0;
    };
    const ref = reference(0);
    for (let i = 0; i < 1000; i++) expect(next()).toBe(ref());
  });
});

describe("qualityExample", () => {
  test("is deterministic and seeds differ", () => {
    for (const family of QUALITY_FAMILIES) {
      expect(qualityExample(family, 77)).toEqual(qualityExample(family, 77));
      expect(qualityExample(family, 77).prompt).not.toBe(qualityExample(family, 78).prompt);
    }
  });

  test("every document ends with its newline and the prompt is documents + question", () => {
    for (const family of QUALITY_FAMILIES) {
      for (const e of many(family, 50, { retrievalBytes: 1024 })) {
        expect(e.documents.length).toBeGreaterThan(0);
        for (const d of e.documents) {
          expect(d.length).toBeGreaterThan(0);
          expect(d.endsWith("\n")).toBe(true);
        }
        expect(e.prompt).toBe(e.documents.join("") + e.question);
        expect(e.question).toMatch(/^\?[A-CE-OQ-Z]$/);
        expect(e.answer).toMatch(/^[0-9]{3}$/);
        expect(/^[\x20-\x7e\n]*$/.test(e.prompt)).toBe(true);
      }
    }
  });

  test("the server's segments give <s> and the prompt's bytes", () => {
    const bytes = { encode: (text: string) => [...new TextEncoder().encode(text)] };
    for (const family of QUALITY_FAMILIES) {
      const e = qualityExample(family, 3);
      const segmented = segmentTexts(bytes, [...e.documents, e.question], 256);
      const ids = segmented.segments.flatMap((s) => s.tokens).concat(segmented.question);
      expect(ids).toEqual([256, ...new TextEncoder().encode(e.prompt)]);
      expect(segmented.segments.length).toBe(e.documents.length + 1);
    }
  });

  test("keys and values are distinct; facts hold every key's value", () => {
    for (const family of QUALITY_FAMILIES) {
      for (const e of many(family, 40, { retrievalBytes: 1500 })) {
        const keys = e.facts.map(([k]) => k);
        expect(new Set(keys).size).toBe(keys.length);
        expect(e.facts.find(([k]) => k === e.question.slice(1))?.[1]).toBe(e.answer);
      }
    }
  });

  test("lookup and retrieval: the answer is the asked record's value in the prompt", () => {
    for (const family of ["lookup", "retrieval"] as const) {
      for (const e of many(family, 60, { retrievalBytes: 2048 })) {
        expect(recordValue(e.prompt, e.question.slice(1))).toBe(e.answer);
      }
    }
  });

  test("retrieval: about retrievalBytes of 5-byte lines, 32 lines a document, one record per key letter at most", () => {
    for (const bytes of [700, 2048, 8192]) {
      const e = qualityExample("retrieval", 21, { retrievalBytes: bytes });
      const documentBytes = e.documents.join("").length;
      expect(documentBytes).toBe(Math.floor(bytes / RECORD_BYTES) * RECORD_BYTES);
      expect(e.documents.slice(0, -1).every((d) => d.length === 32 * RECORD_BYTES)).toBe(true);
      expect(e.facts.length).toBe(Math.min(Math.floor(bytes / RECORD_BYTES), KEY_LETTERS.length));
      expect(KEY_LETTERS.length).toBe(24);
    }
  });

  test("dependence: the referrer copies its predecessor, and the stale answer differs", () => {
    let referrerQuestions = 0;
    for (const e of many("dependence", 200, { referrerPercent: 70 })) {
      const r = e.referrer!;
      expect(r).toBeGreaterThanOrEqual(1);
      e.documents.forEach((d) => expect(d.length).toBe(RECORD_BYTES));
      expect(e.documents[r]).toBe(`${e.facts[r]![0]}${REFERENCE_MARK.repeat(3)}\n`);
      expect(e.facts[r]![1]).toBe(e.documents[r - 1]!.slice(1, 4));
      const warm = e.warmOrder!;
      expect([...warm].sort((x, y) => x - y)).toEqual([...e.documents.keys()]);
      const at = warm.indexOf(r);
      expect(at).toBeGreaterThan(0);
      expect(warm[at - 1]).not.toBe(r - 1);
      if (e.question === `?${e.facts[r]![0]}`) {
        referrerQuestions++;
        expect(e.answer).toBe(e.documents[r - 1]!.slice(1, 4));
        expect(e.stale).toBe(e.documents[warm[at - 1]!]!.slice(1, 4));
        expect(e.stale).not.toBe(e.answer);
      } else {
        expect(e.stale).toBeUndefined();
        expect(recordValue(e.prompt, e.question.slice(1))).toBe(e.answer);
      }
    }
    expect(referrerQuestions).toBeGreaterThan(110);
    expect(referrerQuestions).toBeLessThan(170);
    expect(many("dependence", 30).every((e) => e.stale !== undefined)).toBe(true);
  });

  test("order: same content in every variant; annotation and dedup notes as the server writes them", () => {
    for (let seed = 0; seed < 40; seed++) {
      const variants = (["original", "annotated"] as const).flatMap((order) => [false, true].map((dedup) => qualityExample("order", seed, { order, dedup })));
      for (const v of variants) {
        expect(v.answer).toBe(variants[0]!.answer);
        expect(v.question).toBe(variants[0]!.question);
        expect(new Set(v.facts.map(([k]) => k))).toEqual(new Set(variants[0]!.facts.map(([k]) => k)));
        // The asked key's record is in the prompt (in turn 1 when its document was deduplicated).
        expect(recordValue(v.prompt, v.question.slice(1))).toBe(v.answer);
        const annotated = v.prompt.includes("Please read the context in the following priority order: [Doc ");
        expect(annotated).toBe(v.order === "annotated");
        expect(v.prompt.includes("in the previous conversation.\n")).toBe(v.dedup!);
      }
      const [original, , annotated] = variants;
      // Turn 1 and the earlier answer are the same; turn 2 is reordered behind the annotation.
      const earlier = original!.documents.findIndex((d) => d.startsWith("?"));
      expect(annotated!.documents.slice(0, earlier + 1)).toEqual(original!.documents.slice(0, earlier + 1));
      expect(annotated!.documents.length).toBe(original!.documents.length + 1);
      const priority = /priority order: (.*) and answer/.exec(annotated!.documents[earlier + 1]!)![1]!;
      const labels = priority.split(" > ");
      // The annotation lists turn 2's documents (by their label there) in the original order's sequence.
      const turn2Original = original!.documents.slice(earlier + 1).map((d) => d.slice(d.indexOf("\n") + 1));
      const turn2Annotated = annotated!.documents.slice(earlier + 2);
      const byLabel = new Map(turn2Annotated.map((d) => [d.slice(0, d.indexOf("\n")), d.slice(d.indexOf("\n") + 1)]));
      expect(labels.map((l) => byLabel.get(l))).toEqual(turn2Original);
    }
  });

  test("a, b and d stay short; c grows with retrievalBytes", () => {
    for (const family of ["lookup", "dependence", "order"] as const) {
      for (const e of many(family, 100)) expect(e.prompt.length).toBeLessThanOrEqual(360);
    }
    expect(qualityExample("retrieval", 1, { retrievalBytes: 4096 }).prompt.length).toBeGreaterThan(4000);
  });
});
