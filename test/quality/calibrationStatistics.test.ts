import { describe, expect, test } from "bun:test";
import { bootstrapLowerBound, calibratePolicies, cellFigures, type CellFigures } from "../../src/quality/calibrationStatistics.ts";

const outcome = (agreement: number) => ({ agreement, topOneAgrees: agreement > 0, klDivergence: 1 - agreement, reusedTokens: 10, recomputedTokens: 2 });

describe("bootstrapLowerBound", () => {
  test("is the mean for constant values, below the mean for spread ones, and tightens with more requests", () => {
    expect(bootstrapLowerBound([1, 1, 1])).toBe(1);
    const few = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1];
    const many = Array.from({ length: 20 }, () => few).flat();
    const bound = bootstrapLowerBound(few);
    expect(bound).toBeLessThan(0.8);
    expect(bound).toBeGreaterThan(0.4);
    expect(bootstrapLowerBound(many)).toBeGreaterThan(bound);
    expect(bootstrapLowerBound(many)).toBeLessThan(0.8);
    // Seeded: the same values give the same bound.
    expect(bootstrapLowerBound(few)).toBe(bound);
  });

  test("a 95% bound holds the true mean at least about 95% of the time on Bernoulli(0.8) requests", () => {
    let covered = 0;
    let state = 12345;
    const random = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
    for (let trial = 0; trial < 200; trial++) {
      const values = Array.from({ length: 40 }, () => (random() < 0.8 ? 1 : 0));
      if (bootstrapLowerBound(values, 0.95, 500, trial + 1) <= 0.8) covered++;
    }
    expect(covered / 200).toBeGreaterThanOrEqual(0.9);
  });
});

describe("calibratePolicies", () => {
  test("the smallest ratio whose mean meets the target, its bound, and the smallest whose bound does", () => {
    const cells: CellFigures[] = [
      cellFigures("prophet", 0.4, [1, 1, 1, 1].map(outcome)),
      cellFigures("prophet", 0.1, [0, 1, 0, 1].map(outcome)),
      cellFigures("prophet", 0.2, [1, 1, 1, 0.8].map(outcome)),
      cellFigures("epic", 0.2, [0, 0, 0, 0].map(outcome)),
    ];
    expect(cells[2]).toMatchObject({ agreement: 0.95, topOneAgreement: 1, recomputedShare: 0.2, requests: 4 });
    const [prophet, epic] = calibratePolicies(cells, 0.9);
    expect(prophet).toEqual({ policy: "prophet", ratio: 0.2, lowerBound: cells[2]!.lowerBound, confidentRatio: 0.4 });
    expect(prophet!.lowerBound!).toBeLessThan(0.95);
    expect(epic).toEqual({ policy: "epic", ratio: null, lowerBound: null, confidentRatio: null });
  });
});
