import { describe, expect, test } from "bun:test";
import { coarseCandidateCount, pagesToScore, refinedPageScores, topScoredPages } from "../../src/kv/sparseTokenRefinement.ts";

const B = 4;

describe("sparse decode's fine stage: pages ranked by their best token", () => {
  test("coarse candidates are factor × budget, none when off", () => {
    expect(coarseCandidateCount(9, 4)).toBe(36);
    expect(coarseCandidateCount(9, 0)).toBe(0);
  });

  test("each coarse page's successor is scored too when it is a candidate", () => {
    const candidate = (p: number) => p >= 1 && p < 10;
    expect(pagesToScore([7, 3, 9, 4], candidate)).toEqual([3, 4, 5, 7, 8, 9]);
    expect(pagesToScore([], candidate)).toEqual([]);
  });

  test("a page's score is its best token, not its mean", () => {
    // Page 2 has one strong token among weak ones; page 5 is uniformly fair (a higher mean).
    const scores = [0, 0, 9, 0, 3, 3, 3, 3];
    const refined = refinedPageScores([2, 5], scores, B, 0);
    expect(refined.get(2)).toBe(9);
    expect(refined.get(5)).toBe(3);
    expect(topScoredPages(refined, 1)).toEqual([2]);
  });

  test("a match in the last `lookback` slots ranks the next page too (a record that straddles two pages)", () => {
    // Page 3's best token sits in its last slot; page 4 holds only weak tokens (the answer's digits).
    const scores = [0, 1, 0, 8, 0, 0, 0, 0, 2, 2, 2, 2];
    const refined = refinedPageScores([3, 4, 6], scores, B, 2);
    expect(refined.get(3)).toBe(8);
    expect(refined.get(4)).toBe(8);
    expect(refined.get(6)).toBe(2); // page 5 was not scored: nothing inherited
    expect(topScoredPages(refined, 2)).toEqual([3, 4]);
    // Outside the lookback the next page keeps its own score.
    const early = refinedPageScores([3, 4], [8, 0, 0, 0, 1, 1, 1, 1], B, 2);
    expect(early.get(4)).toBe(1);
  });

  test("unwritten slots (-Infinity) never win; ties go to the lower page", () => {
    const refined = refinedPageScores([0, 1], [5, -Infinity, -Infinity, -Infinity, 5, 0, 0, 0], B, 0);
    expect(topScoredPages(refined, 1)).toEqual([0]);
    expect(topScoredPages(refined, 0)).toEqual([]);
  });

  test("bad input names the problem", () => {
    expect(() => refinedPageScores([1, 2], [0, 0, 0], B, 1)).toThrow(/3 token scores for 2 pages of 4/);
    expect(() => refinedPageScores([1], [0, 0, 0, 0], B, 5)).toThrow(/lookback must be an integer in 0..4/);
  });
});
