/** The runner's logits of every position of the tiny reference prompt, and the largest difference of two such arrays. */
import { expect } from "bun:test";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { TINY_REFERENCE } from "./engineKit.ts";

/**
 * Logits of every position of TINY_REFERENCE's prompt in one forward, f32 KV cache (a GGUF file
 * would get f16 by default). blocks × 16 tokens is the cache's size (what LongRoPE's choice of
 * factors looks at).
 */
export async function promptLogits(executable: string, model: string, blocks = 8): Promise<Float32Array> {
  const prompt = TINY_REFERENCE.prompt_ids;
  const runner = await RunnerProcess.start({ executable, model, blocks, threads: 2, kvDtype: "f32" });
  try {
    const n = prompt.length;
    const table = await runner.alloc(Math.ceil(n / 16));
    const result = await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, n), logitRows: sequenceRange(0, n) }] });
    return result.logits[0]!;
  } finally {
    await runner.shutdown();
  }
}

export function maxAbsDifference(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}
