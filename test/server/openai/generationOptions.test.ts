import { describe, expect, test } from "bun:test";
import { generationOptions, stopStrings, truncatePrompt } from "../../../src/server/openai/generationOptions.ts";
import type { CompletionBody } from "../../../src/server/openaiSchemas.ts";

const body = (fields: Record<string, unknown>) => fields as unknown as CompletionBody;

describe("a body mapped to the engine's options", () => {
  test("defaults: temperature 1, top_p 1, no top_k, no stops, special tokens skipped, EOS honoured", () => {
    const options = generationOptions(body({ prompt: "x" }));
    expect(options).toMatchObject({ sampling: { temperature: 1, topP: 1, topK: 0 }, stop: [], stopTokenIds: [], includeStopInOutput: false, ignoreEos: false, skipSpecialTokens: true });
    expect(options.sampling.seed).toBeUndefined();
    expect(options.adjustments).toEqual({});
  });

  test("sampling, penalties, logit bias, the ctxr extension and the deadline are carried over", () => {
    const options = generationOptions(
      body({ temperature: 0.5, top_k: -1, seed: 7, min_p: 0.1, presence_penalty: 0.5, logit_bias: { "12": -100 }, min_tokens: 2, ctxr: { policy: "full", recompute_ratio: 0.3, deadline_ms: 500 } }),
    );
    expect(options.sampling).toEqual({ temperature: 0.5, topP: 1, topK: 0, seed: 7, minP: 0.1 });
    expect(options.adjustments).toEqual({ presencePenalty: 0.5, logitBias: new Map([[12, -100]]) });
    expect(options).toMatchObject({ kvPolicy: "full", recomputeRatio: 0.3, deadlineMs: 500, minTokens: 2 });
  });

  test("stop: one string or several", () => {
    expect(stopStrings(body({ stop: "\n" }))).toEqual(["\n"]);
    expect(stopStrings(body({ stop: ["a", "b"] }))).toEqual(["a", "b"]);
    expect(stopStrings(body({ stop: null }))).toEqual([]);
  });

  test("truncate_prompt_tokens keeps the prompt's last tokens", () => {
    expect(truncatePrompt(body({ truncate_prompt_tokens: 2 }), [1, 2, 3, 4])).toEqual([3, 4]);
    expect(truncatePrompt(body({ truncate_prompt_tokens: 9 }), [1, 2, 3])).toEqual([1, 2, 3]);
    expect(truncatePrompt(body({}), [1, 2, 3])).toEqual([1, 2, 3]);
  });
});
