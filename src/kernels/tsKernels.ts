/** The plain TypeScript kernels: the reference the WASM kernels are tested against. */
import { contextDistancePairsTs, contextDistanceRowsTs } from "./contextDistance.ts";
import { createKernels, type IndexKernels } from "./indexKernels.ts";
import { kendallTauTs } from "./kendallTau.ts";
import { linkageInPlace } from "./linkage.ts";
import { topKRowsTs, topPRowsTs } from "./topSelection.ts";
import { badScoreError, kendallSegmentError } from "./validate.ts";

export const tsKernels: IndexKernels = createKernels({
  name: "ts",
  distanceRows: contextDistanceRowsTs,
  distancePairs: contextDistancePairsTs,
  linkage: (condensed, n, method) => linkageInPlace(condensed.slice(), n, method),
  kendall(a, b, offsets) {
    const result = kendallTauTs(a, b, offsets);
    if ("bad" in result) throw kendallSegmentError("kendallTauDistances", result.bad, a, b, offsets);
    return result;
  },
  topKRows(scores, rows, rowLength, k) {
    const result = topKRowsTs(scores, rows, rowLength, k);
    if ("bad" in result) throw badScoreError("topK", scores, result.bad, rowLength);
    return result;
  },
  topPRows(scores, rows, rowLength, p) {
    const result = topPRowsTs(scores, rows, rowLength, p);
    if ("bad" in result) throw badScoreError("topP", scores, result.bad, rowLength);
    return result;
  },
});
