import { describe, expect, test } from "bun:test";
import type { FinishReason, GenerationRequest } from "../../src/engine/generationTypes.ts";
import { Sequence } from "../../src/engine/sequence.ts";
import { appendToken, withoutStopTokens } from "../../src/engine/tokenOutput.ts";

const EOS = 1;
/** Ids 97.. are the letters; every other id decodes to nothing. */
const decoder = { decode: (ids: readonly number[]) => ids.map((id) => (id >= 97 && id < 123 ? String.fromCharCode(id) : "")).join("") };
const ids = (text: string) => [...text].map((c) => c.charCodeAt(0));

function sequence(extra: Partial<GenerationRequest>, maxTokens = 16): Sequence {
  const request: GenerationRequest = { promptIds: ids("xy"), maxTokens, sampling: { temperature: 0, topP: 1, topK: 0 }, stopTokenIds: [EOS], ...extra };
  return new Sequence(request, decoder, 4, maxTokens);
}

/** Appends the ids one by one until one ends the sequence: the whole text, and why it ended (null: it did not). */
function run(seq: Sequence, tokens: number[], maxModelLen = 64): { text: string; finish: FinishReason | null; used: number } {
  let text = "";
  for (let i = 0; i < tokens.length; i++) {
    const out = appendToken(seq, { id: tokens[i]! }, maxModelLen);
    text += out.text;
    if (out.finish !== null) return { text, finish: out.finish, used: i + 1 };
  }
  return { text, finish: null, used: tokens.length };
}

describe("appendToken", () => {
  test("a stop string ends the text before it, at the token that completes it", () => {
    const seq = sequence({ stop: ["cd"] });
    expect(run(seq, ids("abcdef"))).toEqual({ text: "ab", finish: "stop", used: 4 });
    expect(seq.generated).toBe(4);
    expect(seq.tokens).toEqual([...ids("xy"), ...ids("abcd")]);
  });

  test("with includeStopInOutput the stop string is part of the text", () => {
    expect(run(sequence({ stop: ["cd"], includeStopInOutput: true }), ids("abcdef"))).toEqual({ text: "abcd", finish: "stop", used: 4 });
  });

  test("a stop token ends the sequence", () => {
    expect(run(sequence({}), [...ids("ab"), EOS, ...ids("c")])).toEqual({ text: "ab", finish: "stop", used: 3 });
  });

  test("max_tokens and the context length end it with length", () => {
    expect(run(sequence({}, 3), ids("abcdef"))).toEqual({ text: "abc", finish: "length", used: 3 });
    // The prompt's 2 tokens + 2 generated reach a context of 4.
    expect(run(sequence({}), ids("abcdef"), 4)).toEqual({ text: "ab", finish: "length", used: 2 });
  });

  test("before min_tokens neither a stop token nor a stop string ends it", () => {
    expect(run(sequence({ minTokens: 3, stop: ["a"] }), [...ids("a"), EOS, ...ids("ba")])).toEqual({ text: "ab", finish: "stop", used: 4 });
  });
});

describe("withoutStopTokens", () => {
  const stop = new Set([EOS]);
  test("stop tokens go to -Infinity, on a copy of shared logits", () => {
    const logits = Float32Array.from([0, 5, 1]);
    const out = withoutStopTokens(logits, true, stop);
    expect(Array.from(out)).toEqual([0, -Infinity, 1]);
    expect(logits[1]).toBe(5);
    const own = Float32Array.from([0, 5, 1]);
    expect(withoutStopTokens(own, false, stop)).toBe(own);
    expect(own[1]).toBe(-Infinity);
  });

  test("logits that allow only a stop token stay as they are", () => {
    const logits = Float32Array.from([-Infinity, 5, -Infinity]);
    expect(Array.from(withoutStopTokens(logits, true, stop))).toEqual([-Infinity, 5, -Infinity]);
  });
});
