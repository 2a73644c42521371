/**
 * gpt-oss's attention through the real CPU runner (llama.cpp's numbers: test/model/gptossLlamaOracle):
 * a random file from llama.cpp's gguf-py (scripts/oracle/arch_gptoss.py, experts zero, so that each
 * layer's mixture-of-experts FFN adds exactly 0).
 * - Its layers alternate as llama.cpp's pattern 2 has them (even ones sliding), on two KV groups.
 * - Freeing the sliding blocks as they leave the window (into a sliding pool of 5 blocks, so that
 *   freed blocks are handed out again) keeps the logits of the keep-everything cache.
 * - A chunk moved by RELOCATE (or EXPORT then IMPORT) to positions d.. is the chunk computed there,
 *   in both groups: RELOCATE re-rotates with the same YaRN table (and magnitude scale) as the
 *   forward pass; re-rotating with the plain table instead would be far off.
 * - Bad gpt-oss metadata is refused naming the key.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ggufArray, ggufFloat32, ggufString, ggufUint32, type GgufValue } from "../../src/model/gguf/ggufMetadata.ts";
import { parseGguf } from "../../src/model/gguf/ggufReader.ts";
import { encodeGguf } from "../../src/model/gguf/ggufWriter.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { firstLiveBlock } from "../../src/kv/slidingWindowSpan.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { layerErrors, maxAbs, maxAbsDiff, range, tokens } from "../helpers/kvExportCompare.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

setDefaultTimeout(180_000);

const BLOCK = 16;
const WINDOW = 32;
const SHAPE = { layers: 4, hidden: 64, heads: 4, kvHeads: 2, headDim: 16, ffn: 64 };
const BASE = 150000; // arch_gptoss.py's rope.freq_base, YaRN ×32 over 4096
const CHUNK = 48; // longer than the window
const QUESTION = 7;
const DELTA = 301;

/** Un-rotated K as EXPORT would read it back had RELOCATE turned it with the plain table instead of YaRN's: pair (j, j + d/2) off by delta·(ω_plain − ω_yarn). */
function plainTableK(k: Float32Array, headDim: number, delta: number, yarn: (j: number) => number): Float32Array {
  const out = new Float32Array(k.length);
  const half = headDim / 2;
  for (let head = 0; head < k.length / headDim; head++) {
    const o = head * headDim;
    for (let j = 0; j < half; j++) {
      const angle = delta * (Math.pow(BASE, (-2 * j) / headDim) - yarn(j));
      const [c, s] = [Math.cos(angle), Math.sin(angle)];
      const [x, y] = [k[o + j]!, k[o + j + half]!];
      out[o + j] = x * c - y * s;
      out[o + j + half] = x * s + y * c;
    }
  }
  return out;
}

/** llama.cpp's YaRN frequency j of a head_dim-16 head (ggml_rope_yarn_corr_dims with beta 32 / 1 over 4096 positions, factor 32). */
function yarnFrequency(j: number, headDim: number): number {
  const corr = (rotations: number) => (headDim * Math.log(4096 / (rotations * 2 * Math.PI))) / (2 * Math.log(BASE));
  const low = Math.max(0, Math.floor(corr(32)));
  const high = Math.min(headDim - 1, Math.ceil(corr(1)));
  const ramp = 1 - Math.min(1, Math.max(0, (j - low) / Math.max(0.001, high - low)));
  const plain = Math.pow(BASE, (-2 * j) / headDim);
  return (plain / 32) * (1 - ramp) + plain * ramp;
}

describe("gpt-oss attention in the runner", () => {
  let dir = "";
  let model = "";
  let runner: RunnerProcess;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gptoss-attention-"));
    model = writeRandomGguf("gptoss", join(dir, "gptoss.gguf"), { ...SHAPE, extraArgs: ["--sliding-window", String(WINDOW), "--arch-option", "zero_experts=1"] });
    runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: 64, blockSize: BLOCK, threads: 2, kvDtype: "f32" });
  });
  afterAll(async () => {
    await runner?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function sequence(entries: number): Promise<{ table: number[]; slidingTable: number[] }> {
    const blocks = Math.ceil(entries / BLOCK);
    return { table: await runner.alloc(blocks), slidingTable: await runner.alloc(blocks, 1) };
  }

  test("even layers slide over the window, odd ones see everything: two KV groups", () => {
    expect(runner.info.layer_windows).toEqual([WINDOW, 0, WINDOW, 0]);
    expect(runner.info.kv_groups?.map((g) => g.layers)).toEqual([[1, 3], [0, 2]]);
  });

  test("sliding blocks freed as they leave the window (and handed out again) keep the keep-everything cache's logits", async () => {
    const length = 150;
    const steps = [40, 40, ...Array.from({ length: length - 80 }, () => 1)];
    const sequence = tokens(9, length, runner.info.vocab);
    const start = (extraArgs: string[]) =>
      RunnerProcess.start({ executable: buildRunner(), model, blocks: 16, blockSize: BLOCK, threads: 2, kvDtype: "f32", extraArgs });
    const expected: Float32Array[] = [];
    const everything = await start(["--kv-groups", "1"]);
    try {
      const table = await everything.alloc(Math.ceil(length / BLOCK));
      let at = 0;
      for (const count of steps) {
        expected.push((await everything.forward({ sequences: [{ table, tokens: sequence.slice(at, at + count), indices: sequenceRange(at, count), logitRows: [count - 1] }] })).logits[0]!);
        at += count;
      }
    } finally {
      await everything.shutdown();
    }
    const windowed = await start(["--sliding-blocks", "5"]);
    try {
      const table = await windowed.alloc(Math.ceil(length / BLOCK));
      const sliding: number[] = [];
      const handedOut = new Set<number>();
      let reused = 0;
      let at = 0;
      for (const [step, count] of steps.entries()) {
        const need = Math.ceil((at + count) / BLOCK) - sliding.length;
        if (need > 0) {
          const fresh = await windowed.alloc(need, 1);
          reused += fresh.filter((b) => handedOut.has(b)).length;
          fresh.forEach((b) => handedOut.add(b));
          sliding.push(...fresh);
        }
        const result = await windowed.forward({ sequences: [{ table, slidingTable: sliding, tokens: sequence.slice(at, at + count), indices: sequenceRange(at, count), logitRows: [count - 1] }] });
        expect(maxAbsDiff(result.logits[0]!, expected[step]!), `step ${step}`).toBeLessThan(1e-5);
        at += count;
        const gone: number[] = [];
        for (let b = 0; b < firstLiveBlock(at, WINDOW, BLOCK); b++) {
          if (sliding[b] !== NO_BLOCK) gone.push(sliding[b]!);
          sliding[b] = NO_BLOCK;
        }
        if (gone.length > 0) await windowed.free(gone, 1);
      }
      expect(reused).toBeGreaterThan(0);
    } finally {
      await windowed.shutdown();
    }
  });

  test("RELOCATE and EXPORT+IMPORT re-rotate with YaRN's table: the moved chunk is the chunk computed there", async () => {
    const chunk = tokens(2, CHUNK, runner.info.vocab);
    const question = tokens(3, QUESTION, runner.info.vocab);
    const entries = CHUNK + QUESTION;
    const computed = await sequence(entries);
    await runner.forward({ sequences: [{ ...computed, tokens: chunk, indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const fresh = await sequence(entries);
    await runner.forward({ sequences: [{ ...fresh, tokens: chunk, positions: range(DELTA, CHUNK), indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    const want = await runner.export({ ...fresh, start: 0, count: CHUNK });

    const relocated = await sequence(entries);
    await runner.relocate({ srcTable: computed.table, srcSlidingTable: computed.slidingTable, srcStart: 0, count: CHUNK, dstTable: relocated.table, dstSlidingTable: relocated.slidingTable, dstStart: 0, positions: range(DELTA, CHUNK) });
    const imported = await sequence(entries);
    const exported = await runner.export({ ...computed, start: 0, count: CHUNK });
    await runner.import({ ...imported, start: 0, count: CHUNK }, { positions: range(DELTA, CHUNK), layers: exported.layers });

    for (const [name, moved] of [["RELOCATE", relocated], ["IMPORT", imported]] as const) {
      for (const e of layerErrors(await runner.export({ ...moved, start: 0, count: CHUNK }), want)) {
        expect(e.k).toBeLessThan(1e-4);
        expect(e.v).toBeLessThan(1e-4);
      }
      const ask = (tables: typeof moved) =>
        runner.forward({ sequences: [{ ...tables, tokens: question, positions: range(DELTA + CHUNK, QUESTION), indices: sequenceRange(CHUNK, QUESTION), logitRows: [QUESTION - 1] }] });
      const logits = (await ask(moved)).logits[0]!;
      const reference = (await ask(fresh)).logits[0]!;
      const error = maxAbsDiff(logits, reference);
      expect(error, `${name}: question logits`).toBeLessThan(1e-4);
      if (name === "RELOCATE") await runner.forward({ sequences: [{ ...fresh, tokens: chunk, positions: range(DELTA, CHUNK), indices: sequenceRange(0, CHUNK), logitRows: [] }] });
    }
    // Sensitivity: the plain table in place of YaRN's moves K far (frequencies 3.. differ).
    for (const l of [0, 1]) {
      const k = want.layers[l]!.k;
      const wrong = maxAbsDiff(plainTableK(k, SHAPE.headDim, DELTA, (j) => yarnFrequency(j, SHAPE.headDim)), k) / maxAbs(k);
      expect(wrong, `layer ${l}: K moved with the plain table`).toBeGreaterThan(0.05);
    }
  });
});

describe("bad gpt-oss metadata is refused naming the key", () => {
  let dir = "";
  let bytes: Uint8Array;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gptoss-metadata-"));
    bytes = new Uint8Array(readFileSync(writeRandomGguf("gptoss", join(dir, "good.gguf"), { ...SHAPE, extraArgs: ["--arch-option", "zero_experts=1"] })));
  });
  afterAll(() => dir && rmSync(dir, { recursive: true, force: true }));

  /** The file with some metadata changed (undefined: removed) or a tensor left out. */
  function variant(name: string, changes: Record<string, GgufValue | undefined>, dropTensor?: string): string {
    const header = parseGguf(bytes);
    for (const [key, value] of Object.entries(changes)) {
      if (value === undefined) header.metadata.delete(key);
      else header.metadata.set(key, value);
    }
    const tensors = header.tensors
      .filter((t) => t.name !== dropTensor)
      .map((t) => ({ name: t.name, type: t.type, dims: t.dims, data: () => bytes.subarray(t.fileOffset, t.fileOffset + t.bytes) }));
    const path = join(dir, `${name}.gguf`);
    writeFileSync(path, encodeGguf(header.metadata, tensors));
    return path;
  }

  async function startError(model: string): Promise<string> {
    try {
      const runner = await RunnerProcess.start({ executable: buildRunner(), model, blocks: 8, blockSize: BLOCK, threads: 1, kvDtype: "f32" });
      await runner.shutdown();
      return "";
    } catch (error) {
      return (error as Error).message;
    }
  }

  test("the unchanged file loads", async () => {
    expect(await startError(variant("same", {}))).toBe("");
  });

  const cases: [string, Record<string, GgufValue | undefined>, RegExp, string?][] = [
    ["no window", { "gpt-oss.attention.sliding_window": undefined }, /metadata gpt-oss\.attention\.sliding_window is missing \(gpt-oss needs it\)/],
    ["pattern length", { "gpt-oss.attention.sliding_window_pattern": ggufArray("bool", [true, false]) }, /gpt-oss\.attention\.sliding_window_pattern must be an integer or one bool per layer \(4\)/],
    ["experts used", { "gpt-oss.expert_used_count": ggufUint32(5) }, /gpt-oss\.expert_used_count exceeds expert_count \(4\)/],
    ["rope scaling", { "gpt-oss.rope.scaling.type": ggufString("longrope") }, /gpt-oss\.rope\.scaling\.type longrope is not supported \(none, linear, yarn\)/],
    ["yarn factor", { "gpt-oss.rope.scaling.factor": ggufFloat32(-2) }, /gpt-oss\.rope\.scaling\.factor must be positive/],
    ["swa base", { "gpt-oss.rope.freq_base_swa": ggufFloat32(10000) }, /gpt-oss\.rope\.freq_base_swa differs from rope\.freq_base/],
    ["no sinks", {}, /no tensor for model\.layers\.1\.self_attn\.sinks\.weight/, "blk.1.attn_sinks.weight"],
  ];
  for (const [name, changes, message, dropTensor] of cases)
    test(name, async () => {
      expect(await startError(variant(name.replace(/\W+/g, "-"), changes, dropTensor))).toMatch(message);
    });

  test("a pattern in the file is followed (odd layers sliding here)", async () => {
    const runner = await RunnerProcess.start({
      executable: buildRunner(),
      model: variant("odd-sliding", { "gpt-oss.attention.sliding_window_pattern": ggufArray("bool", [false, true, false, true]) }),
      blocks: 8, blockSize: BLOCK, threads: 1, kvDtype: "f32",
    });
    try {
      expect(runner.info.layer_windows).toEqual([0, WINDOW, 0, WINDOW]);
    } finally {
      await runner.shutdown();
    }
  });
});
