/** Which sliding-window blocks a sequence still needs, and the longest resume whose window checkpoints are cached. */
import { describe, expect, test } from "bun:test";
import { checkpointSpan, firstLiveBlock, longestSlidingResume, windowStartBlock } from "../../src/kv/slidingWindowSpan.ts";

describe("slidingWindowSpan", () => {
  test("the first block a token reads: index + 1 − window, floored to its block", () => {
    expect(windowStartBlock(0, 512, 16)).toBe(0);
    expect(windowStartBlock(511, 512, 16)).toBe(0);
    expect(windowStartBlock(512, 512, 16)).toBe(0); // reads 1..512
    expect(windowStartBlock(527, 512, 16)).toBe(1); // reads 16..527
    expect(windowStartBlock(100, 24, 16)).toBe(4); // reads 77..100
  });

  test("a running sequence keeps the window before its last block boundary: at most ceil(window/block)+1 blocks hold its entries", () => {
    for (const [window, block] of [[512, 16], [24, 16], [16, 16], [20, 32], [1, 16]] as const) {
      for (let length = 1; length < 3 * window + 3 * block; length++) {
        const first = firstLiveBlock(length, window, block);
        const held = Math.ceil(length / block) - first;
        expect(held).toBeLessThanOrEqual(Math.ceil(window / block) + 1);
        // Everything the next token reads (length + 1 − window .. length − 1) is kept...
        expect(first * block).toBeLessThanOrEqual(Math.max(0, length + 1 - window));
        // ...and what a resume at the last boundary P reads too.
        const boundary = Math.floor(length / block) * block;
        expect(first).toBe(checkpointSpan(boundary / block, window, block).first);
      }
    }
  });

  test("the longest resume needs the checkpoints of its whole window; the full-attention run bounds it", () => {
    const window = 40, block = 16;
    // Blocks 5, 6, 7 cached: a resume after 8 blocks (P = 128) reads 89..127, blocks 5..7.
    const cached = new Set([5, 6, 7]);
    expect(checkpointSpan(8, window, block)).toEqual({ first: 5, end: 8 });
    expect(longestSlidingResume(8, (i) => cached.has(i), window, block)).toBe(8);
    expect(longestSlidingResume(10, (i) => cached.has(i), window, block)).toBe(8);
    expect(longestSlidingResume(7, (i) => cached.has(i), window, block)).toBe(0);
    cached.delete(5);
    expect(longestSlidingResume(10, (i) => cached.has(i), window, block)).toBe(0);
    // Short prompts: a resume inside the first window needs every block before it.
    expect(longestSlidingResume(2, (i) => i < 2, window, block)).toBe(2);
    expect(longestSlidingResume(2, (i) => i === 1, window, block)).toBe(0);
  });
});
