/**
 * `ctxr serve --model` with sparse decode's trigger flags (a real server process, the real CPU
 * runner, the tiny model): the thresholds reach each request's sparse decode. The same request
 * with `ctxr.kv_budget` selects pages again at every step under tiny thresholds and a one-step
 * window, and only once (the first selection) under huge ones.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

let model: { path: string; cleanup(): void };
let runnerPath = "";

beforeAll(() => {
  runnerPath = buildRunner();
  model = tinyModelFolder({ layers: 3, seed: 11 }, "tiny-sparse");
}, 300_000);

afterAll(() => model?.cleanup());

const MAX_TOKENS = 40;
/** About 900 byte tokens: 57 pages, of which a 5% budget reads a handful. */
const REQUEST = {
  prompt: Array.from({ length: 20 }, (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n"),
  max_tokens: MAX_TOKENS,
  temperature: 0,
  ctxr: { kv_budget: 0.05 },
};

async function sparseUsage(triggerFlags: string[]): Promise<{ completion_tokens: number; sparse_decode_steps: number; sparse_reconstructions: number }> {
  const server = await spawnServer(["--in-memory", "--model", model.path, "--threads", "2", "--kv-blocks", "128", ...triggerFlags], { CTXR_RUNNER: runnerPath }, 60_000);
  try {
    const answer = await server.post("/v1/completions", REQUEST);
    expect(answer.status).toBe(200);
    return { completion_tokens: answer.body.usage.completion_tokens, ...answer.body.usage.ctxr };
  } finally {
    server.kill("SIGTERM");
    expect(await server.exited).toBe(0);
  }
}

describe("ctxr serve --sparse-* thresholds", () => {
  test("tiny thresholds with a one-step window select pages at every sparse step", async () => {
    const usage = await sparseUsage(["--sparse-entropy-threshold", "0.0001", "--sparse-varentropy-threshold", "0.0001", "--sparse-trigger-window", "1"]);
    expect(usage.completion_tokens).toBe(MAX_TOKENS);
    // The first token comes from the prefill; every later one is a sparse step.
    expect(usage.sparse_decode_steps).toBe(MAX_TOKENS - 1);
    expect(usage.sparse_reconstructions).toBe(usage.sparse_decode_steps);
  });

  test("huge thresholds never fire: only the first selection", async () => {
    const usage = await sparseUsage(["--sparse-entropy-threshold", "1e9", "--sparse-varentropy-threshold", "1e9"]);
    expect(usage.completion_tokens).toBe(MAX_TOKENS);
    expect(usage.sparse_decode_steps).toBe(MAX_TOKENS - 1);
    expect(usage.sparse_reconstructions).toBe(1);
  });

  test("the default thresholds fire on this random-weight model (so the cases above depend on the flags)", async () => {
    const usage = await sparseUsage([]);
    expect(usage.sparse_decode_steps).toBe(MAX_TOKENS - 1);
    expect(usage.sparse_reconstructions).toBeGreaterThan(1);
    expect(usage.sparse_reconstructions).toBeLessThan(usage.sparse_decode_steps);
  });
});
