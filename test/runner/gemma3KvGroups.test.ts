/**
 * The runner's two KV cache groups on a Gemma 3-shaped model (global and sliding-window layers):
 * INFO describes them; a prefill in chunks and a decode past the window whose sliding blocks are
 * freed as they leave the window (slidingWindowSpan.ts) give the logits of the keep-everything
 * cache (`--kv-groups 1`); the sliding group never holds more than ceil(window / block) + 1 blocks
 * between steps (INFO's free-block counts); a sliding table that lacks a block inside the window,
 * an unknown group and the whole-block ops (COPY, MOVE) are refused with a clear error. Chunk
 * reuse's span ops on two groups: gemma3ChunkRelocate.test.ts.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { firstLiveBlock } from "../../src/kv/slidingWindowSpan.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { writeTinyGemma3, type TinyGemma3 } from "../helpers/gemma3TinyModel.ts";

setDefaultTimeout(120_000);

const BLOCK = 16;
const WINDOW = 24;
const LENGTH = 120;

function start(model: string, groups: 1 | 2): Promise<RunnerProcess> {
  return RunnerProcess.start({ executable: buildRunner(), model, blocks: 16, blockSize: BLOCK, threads: 2, kvDtype: "f32", extraArgs: ["--kv-groups", String(groups)] });
}

function ids(count: number, vocab: number): number[] {
  return Array.from({ length: count }, (_, i) => 6 + ((i * 7919 + 31) % (vocab - 6)));
}

function maxAbsDifference(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

/** Chunks of 20 tokens then one token a step; every step's last logits row. */
const STEPS = [20, 20, 20, ...Array.from({ length: LENGTH - 60 }, () => 1)];

describe("gemma3 KV cache groups", () => {
  let dir = "";
  let model: TinyGemma3;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-groups-"));
    model = writeTinyGemma3(join(dir, "model"), { window: WINDOW, layers: 4, pattern: [true, true, false, true] });
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("INFO lists the full-attention and the sliding-window group; --kv-groups 1 keeps one", async () => {
    const runner = await start(model.gguf, 2);
    try {
      expect(runner.info.layer_windows).toEqual([WINDOW, WINDOW, 0, WINDOW]);
      expect(runner.info.kv_groups).toEqual([
        { kind: "full_attention", layers: [2], num_blocks: 16, free_blocks: 16 },
        { kind: "sliding_window", sliding_window: WINDOW, layers: [0, 1, 3], num_blocks: 16, free_blocks: 16 },
      ]);
    } finally {
      await runner.shutdown();
    }
    const one = await start(model.gguf, 1);
    try {
      expect(one.info.kv_groups).toBeUndefined();
    } finally {
      await one.shutdown();
    }
  });

  test("freeing sliding blocks as they leave the window keeps the keep-everything cache's logits, and the group holds at most ceil(window/block)+1 blocks", async () => {
    const sequence = ids(LENGTH, model.vocab);
    const everything = await start(model.gguf, 1);
    const expected: Float32Array[] = [];
    try {
      const table = await everything.alloc(Math.ceil(LENGTH / BLOCK));
      let at = 0;
      for (const count of STEPS) {
        const result = await everything.forward({ sequences: [{ table, tokens: sequence.slice(at, at + count), indices: sequenceRange(at, count), logitRows: [count - 1] }] });
        expected.push(result.logits[0]!);
        at += count;
      }
    } finally {
      await everything.shutdown();
    }

    const runner = await start(model.gguf, 2);
    try {
      const table = await runner.alloc(Math.ceil(LENGTH / BLOCK));
      const sliding: number[] = [];
      let at = 0;
      let mostHeld = 0;
      for (const [step, count] of STEPS.entries()) {
        const need = Math.ceil((at + count) / BLOCK) - sliding.length;
        if (need > 0) sliding.push(...(await runner.alloc(need, 1)));
        const result = await runner.forward({ sequences: [{ table, slidingTable: sliding, tokens: sequence.slice(at, at + count), indices: sequenceRange(at, count), logitRows: [count - 1] }] });
        expect(maxAbsDifference(result.logits[0]!, expected[step]!)).toBeLessThan(1e-5);
        at += count;
        const gone = [];
        for (let b = 0; b < firstLiveBlock(at, WINDOW, BLOCK); b++) {
          if (sliding[b] !== NO_BLOCK) gone.push(sliding[b]!);
          sliding[b] = NO_BLOCK;
        }
        if (gone.length > 0) await runner.free(gone, 1);
        const info = await runner.queryInfo();
        const group = info.kv_groups![1]!;
        mostHeld = Math.max(mostHeld, group.num_blocks - group.free_blocks);
        expect(group.num_blocks - group.free_blocks).toBeLessThanOrEqual(Math.ceil(WINDOW / BLOCK) + 1);
        expect(info.kv_groups![0]!.free_blocks).toBe(16 - Math.ceil(LENGTH / BLOCK));
      }
      expect(at).toBe(LENGTH);
      expect(mostHeld).toBe(Math.ceil(WINDOW / BLOCK) + 1);
    } finally {
      await runner.shutdown();
    }
  });

  test("a sliding table without a block inside the window, an unknown group and whole-block ops are refused", async () => {
    const runner = await start(model.gguf, 2);
    try {
      const table = await runner.alloc(3);
      const sliding = await runner.alloc(3, 1);
      const sequence = ids(40, model.vocab);
      await runner.forward({ sequences: [{ table, slidingTable: sliding, tokens: sequence, indices: sequenceRange(0, 40), logitRows: [] }] });
      // Token 40 reads entries 17..40: block 1 must be there.
      await expect(runner.forward({ sequences: [{ table, slidingTable: [NO_BLOCK, NO_BLOCK, sliding[2]!], tokens: [7], indices: [40], logitRows: [0] }] })).rejects.toThrow(
        /sliding block 1 \(indices 16\.\.31\) is inside the window of index 40 but the sliding table has none there/,
      );
      // Block 0 has left the window: it may be gone.
      const result = await runner.forward({ sequences: [{ table, slidingTable: [NO_BLOCK, sliding[1]!, sliding[2]!], tokens: [7], indices: [40], logitRows: [0] }] });
      expect(result.logits[0]!.length).toBe(model.vocab);
      await expect(runner.forward({ sequences: [{ table, tokens: [7], indices: [41], logitRows: [0] }] })).rejects.toThrow(/ctxr-runner FORWARD failed/);
      await expect(runner.alloc(1, 2)).rejects.toThrow(/KV group 2 does not exist \(the model has 2 groups\)/);
      await expect(runner.copy([{ src: table[0]!, dst: table[1]! }])).rejects.toThrow(/COPY is not supported on a model with sliding-window layers/);
      await expect(runner.free([sliding[0]!, sliding[0]!], 1)).rejects.toThrow(/listed twice/);
    } finally {
      await runner.shutdown();
    }
    const one = await start(model.gguf, 1);
    try {
      await expect(one.alloc(1, 1)).rejects.toThrow(/KV group 1 does not exist \(the model has 1 group\)/);
    } finally {
      await one.shutdown();
    }
  });
});
