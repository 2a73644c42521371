/**
 * `ctxr serve --sparse-anchor` / `--sparse-anchor-tokens`: listed in --help, validated before the
 * model is opened, refused without --model; and through a real server on the committed quality
 * model, sparse decode at a 5% KV budget on retrieval prompts answers clearly more questions with the
 * newest token's keys as the anchor than with the window's (the flag reaches each request's
 * page selection: the two servers differ in it alone).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { QualityClient } from "../../src/quality/qualityClient.ts";
import { exampleSeed } from "../../src/quality/qualityRandom.ts";
import { qualityExample } from "../../src/quality/qualityTasks.ts";
import { REPO_ROOT, runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { spawnServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

describe("ctxr serve --sparse-anchor flags", () => {
  const folder = tempFolder("ctxr-sparse-anchor-");
  afterAll(() => folder.cleanup());

  test("listed in --help, validated, refused without --model", () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const text of ["--sparse-anchor A", "--sparse-anchor-tokens N", "newest-centered", "--sparse-refine N", "--sparse-refine-lookback T"]) expect(help).toContain(text);
    const model = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--sparse-anchor", "middle"], "--sparse-anchor must be one of window, newest, newest-centered, got 'middle'"],
      [["--sparse-anchor", ""], "--sparse-anchor must be one of window, newest, newest-centered, got ''"],
      [["--sparse-anchor-tokens", "0"], "--sparse-anchor-tokens must be a positive integer, got '0'"],
      [["--sparse-anchor-tokens", "65"], "--sparse-anchor-tokens must be at most 64, got '65'"],
      [["--sparse-anchor", "window", "--sparse-anchor-tokens", "4"], "--sparse-anchor-tokens needs --sparse-anchor newest or newest-centered (got window)"],
      [["--sparse-refine=-1"], "--sparse-refine must be a non-negative integer, got '-1'"],
      [["--sparse-refine", "65"], "--sparse-refine must be at most 64, got '65'"],
      [["--sparse-refine-lookback", "65"], "--sparse-refine-lookback must be at most 64, got '65'"],
      [["--sparse-refine", "0", "--sparse-refine-lookback", "2"], "--sparse-refine-lookback needs the fine stage on (--sparse-refine 0 turns it off)"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...model, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    for (const [flag, value] of [["--sparse-anchor", "newest"], ["--sparse-anchor-tokens", "2"], ["--sparse-refine", "2"]]) {
      const run = runCli(["serve", "--in-memory", "--port", "0", flag!, value!]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`ctxr serve: ${flag} needs --model`);
    }
  });
});

const MODEL = join(REPO_ROOT, "models", "quality");
const haveModel = existsSync(join(MODEL, "config.json"));
const QUESTIONS = 20;
const BUDGET = 0.05;
/** 1 sink + 2 window + 2 selected pages of about 129. */
const REFINE_BUDGET = 0.04;
const REFINE_MARGIN = 4;
/** Disjoint from training, its evaluation, bench-quality and qualityModel.test.ts. */
const SEED = 0x5a7c0001;

describe.skipIf(!haveModel)("sparse decode through the real server: newest vs window anchor", () => {
  let runnerPath = "";
  beforeAll(() => {
    runnerPath = buildRunner();
  }, 300_000);

  async function correctAnswers(anchorFlags: string[], budget = BUDGET): Promise<{ correct: number; sparseSteps: number }> {
    const server = await spawnServer(["--in-memory", "--model", MODEL, "--threads", "2", "--no-prefix-cache", ...anchorFlags], { CTXR_RUNNER: runnerPath }, 60_000);
    try {
      const client = new QualityClient(server.url);
      let correct = 0;
      let sparseSteps = 0;
      for (let i = 0; i < QUESTIONS; i++) {
        const example = qualityExample("retrieval", exampleSeed(SEED, i), { retrievalBytes: 2048 });
        const answer = await client.ask(example, { policy: "full", kvBudget: budget });
        if (answer.correct) correct++;
        sparseSteps += answer.usage?.sparse_decode_steps ?? 0;
      }
      return { correct, sparseSteps };
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  }

  test(`at a ${100 * BUDGET}% budget the newest anchor answers clearly more than the window's`, async () => {
    // Pages ranked by their mean key alone, so the anchor is all that differs.
    const newest = await correctAnswers(["--sparse-anchor", "newest", "--sparse-refine", "0"]);
    const window = await correctAnswers(["--sparse-anchor", "window", "--sparse-refine", "0"]);
    console.log(`sparseAnchor.test.ts: ${QUESTIONS} retrieval questions at kv_budget ${BUDGET}: newest ${newest.correct}, window ${window.correct}`);
    // Every answer token after the first came from a sparse step.
    expect(newest.sparseSteps).toBeGreaterThanOrEqual(QUESTIONS * 2);
    expect(window.sparseSteps).toBeGreaterThanOrEqual(QUESTIONS * 2);
    // Measured: newest 16, window 8 of these 20 (bench-quality at 300 questions: see BENCHMARKS.md).
    expect(newest.correct).toBeGreaterThanOrEqual(window.correct + 4);
  });

  test(`at a ${100 * REFINE_BUDGET}% budget, re-ranking the best blocks by their best token (the default) answers clearly more than the mean key alone`, async () => {
    const refined = await correctAnswers(["--sparse-anchor", "newest"], REFINE_BUDGET);
    const mean = await correctAnswers(["--sparse-anchor", "newest", "--sparse-refine", "0"], REFINE_BUDGET);
    console.log(`sparseAnchor.test.ts: ${QUESTIONS} retrieval questions at kv_budget ${REFINE_BUDGET}: refined ${refined.correct}, mean key ${mean.correct}`);
    expect(refined.sparseSteps).toBeGreaterThanOrEqual(QUESTIONS * 2);
    expect(refined.correct).toBeGreaterThanOrEqual(mean.correct + REFINE_MARGIN);
  }, 300_000);
});
