/**
 * mergeForwardParts: one FORWARD's result from its parts' — logits rows in order, statistics rows
 * concatenated and padded with zeros to the widest part (later entries and chunks were not visible
 * to an earlier part's tokens), chunk × chunk sums added; early stop is refused.
 */
import { describe, expect, test } from "bun:test";
import { mergeForwardParts } from "../../src/kv/forwardResultMerge.ts";
import type { AttentionStats, ForwardResult } from "../../src/runner/runnerProtocol.ts";

function stats(queries: number, len: number, nChunks: number, perChunk: boolean, fill: number): AttentionStats {
  const width = perChunk ? nChunks : len;
  return {
    mass: Float32Array.from({ length: queries * width }, (_, i) => fill + i),
    queries,
    len,
    perChunk,
    chunks: Float32Array.from({ length: nChunks * nChunks }, (_, i) => fill * 10 + i),
    nChunks,
  };
}

describe("mergeForwardParts", () => {
  test("one part is returned as it is", () => {
    const part: ForwardResult = { logits: [Float32Array.of(1, 2)] };
    expect(mergeForwardParts([part])).toBe(part);
  });

  test("logits rows concatenate in order", () => {
    const merged = mergeForwardParts([{ logits: [Float32Array.of()] }, { logits: [Float32Array.of(1, 2, 3)] }, { logits: [Float32Array.of(4, 5, 6)] }]);
    expect(Array.from(merged.logits[0]!)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(merged.stats).toBeUndefined();
  });

  test("entry-mode rows are padded to the last part's len, per layer", () => {
    const merged = mergeForwardParts([
      { logits: [new Float32Array(0)], stats: [[stats(2, 3, 0, false, 1), stats(2, 3, 0, false, 100)]] },
      { logits: [new Float32Array(0)], stats: [[stats(1, 5, 0, false, 7), stats(1, 5, 0, false, 700)]] },
    ]);
    const layer0 = merged.stats![0]![0]!;
    expect(layer0.queries).toBe(3);
    expect(layer0.len).toBe(5);
    expect(Array.from(layer0.mass)).toEqual([1, 2, 3, 0, 0, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11]);
    expect(Array.from(merged.stats![0]![1]!.mass.subarray(0, 5))).toEqual([100, 101, 102, 0, 0]);
  });

  test("chunk-mode rows are padded to the most chunks and chunk sums add up", () => {
    const merged = mergeForwardParts([
      { logits: [new Float32Array(0)], stats: [[stats(1, 10, 1, true, 1)]] },
      { logits: [new Float32Array(0)], stats: [[stats(2, 30, 2, true, 2)]] },
    ]);
    const layer = merged.stats![0]![0]!;
    expect(layer.nChunks).toBe(2);
    expect(layer.perChunk).toBe(true);
    expect(Array.from(layer.mass)).toEqual([1, 0, 2, 3, 4, 5]);
    // Part 1's 1×1 sums (10) land on chunk 0 × 0; part 2's 2×2 are 20, 21, 22, 23.
    expect(Array.from(layer.chunks)).toEqual([30, 21, 22, 23]);
  });

  test("early-stop results and a mix of parts with and without statistics are refused", () => {
    const stop: ForwardResult = { logits: [new Float32Array(0)], stats: [[stats(1, 2, 1, true, 0)]], earlyStop: [{ cutoffLayer: 1, focused: [0] }] };
    expect(() => mergeForwardParts([stop, stop])).toThrow(/early-stop results cannot be merged/);
    expect(() => mergeForwardParts([{ logits: [new Float32Array(0)] }, { logits: [new Float32Array(0)], stats: [[stats(1, 2, 1, true, 0)]] }])).toThrow(/some parts have statistics/);
    expect(() => mergeForwardParts([])).toThrow(/no parts/);
  });
});
