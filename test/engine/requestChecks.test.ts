import { describe, expect, test } from "bun:test";
import { PromptTooLongError } from "../../src/engine/generationErrors.ts";
import type { GenerationRequest } from "../../src/engine/generationTypes.ts";
import { checkGenerationRequest, completionBudget } from "../../src/engine/requestChecks.ts";

const VOCAB = 100;
const MAX_LEN = 32;
const request = (extra: Partial<GenerationRequest> = {}): GenerationRequest => ({ promptIds: [1, 2, 3], maxTokens: 8, sampling: { temperature: 0, topP: 1, topK: 0 }, ...extra });

/** The PromptTooLongError the check throws (fails the test when it throws none or another). */
function refusal(check: () => unknown): PromptTooLongError {
  try {
    check();
  } catch (error) {
    expect(error).toBeInstanceOf(PromptTooLongError);
    return error as PromptTooLongError;
  }
  throw new Error("no error thrown");
}

describe("completionBudget", () => {
  test("max_tokens as asked, or the room the context leaves", () => {
    expect(completionBudget(10, 5, MAX_LEN)).toBe(5);
    expect(completionBudget(10, null, MAX_LEN)).toBe(22);
    expect(completionBudget(10, 22, MAX_LEN)).toBe(22);
  });

  test("a prompt that fills the context, or prompt + max_tokens past it, is refused as over length", () => {
    const full = refusal(() => completionBudget(32, 1, MAX_LEN));
    expect(full).toMatchObject({ field: "prompt", overLength: true });
    expect(full.message).toContain("at most 31");
    const over = refusal(() => completionBudget(10, 23, MAX_LEN));
    expect(over).toMatchObject({ field: "max_tokens", overLength: true });
    expect(over.message).toContain("33 were requested (10 in the prompt, 23 in max_tokens)");
  });

  test("max_tokens below 1 or fractional names max_tokens", () => {
    for (const bad of [0, -1, 1.5]) expect(refusal(() => completionBudget(3, bad, MAX_LEN))).toMatchObject({ field: "max_tokens", overLength: false });
  });
});

describe("checkGenerationRequest", () => {
  test("a good request passes with its budget", () => {
    expect(checkGenerationRequest(request(), VOCAB, MAX_LEN)).toBe(8);
    expect(checkGenerationRequest(request({ minTokens: 0, kvBudget: 1, recomputeRatio: 0, deadlineMs: 5 }), VOCAB, MAX_LEN)).toBe(8);
  });

  test("each bad field is refused with a message that names it", () => {
    const cases: [Partial<GenerationRequest>, PromptTooLongError["field"], string][] = [
      [{ promptIds: [] }, "prompt", "the prompt is empty"],
      [{ promptIds: [1, 100] }, "prompt", "prompt token 100 is not in the model's vocabulary (0 to 99)"],
      [{ promptIds: [1, -1] }, "prompt", "prompt token -1"],
      [{ promptIds: [1, 2.5] }, "prompt", "prompt token 2.5"],
      [{ recomputeRatio: 1.5 }, "prompt", "recompute_ratio must be between 0 and 1"],
      [{ minTokens: -1 }, "max_tokens", "min_tokens must be a non-negative integer"],
      [{ kvBudget: 0 }, "prompt", "kv_budget must be in (0, 1]"],
      [{ kvBudget: 1.5 }, "prompt", "kv_budget must be in (0, 1]"],
      [{ promptLogprobs: 1, segments: { segments: [{ kind: "head", tokens: [1, 2], hash: "h" }], question: [3] } }, "prompt", "prompt logprobs"],
    ];
    for (const [extra, field, message] of cases) {
      const error = refusal(() => checkGenerationRequest(request(extra), VOCAB, MAX_LEN));
      expect(error.field).toBe(field);
      expect(error.message).toContain(message);
    }
  });

  test("a bad deadline is a RangeError; promptIds that are not the segments' tokens are a caller's bug", () => {
    expect(() => checkGenerationRequest(request({ deadlineMs: 0 }), VOCAB, MAX_LEN)).toThrow(RangeError);
    expect(() => checkGenerationRequest(request({ segments: { segments: [{ kind: "head", tokens: [1, 2], hash: "h" }], question: [4] } }), VOCAB, MAX_LEN)).toThrow("promptIds must be the segments' tokens");
  });
});
