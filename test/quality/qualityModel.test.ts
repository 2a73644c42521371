/**
 * The committed quality model (models/quality, issue 12 item 4) through the HTTP
 * API: on fixed dependence questions, each asked after a warm-up that cached every
 * chunk after other neighbours (src/quality/qualityClient.ts, as bench-quality does),
 * full prefill answers well and full ≥ prophet@0.2 > none. So a regression in
 * re-rotation, recompute selection, variant choice or store-back fails here: `none`
 * shows that reuse breaks the answers, prophet that recompute repairs them, and every
 * reusing request must have found its chunks cached. Also sparse decode on long retrieval
 * prompts: its steps really read a small share of the KV, and its answers do not get worse.
 *
 * CTXR_QUALITY_MODEL=DIR runs it on another model folder (the thresholds are the
 * committed model's).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { QualityClient, cellLabel, orderCells, type QualityCell } from "../../src/quality/qualityClient.ts";
import { exampleSeed } from "../../src/quality/qualityRandom.ts";
import { qualityExample, type QualityExample } from "../../src/quality/qualityTasks.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

// Thresholds, in correct answers of QUESTIONS, set from the committed model's figures on these
// questions (full 40, none 0, prophet@0.2 22, cachecraft@0.2 39; bench-quality's dependence table
// agrees at 300 questions), a few answers of slack so the test is not flaky, close enough that a
// broken mechanism falls below them.
const QUESTIONS = 40;
/** Full prefill: at least this many right. */
const FULL_MIN_CORRECT = 38;
/** none (stale KV, nothing recomputed) gets at most this many right: reuse must break answers here. */
const NONE_MAX_CORRECT = 4;
/** prophet@0.2 must beat none by at least this many answers (prophet > none). */
const PROPHET_MIN_ABOVE_NONE = 12;
/** cachecraft@0.2 may trail full by at most this many answers. */
const CACHECRAFT_MAX_BELOW_FULL = 4;
/**
 * Sparse decode (ctxr.kv_budget) on the retrieval family. At a 10% budget it answers most but
 * not all such questions (BENCHMARKS.md: 76% at 300 questions with the window anchor, more with
 * the newest token's keys, the default since issue 31), so the test holds it to what it answers
 * now: SPARSE_MIN_CORRECT is this model's count on these questions (10; 9 with the window
 * anchor) minus one, a floor against regressions in the page selection.
 */
const SPARSE_QUESTIONS = 12;
const SPARSE_RETRIEVAL_BYTES = 2048;
const SPARSE_BUDGET = 0.1;
const SPARSE_DENSE_MIN_CORRECT = 11;
const SPARSE_MIN_CORRECT = 9;
/** Fixed seeds, disjoint from training (seed 1's stream), its evaluation (0x51A11E + family) and bench-quality (0xBE4C0000 + family). */
const TEST_SEED = 0x7e57b001;

const MODEL = process.env.CTXR_QUALITY_MODEL ?? join(REPO_ROOT, "models", "quality");
const haveModel = existsSync(join(MODEL, "config.json"));
if (!haveModel) console.warn(`qualityModel.test.ts: SKIPPED — no model at ${MODEL} (config.json missing); commit models/quality (issue 12) to run it`);

setDefaultTimeout(60_000);

const CELLS: QualityCell[] = [{ policy: "full" }, { policy: "none" }, { policy: "prophet", ratio: 0.2 }, { policy: "cachecraft", ratio: 0.2 }];

describe.skipIf(!haveModel)("the committed quality model under KV reuse (dependence family)", () => {
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;
  const correct = new Map<string, number>(CELLS.map((c) => [cellLabel(c), 0]));
  const reuseMissing = new Map<string, number>(CELLS.filter((c) => c.policy !== "full").map((c) => [cellLabel(c), 0]));
  let recomputed = 0;

  beforeAll(async () => {
    // Without the automatic prefix cache, as bench-quality runs: the full cell's exact blocks would
    // otherwise serve the reusing cells of the same prompt. And, as it does, with the shift measured
    // when a variant is stored (the warm-up's chunks are reused at once, before any idle time).
    engine = await GenerationEngine.open({ model: MODEL, runner: buildRunner(), threads: 2, prefixCache: false, reuseScoring: "sync" });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
    const client = new QualityClient(server.url);
    const examples: QualityExample[] = Array.from({ length: QUESTIONS }, (_, i) => qualityExample("dependence", exampleSeed(TEST_SEED, i)));
    for (const example of examples) {
      await client.warmUp(example);
      for (const cell of orderCells(CELLS)) {
        const answer = await client.ask(example, cell);
        const label = cellLabel(cell);
        if (answer.correct) correct.set(label, correct.get(label)! + 1);
        if (reuseMissing.has(label) && !answer.chunksReused) reuseMissing.set(label, reuseMissing.get(label)! + 1);
        if (cell.policy === "prophet") recomputed += answer.usage?.prompt_tokens_recomputed ?? 0;
      }
    }
    console.log(`qualityModel.test.ts: correct of ${QUESTIONS}: ${[...correct].map(([k, v]) => `${k} ${v}`).join(", ")}`);
  }, 120_000);

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
  });

  test("every reusing request found its chunks cached, and prophet recomputed some", () => {
    expect(Object.fromEntries(reuseMissing)).toEqual({ none: 0, "prophet@0.2": 0, "cachecraft@0.2": 0 });
    expect(recomputed).toBeGreaterThan(0);
  });

  test(`full prefill answers at least ${FULL_MIN_CORRECT} of ${QUESTIONS}`, () => {
    expect(correct.get("full")!).toBeGreaterThanOrEqual(FULL_MIN_CORRECT);
  });

  test(`sparse decode at kv_budget ${SPARSE_BUDGET} on retrieval prompts: really sparse, and no fewer answers right than now`, async () => {
    const client = new QualityClient(server.url);
    let dense = 0;
    let sparse = 0;
    let agree = 0;
    let sparseSteps = 0;
    for (let i = 0; i < SPARSE_QUESTIONS; i++) {
      const example = qualityExample("retrieval", exampleSeed(TEST_SEED + 1, i), { retrievalBytes: SPARSE_RETRIEVAL_BYTES });
      const a = await client.ask(example, { policy: "full" });
      const b = await client.ask(example, { policy: "full", kvBudget: SPARSE_BUDGET });
      if (a.correct) dense++;
      if (b.correct) sparse++;
      if (a.text === b.text) agree++;
      sparseSteps += b.usage?.sparse_decode_steps ?? 0;
    }
    console.log(`qualityModel.test.ts: retrieval of ${SPARSE_QUESTIONS}: dense ${dense}, kv_budget ${SPARSE_BUDGET} ${sparse}, same answer ${agree}, sparse steps ${sparseSteps}`);
    // The answers really came from sparse steps (every answer token after the first).
    expect(sparseSteps).toBeGreaterThanOrEqual(SPARSE_QUESTIONS * 2);
    expect(dense).toBeGreaterThanOrEqual(SPARSE_DENSE_MIN_CORRECT);
    expect(sparse).toBeGreaterThanOrEqual(SPARSE_MIN_CORRECT);
  });

  test("full ≥ prophet@0.2 > none, and cachecraft@0.2 (measured-shift scores) > none", () => {
    const full = correct.get("full")!;
    const prophet = correct.get("prophet@0.2")!;
    const cachecraft = correct.get("cachecraft@0.2")!;
    const none = correct.get("none")!;
    expect(none).toBeLessThanOrEqual(NONE_MAX_CORRECT);
    expect(prophet).toBeLessThanOrEqual(full);
    expect(prophet).toBeGreaterThanOrEqual(none + PROPHET_MIN_ABOVE_NONE);
    expect(cachecraft).toBeGreaterThanOrEqual(full - CACHECRAFT_MAX_BELOW_FULL);
  });
});
