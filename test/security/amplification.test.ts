/**
 * Small requests cannot make big answers (issue 18): annotation templates may
 * repeat their placeholder at most --max-template-placeholders times, and the
 * annotations one request renders are bounded by --max-annotation-bytes.
 *
 * 1. The reviewer's probe against a real `ctxr serve` (child process, default
 *    flags): a 19 KB /v1/reorder whose templates repeat {order} 100 times and
 *    {n} 1,365 times once answered 817 MB; now it is a 400 naming the limit,
 *    adds no context, and the server's peak RSS stays under 512 MB, also
 *    through the largest annotations the default limit lets through.
 * 2. A seeded property test against an in-process server: random templates
 *    (random lengths, placeholders repeated up to the limit and beyond,
 *    unicode, control characters, lone surrogates, "$&" "$`" "$'" "$$"), random
 *    block counts and contexts, /v1/reorder and /v1/dedup. Each answer is
 *    predicted by an independent model: a 400 naming the placeholder limit, a
 *    400 naming --max-annotation-bytes, or a 200 whose annotations are exactly
 *    the rendered templates and whose body length is within a bound computed
 *    from the request (see `answerBound`).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { DEFAULT_TEMPLATES } from "../../src/online/annotations.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";
import { startTestServer, type TestServer } from "../server/serverKit.ts";
import { KiB, MiB, mib, startCtxr } from "./hostileKit.ts";

const PLACEHOLDER_LIMIT = 4; // the default --max-template-placeholders
const DEFAULT_ANNOTATION_LIMIT = 16 * MiB; // the default --max-annotation-bytes

type Templates = { priority: string; doc: string; separator: string; dedup: string };

const utf8 = (text: string) => Buffer.byteLength(text, "utf8");

/** Non-overlapping occurrences, left to right (as String.prototype.split and replaceAll count them). */
function occurrences(text: string, placeholder: string): number {
  return text.split(placeholder).length - 1;
}

/** A label: the doc template with every "{n}" replaced by the 1-based position (single pass, no "$" patterns). */
const label = (t: Templates, position: number) => t.doc.split("{n}").join(String(position));

/** The priority annotation of a context whose returned block p came from original position order[p]. */
function priorityOf(t: Templates, order: readonly number[]): string {
  const positionOf = new Array<number>(order.length);
  order.forEach((original, p) => (positionOf[original] = p + 1));
  return t.priority.split("{order}").join(positionOf.map((p) => label(t, p)).join(t.separator));
}

const noteOf = (t: Templates, earlierLabel: string) => t.dedup.split("{doc}").join(earlierLabel);

/** UTF-8 bytes of the priority annotation of a context of n blocks, by summation (no rendering). */
function priorityBytes(t: Templates, n: number): number {
  const docFixed = utf8(t.doc) - 3 * occurrences(t.doc, "{n}");
  let order = (n - 1) * utf8(t.separator);
  for (let p = 1; p <= n; p++) order += docFixed + occurrences(t.doc, "{n}") * String(p).length;
  return utf8(t.priority) - 7 * occurrences(t.priority, "{order}") + occurrences(t.priority, "{order}") * order;
}

describe("the reviewer's amplification probe (child ctxr serve, default flags)", () => {
  const blocks = Array.from({ length: 1024 }, (_, i) => i);
  const reviewer = { priority: "{order}".repeat(100), doc: "{n}".repeat(1365), separator: "s".repeat(4000) };

  test("is refused without growing the server", async () => {
    const ctxr = await startCtxr([]);
    try {
      const start = ctxr.peakRss();
      const statuses: number[] = [];
      const post = async (body: unknown) => {
        const answer = await ctxr.post("/v1/reorder", body);
        statuses.push(answer.status);
        return answer;
      };

      // The reviewer's 19 KB request (it answered 817 MB), with one and three contexts.
      for (const contexts of [1, 3]) {
        const body = JSON.stringify({ contexts: Array.from({ length: contexts }, () => blocks), templates: reviewer });
        expect(body.length).toBeLessThan(40 * KiB);
        const answer = await post(body);
        expect(answer.status).toBe(400);
        expect(answer.body.error.message).toContain(`at most ${PLACEHOLDER_LIMIT} times`);
        expect(answer.text.length).toBeLessThan(KiB);
      }

      // Within the placeholder limit but over --max-annotation-bytes: 4 x {order} of 1,024 labels of ~4 KB.
      const wide: Templates = { priority: "{order}".repeat(4), doc: "{n}".repeat(4) + "d".repeat(4084), separator: "s".repeat(4000), dedup: DEFAULT_TEMPLATES.dedup };
      expect(priorityBytes(wide, 1024)).toBeGreaterThan(DEFAULT_ANNOTATION_LIMIT);
      const refused = await post({ contexts: [blocks], templates: { priority: wide.priority, doc: wide.doc, separator: wide.separator } });
      expect(refused.status).toBe(400);
      expect(refused.body.error.field).toBe("templates");
      expect(refused.body.error.message).toContain("--max-annotation-bytes");
      expect((await ctxr.stats()).contexts).toBe(0);

      // The largest annotation the default limit lets through, 8 times over: answers of ~16 MB each.
      const pad = largestPad(1024, DEFAULT_ANNOTATION_LIMIT);
      const largest: Templates = { priority: "{order}".repeat(4), doc: "{n}" + "d".repeat(pad), separator: " > ", dedup: DEFAULT_TEMPLATES.dedup };
      expect(priorityBytes(largest, 1024)).toBeLessThanOrEqual(DEFAULT_ANNOTATION_LIMIT);
      for (let i = 0; i < 8; i++) {
        const answer = await post({ contexts: [blocks.map((b) => b + i * 1024)], templates: { priority: largest.priority, doc: largest.doc, separator: largest.separator } });
        expect(answer.status).toBe(200);
        expect(utf8(answer.body.results[0].annotation)).toBe(priorityBytes(largest, 1024));
      }
      expect((await ctxr.stats()).contexts).toBe(8);

      const peak = ctxr.peakRss();
      console.log(`amplification: statuses ${statuses.join(",")}; VmHWM ${mib(peak)} (start ${mib(start)})`);
      expect(statuses.filter((s) => s >= 500)).toEqual([]);
      expect(peak).toBeLessThan(512 * MiB);
    } finally {
      await ctxr.stop();
    }
  }, 60_000);
});

/** The longest padding of doc "{n}"+pad for which 4 x {order} of n labels stays within `limit` bytes. */
function largestPad(n: number, limit: number): number {
  let low = 0;
  let high = 4093; // a template has at most 4,096 characters
  while (low < high) {
    const mid = (low + high + 1) >> 1;
    const t: Templates = { priority: "{order}".repeat(4), doc: "{n}" + "d".repeat(mid), separator: " > ", dedup: "" };
    if (priorityBytes(t, n) <= limit) low = mid;
    else high = mid - 1;
  }
  return low;
}

// ---------------------------------------------------------------------------------------------
// Property test

const ANNOTATION_LIMIT = 256 * KiB;
const CASES = 400;
const SEED = 0x18_2024;

/**
 * Template pieces: ASCII, multi-byte and astral characters (UTF-8 2 to 4 bytes),
 * characters JSON escapes ("\"", "\\", control characters: up to 6 answer bytes
 * for 1 annotation byte), lone surrogates between ASCII (counted as 3 UTF-8 bytes,
 * escaped as 6), String.replace's "$" patterns, stray braces, and the other
 * templates' placeholders (they must stay literal).
 */
const PIECES = ["a", "b", " ", "Doc", "é", "中文", "😀", "\u0001", "\n", "\t", '"', "\\", "x\ud800y", "q\udc00r", "$&", "$`", "$'", "$$", "$1", "{", "}", "{n", "n}", "{order}", "{n}", "{doc}", "{{", "}}"];

function randomTemplate(random: () => number, placeholder: string | null): string {
  // Log-uniform target length 0..4,000 characters, placeholders excluded.
  const target = Math.floor(Math.exp(random() * Math.log(4000)));
  const parts: string[] = [];
  let length = 0;
  while (length < target) {
    // Mostly plain letters, so long templates are cheap to build; the rest from PIECES.
    const piece = random() < 0.5 ? "abcdefgh".slice(0, 1 + Math.floor(random() * 8)) : PIECES[Math.floor(random() * PIECES.length)]!;
    if (piece === placeholder) continue; // placeholders are inserted below, counted
    parts.push(piece);
    length += piece.length;
  }
  if (placeholder !== null) {
    // 1 to the limit, and beyond it one time in ten.
    const count = random() < 0.1 ? PLACEHOLDER_LIMIT + 1 + Math.floor(random() * 3) : 1 + Math.floor(random() * PLACEHOLDER_LIMIT);
    for (let i = 0; i < count; i++) parts.splice(Math.floor(random() * (parts.length + 1)), 0, placeholder);
  }
  const text = parts.join("");
  // At most 4,000 + 8 + 7 x 7 characters: within the 4,096 a template may have (a longer one is another 400).
  if (text.length > 4096) throw new Error(`template of ${text.length} characters`);
  return text;
}

interface Model {
  /** Per conversation: block key -> label when first sent. */
  conversations: Map<string, Map<string, string>>;
}

const keyOf = (block: number | string) => `${typeof block}:${block}`;

/** Distinct blocks (integers and strings) from a small pool, so dedup finds earlier ones. */
function drawBlocks(random: () => number, count: number, taken: Set<string>): (number | string)[] {
  const blocks: (number | string)[] = [];
  while (blocks.length < count) {
    const id = Math.floor(random() * 3000);
    const block = random() < 0.5 ? id : `s${id}`;
    if (taken.has(keyOf(block))) continue;
    taken.add(keyOf(block));
    blocks.push(block);
  }
  return blocks;
}

/** Random counts: 1..1024 (log-uniform-ish, so small and large both come up). */
const randomCount = (random: () => number, most: number) => Math.min(most, Math.max(1, Math.floor(Math.exp(random() * Math.log(most + 1)))));

/**
 * A bound on a 200 answer's body length that holds whatever the server renders
 * within its limit: each block comes back at most twice (reorder: in "blocks";
 * dedup: in "blocks" and, replaced, in "duplicates") as JSON no longer than it was
 * sent (JSON.stringify writes each string with no more escapes than any valid
 * input spelling needs); each block adds at most 8 bytes of numbers ("order":
 * "1023," and commas); each context at most 192 bytes (its keys, a 37-character
 * request id, prefix counts, quotes and the schedule entry); the annotations are
 * at most the limit in UTF-8 bytes, and JSON escaping turns one UTF-8 byte into
 * at most 6 answer bytes (a control character as \u00XX; a lone surrogate is 3
 * bytes counted and 6 written); 1 KiB for the envelope.
 */
function answerBound(requestBytes: number, blocks: number, contexts: number): number {
  return 2 * requestBytes + 8 * blocks + 192 * contexts + 6 * ANNOTATION_LIMIT + KiB;
}

describe(`annotation amplification, property test (${CASES} seeded requests, --max-annotation-bytes ${ANNOTATION_LIMIT})`, () => {
  let server: TestServer;
  beforeAll(async () => {
    // Dedup budget off: the model below knows every conversation's labels and assumes none is forgotten.
    server = await startTestServer({ service: { maxAnnotationBytes: ANNOTATION_LIMIT, maxDedupBytes: null } });
  });
  afterAll(async () => {
    await server.close();
  });

  test("every answer is the predicted 400 or an exact 200 within the bound", async () => {
    const random = seededRandom(SEED);
    const model: Model = { conversations: new Map() };
    const tally = { ok: 0, placeholders: 0, annotationLimit: 0, largestAnswer: 0, largestAnnotations: 0 };
    for (let c = 0; c < CASES; c++) {
      const given: Partial<Templates> = {};
      if (random() < 0.8) given.priority = randomTemplate(random, "{order}");
      if (random() < 0.8) given.doc = randomTemplate(random, "{n}");
      if (random() < 0.6) given.separator = randomTemplate(random, null);
      if (random() < 0.6) given.dedup = randomTemplate(random, "{doc}");
      const t: Templates = { ...DEFAULT_TEMPLATES, ...given };
      const overPlaceholders =
        occurrences(t.priority, "{order}") > PLACEHOLDER_LIMIT || occurrences(t.doc, "{n}") > PLACEHOLDER_LIMIT || occurrences(t.dedup, "{doc}") > PLACEHOLDER_LIMIT;
      const conversationId = `conversation-${Math.floor(random() * 3)}`;
      const isDedup = random() < 0.35;
      const taken = new Set<string>();
      const context = `case ${c} (${isDedup ? "dedup" : "reorder"}, templates ${JSON.stringify(given).slice(0, 300)}…)`;

      if (isDedup) {
        const blocks = drawBlocks(random, randomCount(random, 1024), taken);
        const seen = model.conversations.get(conversationId) ?? new Map<string, string>();
        const notes = blocks.map((b) => (seen.has(keyOf(b)) ? noteOf(t, seen.get(keyOf(b))!) : null));
        const annotationBytes = notes.reduce((sum, note) => sum + (note === null ? 0 : utf8(note)), 0);
        const body = JSON.stringify({ conversation_id: conversationId, blocks, templates: given });
        const answer = await server.post("/v1/dedup", body);
        const outcome = expectOutcome(answer, overPlaceholders, annotationBytes, context);
        tally[outcome]++;
        if (outcome !== "ok") continue;
        expect(Buffer.byteLength(answer.text)).toBeLessThanOrEqual(answerBound(Buffer.byteLength(body), blocks.length, 1));
        tally.largestAnswer = Math.max(tally.largestAnswer, Buffer.byteLength(answer.text));
        tally.largestAnnotations = Math.max(tally.largestAnnotations, annotationBytes);
        expect(answer.body.blocks).toEqual(blocks.map((b, i) => notes[i] ?? b));
        expect(answer.body.duplicates).toEqual(blocks.filter((_, i) => notes[i] !== null));
        blocks.forEach((b, i) => seen.has(keyOf(b)) || seen.set(keyOf(b), label(t, i + 1)));
        model.conversations.set(conversationId, seen);
      } else {
        const contexts = Array.from({ length: randomCount(random, 4) }, () => drawBlocks(random, randomCount(random, 1024), taken));
        const withConversation = random() < 0.4;
        const annotationBytes = contexts.reduce((sum, blocks) => sum + priorityBytes(t, blocks.length), 0);
        const body = JSON.stringify({ contexts, templates: given, ...(withConversation ? { conversation_id: conversationId } : {}) });
        const answer = await server.post("/v1/reorder", body);
        const outcome = expectOutcome(answer, overPlaceholders, annotationBytes, context);
        tally[outcome]++;
        if (outcome !== "ok") continue;
        const blockCount = contexts.reduce((sum, blocks) => sum + blocks.length, 0);
        expect(Buffer.byteLength(answer.text)).toBeLessThanOrEqual(answerBound(Buffer.byteLength(body), blockCount, contexts.length));
        tally.largestAnswer = Math.max(tally.largestAnswer, Buffer.byteLength(answer.text));
        tally.largestAnnotations = Math.max(tally.largestAnnotations, annotationBytes);
        const seen = model.conversations.get(conversationId) ?? new Map<string, string>();
        answer.body.results.forEach((result: any, i: number) => {
          const sent = contexts[i]!;
          expect(result.blocks).toEqual(result.order.map((o: number) => sent[o]));
          expect(result.annotation).toBe(priorityOf(t, result.order));
          if (withConversation) result.blocks.forEach((b: number | string, p: number) => seen.has(keyOf(b)) || seen.set(keyOf(b), label(t, p + 1)));
        });
        if (withConversation) model.conversations.set(conversationId, seen);
      }
    }
    console.log(`amplification property test: ${JSON.stringify(tally)}`);
    // The seed reaches all three outcomes.
    expect(tally.ok).toBeGreaterThan(0);
    expect(tally.placeholders).toBeGreaterThan(0);
    expect(tally.annotationLimit).toBeGreaterThan(0);
  }, 60_000);
});

/** Checks the status against the model's prediction; returns the outcome. */
function expectOutcome(answer: { status: number; body: any; text: string }, overPlaceholders: boolean, annotationBytes: number, context: string): "ok" | "placeholders" | "annotationLimit" {
  const message: string = answer.body?.error?.message ?? "";
  if (overPlaceholders) {
    expect({ context, status: answer.status, placeholders: message.includes(`at most ${PLACEHOLDER_LIMIT} times`) }).toEqual({ context, status: 400, placeholders: true });
    return "placeholders";
  }
  if (annotationBytes > ANNOTATION_LIMIT) {
    expect({ context, status: answer.status, field: answer.body?.error?.field, named: message.includes("--max-annotation-bytes") }).toEqual({ context, status: 400, field: "templates", named: true });
    return "annotationLimit";
  }
  expect({ context, status: answer.status, error: message }).toEqual({ context, status: 200, error: "" });
  return "ok";
}
