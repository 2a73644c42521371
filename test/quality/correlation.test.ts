/** src/quality/correlation.ts: Pearson's r against hand-worked values. */
import { expect, test } from "bun:test";
import { pearson } from "../../src/quality/correlation.ts";

test("r is 1 and -1 on lines, the closed form otherwise, null when undefined", () => {
  expect(pearson([1, 2, 3, 4], [3, 5, 7, 9])).toBeCloseTo(1, 12);
  expect(pearson([1, 2, 3, 4], [8, 6, 4, 2])).toBeCloseTo(-1, 12);
  // x = 1,2,3; y = 1,3,2: sxy = 1, sxx = 2, syy = 2 → r = 0.5.
  expect(pearson([1, 2, 3], [1, 3, 2])).toBeCloseTo(0.5, 12);
  expect(pearson([1], [2])).toBeNull();
  expect(pearson([1, 1, 1], [1, 2, 3])).toBeNull();
  expect(() => pearson([1, 2], [1])).toThrow(/2 vs 1/);
});
