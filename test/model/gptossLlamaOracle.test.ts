/**
 * gpt-oss against llama.cpp (issue 32, item 2) on random-weight files written by llama.cpp's own
 * gguf-py (scripts/oracle/arch_gptoss.py: 4 layers, even ones sliding over 32 entries, YaRN ×32,
 * sinks, q/k/v/o biases, 4 experts top-2; and gpt-oss-20b's attention shape, 2 layers, window
 * 128), 300 positions (ctxr: 200 in one prefill, then one token a forward; 400 and 300 at the
 * real shape), f32 KV cache on both sides.
 *
 * - The attention alone: a file whose gate experts, gate biases and down biases are all zero, so
 *   that every layer's FFN adds exactly 0 in llama.cpp and in ctxr (gate 0 → SwiGLU 0 → down bias
 *   0). Bounds of the dense F32 rows of llamaOracle.test.ts: max 1e-2, mean 1.5e-3. Without the sinks, with the
 *   window one entry off, or without YaRN's ramp, this is far off (see BENCHMARKS.md).
 * - The whole model (random experts in F32; MXFP4 experts as llama.cpp's converter leaves a
 *   gpt-oss checkpoint, the rest F32; llama.cpp's MXFP4_MOE quantization, the rest Q8_0): the
 *   runner's mixture-of-experts FFN with gpt-oss's router (top-k, softmax over the chosen logits,
 *   router and expert biases) and clamped SwiGLU. Bounds: F32 as above;
 *   quantized files as llamaOracle.test.ts's (ctxr within llama.cpp's own Q-vs-F32 difference and
 *   1.5 × its Q8_0-vs-F32 one).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import {
  ctxrLogprobs,
  llamaLogprobs,
  llamaOracle,
  llamaQuantize,
  llamaTensorTypes,
  writeRandomGguf,
  type LogprobRows,
  type RandomGgufOptions,
} from "../helpers/llamaOracle.ts";
import { pseudoRandomIds, rowsDifference, type RowsDifference } from "../helpers/logprobRows.ts";

setDefaultTimeout(180_000);

const POSITIONS = 300;
const PREFILL_POSITIONS = 200;
const EXACT_MAX = 1e-2;
const EXACT_MEAN = 1.5e-3;
const ACTIVATION_ROUNDING_FACTOR = 1.5;
const SHAPE: RandomGgufOptions = { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64 };

function withArchOptions(...options: string[]): RandomGgufOptions {
  return { ...SHAPE, extraArgs: options.flatMap((o) => ["--arch-option", o]) };
}

function describeDifference(d: RowsDifference): string {
  return `max ${d.max.toExponential(3)} (position ${d.worstRow}), mean ${d.mean.toExponential(3)}`;
}

let runner = "";
let scratch: { path: string; cleanup(): void };

beforeAll(() => {
  runner = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  llamaOracle();
  scratch = tempFolder("ctxr-gptoss-oracle-");
}, 300_000);

afterAll(() => scratch?.cleanup());

describe("gpt-oss attention (sinks, alternating sliding windows, YaRN, biases) against llama.cpp", () => {
  // gpt-oss-20b's attention shape: 64 heads of 64 on 8 KV heads, hidden 2880, window 128 (YaRN's
  // ramp then runs over frequencies 8..18 of 32, as in the real model), 2 layers, 400 positions.
  const realShape: RandomGgufOptions = { hidden: 2880, layers: 2, heads: 64, kvHeads: 8, headDim: 64, ffn: 64, extraArgs: ["--sliding-window", "128", "--arch-option", "zero_experts=1"] };
  const cases: [string, RandomGgufOptions, number, number][] = [
    ["F32, experts zero", withArchOptions("zero_experts=1"), POSITIONS, PREFILL_POSITIONS],
    ["F32, experts zero, gpt-oss-20b's attention shape", realShape, 400, 300],
  ];
  for (const [name, options, positions, prefill] of cases)
    test(`${name}: ctxr's log-probabilities match llama.cpp's`, async () => {
      const file = writeRandomGguf("gptoss", join(scratch.path, `gptoss-${name.replace(/\W+/g, "-")}.gguf`), options);
      const ids = pseudoRandomIds(positions, 250, 7);
      const llama = llamaLogprobs(file, ids, scratch.path);
      const ours = await ctxrLogprobs(runner, file, ids, prefill);
      expect(ours.vocab).toBe(llama.vocab);
      const d = rowsDifference(ours.rows, llama.rows, llama.vocab);
      const context = `gpt-oss attention ${name}: ctxr vs llama.cpp ${describeDifference(d)}`;
      if (process.env.CTXR_ORACLE_LOG) console.log(context);
      expect(d.max, context).toBeLessThanOrEqual(EXACT_MAX);
      expect(d.mean, context).toBeLessThanOrEqual(EXACT_MEAN);
    });
});

describe("gpt-oss, the whole model (mixture-of-experts FFN), against llama.cpp", () => {
  const ids = pseudoRandomIds(POSITIONS, 250, 7);
  let f32File = "";
  let llamaF32: LogprobRows;
  let llamaQ8Error: RowsDifference;

  beforeAll(() => {
    f32File = writeRandomGguf("gptoss", join(scratch.path, "gptoss-F32.gguf"), SHAPE);
    llamaF32 = llamaLogprobs(f32File, ids, scratch.path);
    const q8 = llamaQuantize(f32File, join(scratch.path, "gptoss-Q8_0.gguf"), "Q8_0");
    llamaQ8Error = rowsDifference(llamaLogprobs(q8, ids, scratch.path).rows, llamaF32.rows, llamaF32.vocab);
  });

  test("F32", async () => {
    const ours = await ctxrLogprobs(runner, f32File, ids, PREFILL_POSITIONS);
    const d = rowsDifference(ours.rows, llamaF32.rows, llamaF32.vocab);
    const context = `gpt-oss F32: ctxr vs llama.cpp ${describeDifference(d)}`;
    if (process.env.CTXR_ORACLE_LOG) console.log(context);
    expect(d.max, context).toBeLessThanOrEqual(EXACT_MAX);
    expect(d.mean, context).toBeLessThanOrEqual(EXACT_MEAN);
  });

  const quantized: [string, () => string][] = [
    ["MXFP4 experts, the rest F32 (llama.cpp's converter)", () => writeRandomGguf("gptoss", join(scratch.path, "gptoss-mxfp4-experts.gguf"), withArchOptions("expert_type=mxfp4"))],
    ["MXFP4_MOE (llama.cpp's quantizer: MXFP4 experts, the rest Q8_0)", () => llamaQuantize(f32File, join(scratch.path, "gptoss-MXFP4_MOE.gguf"), "MXFP4")],
  ];
  for (const [name, make] of quantized) {
    test(name, async () => {
      const file = make();
      const types = llamaTensorTypes(file);
      expect(types["blk.0.ffn_gate_exps.weight"]).toBe("mxfp4");
      expect(types["blk.0.ffn_down_exps.weight"]).toBe("mxfp4");
      const llama = llamaLogprobs(file, ids, scratch.path);
      const ours = await ctxrLogprobs(runner, file, ids, PREFILL_POSITIONS);
      const d = rowsDifference(ours.rows, llama.rows, llama.vocab);
      const own = rowsDifference(llama.rows, llamaF32.rows, llama.vocab);
      const context = `gpt-oss ${name}: ctxr vs llama.cpp ${describeDifference(d)}; llama.cpp vs its F32 ${describeDifference(own)}; its Q8_0 vs F32 ${describeDifference(llamaQ8Error)}`;
      if (process.env.CTXR_ORACLE_LOG) console.log(context);
      expect(d.max, context).toBeLessThanOrEqual(Math.min(own.max, ACTIVATION_ROUNDING_FACTOR * llamaQ8Error.max));
      expect(d.mean, context).toBeLessThanOrEqual(Math.min(own.mean, ACTIVATION_ROUNDING_FACTOR * llamaQ8Error.mean));
    });
  }
});
