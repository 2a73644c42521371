import { describe, expect, test } from "bun:test";
import { anchorCentered, newestKeysAnchor, SPARSE_ANCHORS, usesNewestKeys } from "../../src/kv/sparseAnchor.ts";

describe("newestKeysAnchor", () => {
  test("the mean over the tokens of each layer's keys, layer-major", () => {
    // 2 layers, 3 tokens, kv_width 2: layer l, token t, lane i holds 100l + 10t + i.
    const layers = [0, 1].map((l) => ({ k: Float32Array.from({ length: 6 }, (_, j) => 100 * l + 10 * Math.floor(j / 2) + (j % 2)) }));
    expect(Array.from(newestKeysAnchor(layers, 3, 2))).toEqual([10, 11, 110, 111]);
    // One token: its keys as they are.
    expect(Array.from(newestKeysAnchor([{ k: [1, -2, 3] }], 1, 3))).toEqual([1, -2, 3]);
  });

  test("refuses rows that do not match count × kvWidth, and a count or width under 1", () => {
    expect(() => newestKeysAnchor([{ k: [1, 2, 3] }], 2, 2)).toThrow("layer 0 holds 3 floats, not 2 × 2");
    expect(() => newestKeysAnchor([{ k: [] }], 0, 2)).toThrow("count must be an integer >= 1 (got 0)");
    expect(() => newestKeysAnchor([{ k: [1] }], 1, 0)).toThrow("kvWidth must be an integer >= 1 (got 0)");
  });
});

describe("anchor kinds", () => {
  test("only window does without the newest keys; only newest is uncentered", () => {
    expect(SPARSE_ANCHORS.map((kind) => [kind, usesNewestKeys(kind), anchorCentered(kind)])).toEqual([
      ["window", false, true],
      ["newest", true, false],
      ["newest-centered", true, true],
    ]);
  });
});
