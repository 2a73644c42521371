/**
 * The recall probe of bench-quality (src/quality/recomputeRecall.ts): the oracle ranking, and the whole probe on the real CPU runner with a
 * random-weight byte-level model: recomputing everything (ratio 1) chooses exactly the oracle's
 * set and agrees with full prefill, stale KV deviates, and the oracle ranks only reused tokens
 * (nothing the warm-up served as an exact prefix).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { exampleSeed } from "../../src/quality/qualityRandom.ts";
import { qualityExample } from "../../src/quality/qualityTasks.ts";
import { RecomputeRecall, examplePrompt, oracleTop } from "../../src/quality/recomputeRecall.ts";
import { segmentBounds } from "../../src/kv/segmentedPrompt.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(60_000);

describe("oracleTop", () => {
  test("the top k candidates by deviation, ties to the lower position, non-candidates ignored", () => {
    const d = Float64Array.from([5, 1, 3, 3, 9]);
    expect(oracleTop(d, [1, 2, 3], 2)).toEqual([2, 3]);
    expect(oracleTop(d, [0, 1, 2, 3, 4], 3)).toEqual([4, 0, 2]);
    expect(oracleTop(d, [1], 5)).toEqual([1]);
  });
});

describe("RecomputeRecall on the real runner (random weights)", () => {
  let probe: RecomputeRecall;
  let model: { path: string; cleanup(): void };

  beforeAll(async () => {
    model = tinyModelFolder({ layers: 3, seed: 11 });
    probe = await RecomputeRecall.open({ executable: buildRunner(), model: model.path, threads: 2 });
  });

  afterAll(async () => {
    await probe?.close();
    model?.cleanup();
  });

  test("ratio 1 recomputes every reused token (recall and coverage 1, the answer equals full's); none is stale", async () => {
    const example = qualityExample("dependence", exampleSeed(0x7e57, 3));
    const measured = await probe.measure(example, [
      { policy: "prophet", ratio: 1 },
      { policy: "cachecraft", ratio: 1 },
      { policy: "prophet", ratio: 0.2 },
    ]);
    const bounds = segmentBounds(examplePrompt(example));
    const context = bounds.at(-1)!;
    // Every document was cached after other neighbours; the head (BOS) and maybe the first document are exact prefixes.
    expect(measured.reusedTokens).toBeGreaterThan(0);
    expect(measured.oracle.length).toBe(measured.reusedTokens);
    for (const o of measured.oracle) expect(o.position).toBeGreaterThanOrEqual(context - measured.reusedTokens);
    // The referrer's "^^^" is 3 tokens of the referrer's document.
    expect(measured.referrerValuePositions.length).toBe(3);
    const referrerStart = bounds[1 + example.referrer!]!;
    expect(measured.referrerValuePositions.map((p) => p - referrerStart)).toEqual([1, 2, 3]);
    // Stale KV deviates: the oracle's top token is off by something, and deviations are sorted.
    expect(measured.oracle[0]!.deviation).toBeGreaterThan(1e-6);
    for (let i = 1; i < measured.oracle.length; i++) expect(measured.oracle[i]!.deviation).toBeLessThanOrEqual(measured.oracle[i - 1]!.deviation);
    for (const cell of measured.cells.slice(0, 2)) {
      expect(cell.budget).toBe(measured.reusedTokens);
      expect(cell.recall).toBe(1);
      expect(cell.coverage).toBeCloseTo(1, 9);
      expect(cell.referrerValueRecall).toBe(1);
      expect(cell.firstTokenAgrees).toBe(true);
    }
    const partial = measured.cells[2]!;
    expect(partial.budget).toBe(Math.ceil(0.2 * measured.reusedTokens - 1e-9));
    expect(partial.recall).toBeGreaterThanOrEqual(0);
    expect(partial.recall).toBeLessThanOrEqual(1);
    expect(partial.coverage).toBeLessThanOrEqual(1 + 1e-9);
  });

  test("epic chooses the first tokens of every reused document, the budget spread evenly; prophet's scores are per cell", async () => {
    const example = qualityExample("dependence", exampleSeed(0x7e57, 5));
    const measured = await probe.measure(example, [
      { policy: "epic", ratio: 0.5 },
      { policy: "prophet", ratio: 0.5, prophetScores: "attention" },
      { policy: "prophet", ratio: 0.5, prophetScores: "shift" },
    ]);
    const bounds = segmentBounds(examplePrompt(example));
    const reusedStart = bounds.at(-1)! - measured.reusedTokens;
    // bounds: where the head, each document and the question start; the reused documents run up to the question.
    const chunks = bounds.slice(0, -1).map((start, i) => ({ start, end: bounds[i + 1]! })).filter((c) => c.start >= reusedStart);
    const [epic, attention, shift] = measured.cells;
    expect(epic!.budget).toBe(Math.ceil(0.5 * measured.reusedTokens - 1e-9));
    const perChunk = chunks.map((c) => epic!.chosen.filter((t) => t >= c.start && t < c.end));
    // Each chunk's chosen tokens are its first ones, and the counts differ by at most one.
    perChunk.forEach((chosen, i) => expect(chosen).toEqual(Array.from({ length: chosen.length }, (_, t) => chunks[i]!.start + t)));
    const counts = perChunk.map((c) => c.length);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(epic!.budget);
    // Each prophet cell ranks with its own scores: the same budget, another choice.
    expect(shift!.budget).toBe(attention!.budget);
    expect(shift!.chosen).not.toEqual(attention!.chosen);
  });
});
