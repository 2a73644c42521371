/** src/quality/answerAgreement.ts: the audit's first-token and greedy-token comparisons. */
import { describe, expect, test } from "bun:test";
import { argmax, compareFirstToken, compareGreedyTokens, klDivergence } from "../../src/quality/answerAgreement.ts";

describe("first token", () => {
  test("identical rows: top-1 agrees, KL 0; a shifted row (same softmax) too", () => {
    const row = [1.5, -2, 3.25, 0];
    expect(compareFirstToken(row, row)).toEqual({ topOneAgrees: true, klDivergence: 0 });
    expect(compareFirstToken(row, row.map((x) => x + 7)).klDivergence).toBeCloseTo(0, 12);
  });

  test("KL(full ‖ reused) matches the closed form, and is not symmetric", () => {
    const full = [Math.log(0.5), Math.log(0.25), Math.log(0.25)];
    const reused = [Math.log(0.25), Math.log(0.5), Math.log(0.25)];
    const expected = 0.5 * Math.log(2) + 0.25 * Math.log(0.5);
    expect(klDivergence(full, reused)).toBeCloseTo(expected, 12);
    const skewed = [Math.log(0.9), Math.log(0.05), Math.log(0.05)];
    expect(klDivergence(full, skewed)).not.toBeCloseTo(klDivergence(skewed, full), 3);
    const c = compareFirstToken(full, reused);
    expect(c.topOneAgrees).toBe(false);
    expect(c.klDivergence).toBeCloseTo(expected, 12);
  });

  test("masked tokens: none in full adds nothing; one full needs and reused masks is Infinity", () => {
    expect(klDivergence([0, -Infinity], [0, 5])).toBeGreaterThan(0);
    expect(klDivergence([0, -Infinity], [0, -Infinity])).toBe(0);
    expect(klDivergence([0, 0], [0, -Infinity])).toBe(Infinity);
  });

  test("rows of different vocabularies are an error; argmax takes the first of ties", () => {
    expect(() => klDivergence([0, 1], [0, 1, 2])).toThrow(/2 vs 3/);
    expect(argmax([1, 3, 3, 2])).toBe(1);
  });
});

describe("greedy tokens", () => {
  test("the agreement is the common prefix over the tokens compared", () => {
    expect(compareGreedyTokens([5, 6, 7, 8], [5, 6, 7, 8])).toEqual({ tokens: 4, agreedPrefix: 4, agreement: 1 });
    expect(compareGreedyTokens([5, 6, 7, 8], [5, 9, 7, 8])).toEqual({ tokens: 4, agreedPrefix: 1, agreement: 0.25 });
    expect(compareGreedyTokens([5, 6, 7, 8], [1, 6, 7, 8]).agreement).toBe(0);
  });

  test("a continuation that stopped early is compared over the shorter length; none compared is 1", () => {
    expect(compareGreedyTokens([5, 6, 7], [5, 6])).toEqual({ tokens: 2, agreedPrefix: 2, agreement: 1 });
    expect(compareGreedyTokens([], [1])).toEqual({ tokens: 0, agreedPrefix: 0, agreement: 1 });
  });
});
