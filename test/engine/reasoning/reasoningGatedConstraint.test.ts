/**
 * The gate between the reasoning and the grammar, over a recording stand-in for the grammar (the
 * real one against xgrammar is exercised end to end in test/server/reasoning.test.ts).
 */
import { describe, expect, test } from "bun:test";
import type { GrammarConstraint } from "../../../src/engine/grammarConstraint.ts";
import { ReasoningGatedConstraint } from "../../../src/engine/reasoning/reasoningGatedConstraint.ts";
import { ReasoningTracker, type ReasoningVocabulary } from "../../../src/engine/reasoning/reasoningTracker.ts";
import type { ReasoningStart } from "../../../src/engine/reasoning/reasoningParser.ts";

// Ids 0..255: bytes; 300 `<think>`, 301 `</think>`, 302 `</think>\n\n`.
const WORDS = new Map([
  [300, "<think>"],
  [301, "</think>"],
  [302, "</think>\n\n"],
]);
const vocabulary: ReasoningVocabulary = { openToken: 300, tokenBytes: (id) => WORDS.get(id) ?? String.fromCharCode(id) };
const ids = (text: string) => [...text].map((c) => c.charCodeAt(0));
const VOCAB = 310;
/** The end-of-sequence token. */
const EOS = 305;
const STOPS = new Set([EOS]);
/** Every token but the stop token. */
const allButStop = (allowed: boolean[]) => allowed.every((value, id) => value === (id !== EOS));
/** The stand-in grammar allows "{" and "}" only, and records what it is told. */
const ALLOWED = new Set(ids("{}"));

function grammar() {
  const accepted: number[] = [];
  const calls: string[] = [];
  let terminated = false;
  const inner = {
    failure: null,
    get terminated() {
      return terminated;
    },
    hasMask: true,
    prepare: () => void calls.push("prepare"),
    ready: async () => void calls.push("ready"),
    masked(logits: Float32Array) {
      calls.push("masked");
      return logits.map((value, id) => (ALLOWED.has(id) ? value : -Infinity));
    },
    accept(id: number) {
      accepted.push(id);
      if (id === "}".charCodeAt(0)) terminated = true;
    },
    jumpForward: async () => [ids("{")[0]!],
    dispose: () => void calls.push("dispose"),
  };
  return { inner: inner as unknown as GrammarConstraint, accepted, calls };
}

/** A sequence's order: the constraint takes the token, then the tracker sees it appended. */
function run(start: Exclude<ReasoningStart, "content">, tokens: readonly number[]) {
  const tracker = new ReasoningTracker(start, vocabulary);
  const { inner, accepted, calls } = grammar();
  const gate = new ReasoningGatedConstraint(inner, tracker, STOPS);
  const allowedAt: boolean[][] = [];
  for (const id of tokens) {
    const masked = gate.masked(new Float32Array(VOCAB).fill(1));
    allowedAt.push([...masked].map((value) => value > -Infinity));
    gate.accept(id);
    tracker.push(id);
  }
  return { tracker, gate, accepted, calls, allowedAt };
}

describe("ReasoningGatedConstraint", () => {
  test("inside the reasoning every token but the stop tokens is allowed and the grammar hears nothing; after </think> (split in bytes) it applies", async () => {
    const { tracker, gate, accepted, allowedAt } = run("reasoning", [...ids("x</think>"), ...ids("{}")]);
    for (const allowed of allowedAt.slice(0, 9)) expect(allButStop(allowed)).toBe(true);
    expect(allowedAt[9]!.filter(Boolean).length).toBe(2);
    expect(accepted).toEqual(ids("{}"));
    expect(gate.terminated).toBe(true);
    expect(tracker.reasoningTokens).toBe(9);
    expect(await gate.jumpForward(4)).toEqual(ids("{"));
  });

  test("no jump-forward, no mask asked, not terminated while reasoning", async () => {
    const tracker = new ReasoningTracker("reasoning", vocabulary);
    const { inner, calls } = grammar();
    const gate = new ReasoningGatedConstraint(inner, tracker, STOPS);
    gate.prepare();
    await gate.ready();
    expect(gate.hasMask).toBe(true);
    expect(await gate.jumpForward(4)).toEqual([]);
    expect(gate.terminated).toBe(false);
    expect(calls).toEqual([]);
    gate.dispose();
    expect(calls).toEqual(["dispose"]);
  });

  test("qwen3 undecided: the grammar's tokens or <think>; the grammar's make it content at once", () => {
    const content = run("opening", ids("{}"));
    expect(content.allowedAt[0]!.flatMap((allowed, id) => (allowed ? [id] : []))).toEqual([...ids("{}"), 300]);
    expect(content.accepted).toEqual(ids("{}"));
    expect(content.tracker.reasoningTokens).toBe(0);
    const thinking = run("opening", [300, ...ids("ab"), 302, ...ids("{}")]);
    expect(thinking.accepted).toEqual(ids("{}"));
    expect(thinking.tracker.reasoningTokens).toBe(4);
    expect(allButStop(thinking.allowedAt[1]!)).toBe(true);
  });

  test("a vocabulary of stop tokens only: the logits as they are", () => {
    const tracker = new ReasoningTracker("reasoning", vocabulary);
    const gate = new ReasoningGatedConstraint(grammar().inner, tracker, new Set([0, 1]));
    const logits = new Float32Array([1, 2]);
    expect(gate.masked(logits)).toBe(logits);
  });

  test("reasoning that never closes: the grammar never applies", () => {
    const { accepted, allowedAt, tracker } = run("reasoning", ids("<think>ab</thi"));
    expect(accepted).toEqual([]);
    for (const allowed of allowedAt) expect(allButStop(allowed)).toBe(true);
    expect(tracker.phase).toBe("reasoning");
  });
});
