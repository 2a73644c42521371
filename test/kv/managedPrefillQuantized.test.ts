/**
 * KV-managed prefill on quantized GGUF files (issue 14, item 4), at the logits: a tiny Llama
 * (4 layers, hidden 256, so Q4_K blocks fit every projection's rows) written by `ctxr model
 * quantize` at Q8_0 and Q4_K, on the real CPU runner. The checks of managedPrefill.test.ts that
 * say the mechanisms are exact, on quantized weights: policy full equals a plain prefill, an exact
 * prefix hit and recompute ratio 1.0 in another order equal full prefill (RoPE re-rotation of
 * reused K), decoding after a ratio-1.0 prefill continues as after full prefill, Cache-Craft's
 * focused-chunk early stop cuts off, the host and disk tiers give the device tier's logits.
 *
 * Where f32 is exact to 1e-4, the bound here is QUANTIZED_TOLERANCE (why: below); where the
 * computation is the same forward (policy full, an early-stop window past the layers), 1e-5.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { DiskKvTier } from "../../src/kv/diskKvTier.ts";
import { KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { managedPrefill } from "../../src/kv/managedPrefill.ts";
import { ggufModelIdentity } from "../../src/kv/modelIdentity.ts";
import { promptTokens } from "../../src/kv/segmentedPrompt.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { CHUNKS, chunkedPrompt as prompt, fullPrefillLogits, maxAbsDiff, QUESTION, runManaged as managed, startManaged } from "../helpers/managedPrefillKit.ts";

setDefaultTimeout(120_000);

const TYPES = ["q8_0", "q4_k"] as const;
type Type = (typeof TYPES)[number];
/**
 * Max |Δlogit| between two computations of the same prompt that are exact on f32 weights (1e-4
 * there) but arrange the rows otherwise. On quantized weights they are not bit-exact: the runner
 * quantizes activations to int8 per 32-value block (Q8_0 at every batch size, K-quants up to 16
 * rows, f32 tiles above), so a last-bit difference of an attention output (other batch layout,
 * K re-rotated on reuse, KV imported from a tier) can flip one activation's rounding, and that
 * moves the logits by about 0.03-0.08 on this model (measured). Reusing stale KV (policy none)
 * moves them by about 1.3; the tests check that this bound tells the two apart.
 */
const QUANTIZED_TOLERANCE = 0.15;

let executable = "";
let model: { path: string; cleanup(): void };
const scratch = tempFolder("ctxr-managed-quantized-");
const files = {} as Record<Type, string>;
const runners: RunnerProcess[] = [];

beforeAll(async () => {
  executable = buildRunner();
  model = tinyModelFolder({ layers: 4, seed: 7, hidden: 256, heads: 4, kvHeads: 2, intermediate: 512 }, "tiny-managed-q");
  for (const type of TYPES) {
    files[type] = join(scratch.path, `tiny-${type}.gguf`);
    await quantizeModel({ input: model.path, output: files[type], type });
  }
}, 300_000);

afterAll(async () => {
  for (const runner of runners) await runner.shutdown();
  model?.cleanup();
  scratch.cleanup();
});





const setup = (file: string, cacheOptions: Parameters<typeof startManaged>[3] = {}) => startManaged(executable, file, runners, cacheOptions);

describe.each(TYPES)("managedPrefill on a %s GGUF", (type) => {

  test("the file holds the type and the runner keeps it", async () => {
    const header = readGgufFile(files[type]);
    const projections = header.tensors.filter((t) => t.name.startsWith("blk.") && t.dims.length === 2);
    expect(projections.length).toBe(4 * 7);
    for (const tensor of projections) expect(tensor.type).toBe(type === "q8_0" ? 8 : 12);
    const s = await setup(files[type]);
    expect(s.runner.info.weight_dtype).toBe(type);
  });

  test("policy full equals a plain prefill; the same prompt again is an exact prefix hit", async () => {
    const s = await setup(files[type]);
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s.runner, s.pool, p);
    const full = await managed(s, p, { policy: "full", recomputeRatio: 0.2 });
    expect(maxAbsDiff(full.logits, reference)).toBeLessThanOrEqual(1e-5);
    const first = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(first.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    const second = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(second.usage.prompt_tokens_prefix_reused).toBe(promptTokens(p).length - QUESTION.length);
    expect(second.usage.tier_hits.device).toBe(4);
    expect(maxAbsDiff(second.logits, reference)).toBeLessThanOrEqual(QUANTIZED_TOLERANCE);
  });

  for (const policy of ["prophet", "cachecraft"] as const) {
    test(`${policy} at ratio 1.0 equals full prefill with the chunks in another order; at 0.2 it recomputes 20%`, async () => {
      const s = await setup(files[type]);
      await managed(s, prompt([0, 1, 2, 3]), { policy, recomputeRatio: 0.2 });
      const p = prompt([2, 0, 4, 3, 1]);
      const reference = await fullPrefillLogits(s.runner, s.pool, p);
      const exact = await managed(s, p, { policy, recomputeRatio: 1 });
      const reused = [2, 0, 3, 1].reduce((n, i) => n + CHUNKS[i]!.length, 0);
      expect(exact.usage.prompt_tokens_recomputed).toBe(reused);
      expect(exact.usage.prompt_tokens_chunk_reused).toBe(0);
      expect(maxAbsDiff(exact.logits, reference)).toBeLessThanOrEqual(QUANTIZED_TOLERANCE);
      // The bound tells exact from stale: the same chunks reused without recompute are far off.
      const stale = await managed(s, p, { policy: "none", recomputeRatio: 0 });
      expect(maxAbsDiff(stale.logits, reference)).toBeGreaterThan(4 * QUANTIZED_TOLERANCE);
      const partial = await managed(s, prompt([3, 1, 0, 2]), { policy, recomputeRatio: 0.2 });
      const reusedPartial = [3, 1, 0, 2].reduce((n, i) => n + CHUNKS[i]!.length, 0);
      expect(partial.usage.prompt_tokens_recomputed).toBe(Math.ceil(0.2 * reusedPartial));
      expect(partial.logits.every(Number.isFinite)).toBe(true);
    });
  }

  test("decoding after a ratio-1.0 prefill continues like decoding after full prefill", async () => {
    const s = await setup(files[type]);
    await managed(s, prompt([0, 1, 2, 3]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([3, 2, 1, 0]);
    const ids = promptTokens(p);
    const decodeAfter = async (prefill: (table: KvBlockTable) => Promise<void>) => {
      const table = new KvBlockTable(16);
      await s.pool.grow([{ table, entries: ids.length + 4 }]);
      await prefill(table);
      const out: Float32Array[] = [];
      for (let t = 0; t < 3; t++) out.push((await s.runner.forward({ sequences: [{ table: table.blocks, tokens: [CHUNKS[0]![t]!], indices: [ids.length + t], logitRows: [0] }] })).logits[0]!);
      await s.pool.release([table]);
      return out;
    };
    const reference = await decodeAfter(async (table) => {
      await s.runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [] }] });
    });
    const reused = await decodeAfter(async (table) => {
      const result = await managedPrefill(s.runner, s.cache, p, table.blocks, { policy: "cachecraft", recomputeRatio: 1 });
      await result.storeBack();
    });
    reused.forEach((logits, t) => expect(maxAbsDiff(logits, reference[t]!)).toBeLessThanOrEqual(QUANTIZED_TOLERANCE));
  });

  test("cachecraft's focused-chunk early stop: window 1 cuts off after layer 1, a window past the layers changes nothing", async () => {
    const s = await setup(files[type]);
    await managed(s, prompt([0, 1, 2, 3, 4]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([4, 2, 0, 1, 3]);
    const plain = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3 });
    const never = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3, focusWindow: 99 });
    expect(never.usage.focus_cutoff_layer).toBeNull();
    expect(maxAbsDiff(never.logits, plain.logits)).toBeLessThanOrEqual(1e-5);
    const early = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3, focusWindow: 1 });
    expect(early.usage.focus_cutoff_layer).toBe(1);
    expect(early.logits.every(Number.isFinite)).toBe(true);
    expect(maxAbsDiff(early.logits, plain.logits)).toBeGreaterThan(1e-4);
  });

  test("host and disk tiers give the device tier's logits", async () => {
    const device = await setup(files[type]);
    const host = await setup(files[type], { deviceBlocks: 0 });
    const header = readGgufFile(files[type]);
    const disk = new DiskKvTier({
      dir: join(scratch.path, `kv-${type}`),
      capacityBytes: 1 << 30,
      modelIdentity: await ggufModelIdentity(files[type], header.dataStart),
      layers: device.runner.info.layers,
      kvWidth: device.runner.info.kv_heads * device.runner.info.head_dim,
      pageSize: 16,
    });
    const onDisk = await setup(files[type], { deviceBlocks: 0, hostBytes: 0, disk });
    for (const s of [device, host, onDisk]) await managed(s, prompt([0, 1, 2]), { policy: "prophet", recomputeRatio: 0.2 });
    expect(host.cache.stats.hostVariants).toBe(4);
    expect(onDisk.cache.stats.diskVariants).toBe(4);
    const p = prompt([2, 1, 0]);
    const a = await managed(device, p, { policy: "none", recomputeRatio: 0 });
    const b = await managed(host, p, { policy: "none", recomputeRatio: 0 });
    const c = await managed(onDisk, p, { policy: "none", recomputeRatio: 0 });
    expect(a.usage.tier_hits.device).toBe(4);
    expect(b.usage.tier_hits.host).toBe(4);
    expect(c.usage.tier_hits.disk).toBe(4);
    expect(maxAbsDiff(a.logits, b.logits)).toBeLessThanOrEqual(QUANTIZED_TOLERANCE);
    expect(maxAbsDiff(a.logits, c.logits)).toBeLessThanOrEqual(QUANTIZED_TOLERANCE);
  });
});
