/** RunnerTimeBudget (src/engine/runnerTimeBudget.ts): the share of a sliding window, on a hand-driven clock. */
import { describe, expect, test } from "bun:test";
import { RunnerTimeBudget } from "../../src/engine/runnerTimeBudget.ts";

describe("RunnerTimeBudget", () => {
  test("allows work while the window's busy time is under the share, then waits until enough slides out", () => {
    const budget = new RunnerTimeBudget(0.2, 1000);
    expect(budget.waitMs(0)).toBe(0);
    budget.record(0, 150);
    expect(budget.used(150)).toBe(150);
    expect(budget.waitMs(150)).toBe(0);
    budget.record(150, 250);
    expect(budget.used(250)).toBe(250);
    // 50 ms over the 200 ms share: the window's start must pass 50 ms into the first piece (at now 1050).
    expect(budget.waitMs(250)).toBe(1050 - 250 + 1);
    expect(budget.waitMs(1051)).toBe(0);
    expect(budget.used(2000)).toBe(0);
  });

  test("a share of 0 never runs, 1 always does; out-of-range shares are refused", () => {
    expect(new RunnerTimeBudget(0).waitMs(0)).toBe(Infinity);
    const all = new RunnerTimeBudget(1, 100);
    all.record(0, 100);
    expect(all.waitMs(100)).toBe(0);
    for (const bad of [-0.1, 1.5, NaN]) expect(() => new RunnerTimeBudget(bad)).toThrow(RangeError);
  });

  test("busy time is clipped to the window", () => {
    const budget = new RunnerTimeBudget(0.5, 100);
    budget.record(0, 80);
    expect(budget.used(120)).toBe(60);
    expect(budget.waitMs(120)).toBe(11);
  });
});
