import { describe, expect, test } from "bun:test";
import { clusterOrdering } from "../../src/index/clusterOrdering.ts";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";

describe("clusterOrdering (ContextPilot Algorithm 4)", () => {
  test("the paper's Figure 5/6 example: C1 {2,1,3}, C2 {2,6,1}, C3 {4,1,0}", () => {
    const set = contextSetFromArrays([[2, 1, 3], [2, 6, 1], [4, 1, 0]]);
    const { ordered } = clusterOrdering(set, { alpha: 0.001, linkage: "average" });
    const blocks = (c: number) => Array.from(ordered.subarray(set.offsets[c]!, set.offsets[c + 1]!), (b) => set.blockIds[b]);
    // C1 and C2 merge first into {1, 2}; the root holds {1}. Prefixes first, the rest in input order.
    expect(blocks(0)).toEqual([1, 2, 3]);
    expect(blocks(1)).toEqual([1, 2, 6]);
    expect(blocks(2)).toEqual([1, 4, 0]);
  });

  test("contexts sharing nothing keep their order; one context is left alone", () => {
    const single = contextSetFromArrays([[3, 2, 1]]);
    expect(Array.from(clusterOrdering(single, { alpha: 0.001, linkage: "single" }).ordered)).toEqual(Array.from(single.flat));
    const disjoint = contextSetFromArrays([[1, 2], [3, 4], [5, 6]]);
    for (const linkage of ["average", "single", "complete"] as const) {
      expect(Array.from(clusterOrdering(disjoint, { alpha: 0.001, linkage }).ordered)).toEqual(Array.from(disjoint.flat));
    }
  });
});
