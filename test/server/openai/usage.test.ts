import { describe, expect, test } from "bun:test";
import { usageOf } from "../../../src/server/openai/usage.ts";

const usage = (prefix: number, computed: number, ttft: number, queue: number) => ({
  prompt_tokens_prefix_reused: prefix,
  prompt_tokens_chunk_reused: 0,
  prompt_tokens_recomputed: 0,
  prompt_tokens_computed: computed,
  ttft_ms: ttft,
  queue_ms: queue,
});

describe("usageOf", () => {
  test("each prompt counted once (its first choice), every choice's completion tokens, the largest ttft and queue", () => {
    const results = [
      { promptTokens: 10, completionTokens: 3, ctxr: usage(0, 10, 5, 1) },
      { promptTokens: 10, completionTokens: 4, ctxr: usage(8, 2, 9, 2) },
      { promptTokens: 20, completionTokens: 5, ctxr: usage(16, 4, 7, 6) },
      { promptTokens: 20, completionTokens: 6, ctxr: usage(16, 4, 1, 0) },
    ];
    const answer = usageOf(results, 2);
    expect(answer).toMatchObject({ prompt_tokens: 30, completion_tokens: 18, total_tokens: 48, prompt_tokens_details: { cached_tokens: 16 } });
    expect(answer.ctxr).toMatchObject({ prompt_tokens_prefix_reused: 16, prompt_tokens_computed: 14, ttft_ms: 9, queue_ms: 6 });
  });

  test("tier hits and sparse decode add up; a result without ctxr usage adds nothing to them", () => {
    const tiered = { ...usage(0, 4, 1, 0), tier_hits: { device: 1, host: 2, disk: 0, remote: 1 }, sparse_decode_steps: 3 };
    const answer = usageOf([{ promptTokens: 4, completionTokens: 1, ctxr: tiered }, { promptTokens: 4, completionTokens: 1, ctxr: tiered }, { promptTokens: 2, completionTokens: 1 }]);
    expect(answer.ctxr.tier_hits).toEqual({ device: 2, host: 4, disk: 0, remote: 2 });
    expect(answer.ctxr.sparse_decode_steps).toBe(6);
    expect(answer.prompt_tokens).toBe(10);
  });
});
