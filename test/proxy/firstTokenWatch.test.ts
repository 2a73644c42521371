/** Finding a streamed answer's first token (src/proxy/firstTokenWatch.ts) and the TTFT buckets (firstTokenTimes.ts). */
import { describe, expect, test } from "bun:test";
import { FirstTokenWatch } from "../../src/proxy/firstTokenWatch.ts";
import { FirstTokenTimes, firstTokenReuse } from "../../src/proxy/firstTokenTimes.ts";

const encoder = new TextEncoder();
/** The index of the piece in which the watch saw the first token (-1: none). */
function firstTokenPiece(pieces: string[]): number {
  const watch = new FirstTokenWatch();
  let found = -1;
  pieces.forEach((piece, i) => {
    if (watch.push(encoder.encode(piece))) {
      expect(found).toBe(-1); // once only
      found = i;
    }
  });
  return found;
}

describe("FirstTokenWatch", () => {
  const role = 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n';
  test("a role-only chunk is no token; the first content, reasoning, tool call, text or finish is", () => {
    expect(firstTokenPiece([role, ": keep-alive\n\n", 'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n', "data: [DONE]\n\n"])).toBe(2);
    expect(firstTokenPiece([role, 'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n'])).toBe(1);
    expect(firstTokenPiece([role, 'data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}\n\n'])).toBe(1);
    expect(firstTokenPiece(['data: {"choices":[{"index":0,"text":"x"}]}\n\n'])).toBe(0);
    expect(firstTokenPiece([role, 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'])).toBe(1);
    expect(firstTokenPiece([role, 'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n', "data: [DONE]\n\n"])).toBe(-1);
  });

  test("an event split across pieces is found in the piece that completes its line", () => {
    const event = 'data: {"choices":[{"delta":{"content":"é"}}]}\n\n';
    const bytes = encoder.encode(event);
    const watch = new FirstTokenWatch();
    const seen = [watch.push(bytes.subarray(0, 30)), watch.push(bytes.subarray(30, bytes.length - 3)), watch.push(bytes.subarray(bytes.length - 3))];
    expect(seen).toEqual([false, false, true]);
  });
});

describe("FirstTokenTimes", () => {
  test("buckets by the reported cached tokens; unknown when the usage said nothing of them", () => {
    expect(firstTokenReuse({ cachedTokens: 16, chunkReusedTokens: null })).toBe("reused");
    expect(firstTokenReuse({ cachedTokens: 0, chunkReusedTokens: 32 })).toBe("reused");
    expect(firstTokenReuse({ cachedTokens: 0, chunkReusedTokens: null })).toBe("not_reused");
    expect(firstTokenReuse({ cachedTokens: null, chunkReusedTokens: null })).toBe("unknown");
    expect(firstTokenReuse(null)).toBe("unknown");
    const times = new FirstTokenTimes();
    times.record(0.25, "reused");
    times.record(0.5, "reused");
    times.record(1, "unknown");
    expect(times.snapshot()).toEqual({ reused: { requests: 2, seconds: 0.75 }, not_reused: { requests: 0, seconds: 0 }, unknown: { requests: 1, seconds: 1 } });
  });
});
