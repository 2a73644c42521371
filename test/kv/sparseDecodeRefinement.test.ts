/**
 * The planner's fine stage: coarse candidates by mean key, their tokens scored, pages re-ranked
 * by their best token with a lookback into the page before. The scene is the retrieval miss it
 * is for: a record whose key token ends page P and whose answer fills page P + 1.
 */
import { describe, expect, test } from "bun:test";
import { SparseDecodePlanner } from "../../src/kv/sparseDecodePlanner.ts";

const B = 16;
const DIM = 8;
const PAGES = 40;
const KEY_PAGE = 18;

/** Per token keys: filler along e1 with noise; the record's key token along e0 (the question's direction). */
function scene() {
  const tokens: Float32Array[] = [];
  let seed = 7;
  const noise = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648 - 0.5) * 0.2;
  for (let t = 0; t < PAGES * B; t++) {
    const key = Float32Array.from({ length: DIM }, noise);
    key[1]! += 1;
    // Decoys: pages whose every token leans a little towards the question (a higher mean than KEY_PAGE's).
    if (Math.floor(t / B) % 5 === 2) key[0]! += 0.25;
    tokens.push(key);
  }
  tokens[KEY_PAGE * B + B - 1]![0]! += 3; // the key token, last slot of its page
  const vectors = new Float32Array(PAGES * DIM);
  for (let p = 0; p < PAGES; p++) for (let o = 0; o < B; o++) for (let j = 0; j < DIM; j++) vectors[p * DIM + j]! += tokens[p * B + o]![j]! / B;
  const question = Float32Array.from({ length: DIM }, (_, j) => (j === 0 ? 1 : 0));
  return { tokens, vectors, question };
}

function tokenScores(tokens: Float32Array[], pages: readonly number[], anchor: Float32Array): Float32Array {
  const out = new Float32Array(pages.length * B);
  pages.forEach((page, i) => {
    for (let o = 0; o < B; o++) {
      let dot = 0;
      for (let j = 0; j < DIM; j++) dot += tokens[page * B + o]![j]! * anchor[j]!;
      out[i * B + o] = dot;
    }
  });
  return out;
}

describe("SparseDecodePlanner: the fine stage", () => {
  const length = PAGES * B + 1;
  const full = Array.from({ length: PAGES + 1 }, (_, i) => 500 + i);
  // 10% of 642 tokens: 65 tokens = 4 pages = 1 sink + 2 window + 1 selected.
  const options = { budgetFraction: 0.1, anchor: "newest" as const, centered: false, trigger: { entropyThreshold: 1e9, varentropyThreshold: 1e9 } };

  test("by mean key alone the decoys win and neither the key's page nor the answer's is read", () => {
    const { vectors, question } = scene();
    const planner = new SparseDecodePlanner({ ...options, refinement: { factor: 0, lookback: 4 } });
    planner.setPages(vectors, PAGES);
    planner.setNewestKeys(question);
    expect(planner.refinementRequest(length)).toBeUndefined();
    const entry = planner.tableFor(full, length);
    expect(entry.table).not.toContain(full[KEY_PAGE + 1]);
    expect(entry.table).not.toContain(full[KEY_PAGE]);
  });

  test("re-ranked by the best token with a lookback, the answer's page (after the key's) is read", () => {
    const { tokens, vectors, question } = scene();
    const planner = new SparseDecodePlanner({ ...options, budgetFraction: 0.13, refinement: { factor: 16, lookback: 4 } });
    planner.setPages(vectors, PAGES);
    planner.setNewestKeys(question);
    const request = planner.refinementRequest(length)!;
    expect(request.pages).toContain(KEY_PAGE);
    expect(request.pages).toContain(KEY_PAGE + 1);
    expect(Array.from(request.anchor)).toEqual(Array.from(question));
    planner.setTokenScores(request.pages, tokenScores(tokens, request.pages, request.anchor), length);
    const entry = planner.tableFor(full, length);
    expect(entry.reconstructed).toBe(true);
    expect(planner.selection).toEqual([KEY_PAGE, KEY_PAGE + 1]);
    expect(entry.table).toContain(full[KEY_PAGE + 1]);
    // Without the lookback the key's page alone wins; its successor holds nothing that matches.
    const noLookback = new SparseDecodePlanner({ ...options, budgetFraction: 0.13, refinement: { factor: 16, lookback: 0 } });
    noLookback.setPages(vectors, PAGES);
    noLookback.setNewestKeys(question);
    const again = noLookback.refinementRequest(length)!;
    noLookback.setTokenScores(again.pages, tokenScores(tokens, again.pages, again.anchor), length);
    noLookback.tableFor(full, length);
    expect(noLookback.selection).not.toContain(KEY_PAGE + 1);
    expect(noLookback.selection).toContain(KEY_PAGE);
  });

  test("scores given for another length, or none, fall back to the mean ranking; no request while a selection holds", () => {
    const { tokens, vectors, question } = scene();
    const planner = new SparseDecodePlanner({ ...options, refinement: { factor: 16, lookback: 4 } });
    planner.setPages(vectors, PAGES);
    planner.setNewestKeys(question);
    const request = planner.refinementRequest(length)!;
    planner.setTokenScores(request.pages, tokenScores(tokens, request.pages, request.anchor), length - 1);
    planner.tableFor(full, length);
    expect(planner.selection).not.toContain(KEY_PAGE + 1);
    expect(planner.refinementRequest(length + 1)).toBeUndefined();
  });
});
