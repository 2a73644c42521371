/**
 * Penalties and logit bias (src/engine/logitsAdjuster.ts): by hand on small logits, and end to
 * end: the scheduler's greedy tokens with each adjustment equal a reference loop that runs the
 * real runner's raw logits through the formulas written out here, independently.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { LogitsAdjuster, LogitsAdjustmentError, checkLogitsAdjustments, type LogitsAdjustments } from "../../src/engine/logitsAdjuster.ts";
import { GenerationScheduler } from "../../src/engine/generationScheduler.ts";
import { argmax } from "../../src/engine/sampler.ts";
import { KvBlockPool, KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { loadModelTokenizer, type ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { join } from "node:path";
import { buildRunner } from "../helpers/engineKit.ts";

const QUALITY_MODEL = join(import.meta.dir, "../../models/quality");

setDefaultTimeout(120_000);

describe("LogitsAdjuster by hand", () => {
  test("repetition over prompt and output, frequency and presence over the output, then the bias", () => {
    const adjuster = new LogitsAdjuster({ repetitionPenalty: 2, frequencyPenalty: 0.5, presencePenalty: 1, logitBias: new Map([[4, -3]]) }, [0, 1]);
    adjuster.observe(2);
    adjuster.observe(2);
    adjuster.observe(1);
    const logits = Float32Array.from([4, -2, 3, 1, 5]);
    const out = adjuster.apply(logits);
    // token 0: prompt only → 4 / 2; token 1: prompt and output once → -2 · 2 − 0.5 − 1;
    // token 2: output twice → 3 / 2 − 1 − 1; token 3 untouched; token 4: bias −3.
    expect(Array.from(out)).toEqual([2, -5.5, -0.5, 1, 2]);
    expect(Array.from(logits)).toEqual([4, -2, 3, 1, 5]);
  });

  test("out-of-range values are refused naming the request field", () => {
    const field = (adjustments: LogitsAdjustments) => {
      try {
        checkLogitsAdjustments(adjustments, 10);
        return null;
      } catch (error) {
        return (error as LogitsAdjustmentError).field;
      }
    };
    expect(field({ repetitionPenalty: 0 })).toBe("repetition_penalty");
    expect(field({ frequencyPenalty: 2.5 })).toBe("frequency_penalty");
    expect(field({ presencePenalty: -3 })).toBe("presence_penalty");
    expect(field({ logitBias: new Map([[10, 1]]) })).toBe("logit_bias");
    expect(field({ logitBias: new Map([[3, 101]]) })).toBe("logit_bias");
    expect(field({ repetitionPenalty: 1.2, frequencyPenalty: -2, presencePenalty: 2, logitBias: new Map([[9, -100]]) })).toBeNull();
  });
});

describe("adjusted greedy decoding on the real runner", () => {
  let executable = "";
  let tokenizer: ModelTokenizer;
  let runner: RunnerProcess;

  beforeAll(async () => {
    executable = buildRunner();
    // The trained quality model: a random-weight model's logit gaps are too wide for penalties of
    // at most 2 to change its greedy tokens.
    tokenizer = await loadModelTokenizer(QUALITY_MODEL);
    runner = await RunnerProcess.start({ executable, model: QUALITY_MODEL, blocks: 64, blockSize: 16, threads: 2 });
  }, 300_000);

  afterAll(async () => {
    await runner?.shutdown();
  });

  /** The last position's raw logits after a cold prefill of `ids`. */
  async function rawLogits(ids: readonly number[]): Promise<Float32Array> {
    const pool = new KvBlockPool(runner, 16, runner.info.free_blocks);
    const table = new KvBlockTable(16);
    await pool.grow([{ table, entries: ids.length }]);
    const result = await runner.forward({ sequences: [{ table: table.blocks, tokens: [...ids], indices: Uint32Array.from(ids.keys()), logitRows: [ids.length - 1] }] });
    await pool.release([table]);
    return Float32Array.from(result.logits[0]!);
  }

  /** Greedy decoding with the adjustments written out as OpenAI and vLLM define them. */
  async function reference(prompt: readonly number[], steps: number, a: { repetition: number; frequency: number; presence: number; bias: [number, number][] }): Promise<number[]> {
    const output: number[] = [];
    for (let step = 0; step < steps; step++) {
      const logits = await rawLogits([...prompt, ...output]);
      const seen = new Set([...prompt, ...output]);
      for (let id = 0; id < logits.length; id++) {
        if (seen.has(id) && a.repetition !== 1) logits[id] = logits[id]! > 0 ? logits[id]! / a.repetition : logits[id]! * a.repetition;
        const count = output.filter((t) => t === id).length;
        logits[id] = logits[id]! - a.frequency * count - (count > 0 ? a.presence : 0);
      }
      for (const [id, bias] of a.bias) logits[id] = logits[id]! + bias;
      output.push(argmax(logits));
    }
    return output;
  }

  const cases = [
    { name: "repetition_penalty 1.8", repetition: 1.8, frequency: 0, presence: 0, bias: [] as [number, number][] },
    { name: "frequency_penalty 2", repetition: 1, frequency: 2, presence: 0, bias: [] as [number, number][] },
    { name: "presence_penalty 2 with frequency_penalty -0.5", repetition: 1, frequency: -0.5, presence: 2, bias: [] as [number, number][] },
    { name: "logit_bias", repetition: 1, frequency: 0, presence: 0, bias: [[101, 8], [32, -100]] as [number, number][] },
  ];
  for (const c of cases) {
    test(`${c.name}: the scheduler's tokens are the reference's, and differ from plain greedy`, async () => {
      const scheduler = new GenerationScheduler(runner, tokenizer, { prefixCache: false });
      const prompt = tokenizer.encode("K417 B220 Q903 K417 B220 Q903 K417 B");
      const steps = 16;
      const adjustments: LogitsAdjustments = { repetitionPenalty: c.repetition, frequencyPenalty: c.frequency, presencePenalty: c.presence, logitBias: new Map(c.bias) };
      const got = await scheduler.submit({ promptIds: prompt, maxTokens: steps, sampling: { temperature: 0, topP: 1, topK: 0 }, adjustments }).result();
      const plain = await scheduler.submit({ promptIds: prompt, maxTokens: steps, sampling: { temperature: 0, topP: 1, topK: 0 } }).result();
      const ids = got.tokens.map((t) => t.id);
      expect(ids).toEqual(await reference(prompt, steps, c));
      expect(ids).not.toEqual(plain.tokens.map((t) => t.id));
      await scheduler.close();
    });
  }
});
