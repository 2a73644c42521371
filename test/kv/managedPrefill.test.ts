/**
 * KV-managed prefill on the real CPU runner (tiny model, 4 layers): with policy
 * full or recompute ratio 1.0 the logits equal a plain full prefill; exact prefix
 * reuse is exact; chunks reused in another order are placed at their new
 * positions; host and disk tiers give the same results as the device tier; a
 * damaged cache file is discarded and its chunk computed; usage adds up.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KvBlockTable } from "../../src/kv/kvBlockTable.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { DiskKvTier } from "../../src/kv/diskKvTier.ts";
import { managedPrefill } from "../../src/kv/managedPrefill.ts";
import { modelIdentity } from "../../src/kv/modelIdentity.ts";
import { promptTokens, segmentTokens } from "../../src/kv/segmentedPrompt.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { CHUNKS, chunkedPrompt as prompt, fullPrefillLogits, HEAD, maxAbsDiff, QUESTION, runManaged as managed, startManaged } from "../helpers/managedPrefillKit.ts";

setDefaultTimeout(120_000);

let executable = "";
let model: { path: string; cleanup(): void };
const runners: RunnerProcess[] = [];
const folders: { cleanup(): void }[] = [];

beforeAll(() => {
  executable = buildRunner();
  model = tinyModelFolder({ layers: 4, seed: 7 });
});

afterAll(async () => {
  for (const runner of runners) await runner.shutdown();
  for (const folder of folders) folder.cleanup();
  model?.cleanup();
});





const setup = (cacheOptions: Parameters<typeof startManaged>[3] = {}) => startManaged(executable, model.path, runners, cacheOptions);
const argmax = (logits: Float32Array) => logits.reduce((best, v, i) => (v > logits[best]! ? i : best), 0);

describe("managedPrefill", () => {
  test("policy full equals a plain prefill and touches no cache", async () => {
    const s = await setup();
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s.runner, s.pool, p);
    const result = await managed(s, p, { policy: "full", recomputeRatio: 0.2 });
    expect(maxAbsDiff(result.logits, reference)).toBeLessThanOrEqual(1e-5);
    expect(result.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    expect(s.cache.index.size).toBe(0);
  });

  test("the same prompt again is an exact prefix hit: nothing but the question is computed, logits unchanged", async () => {
    const s = await setup();
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s.runner, s.pool, p);
    const first = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(first.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    expect(maxAbsDiff(first.logits, reference)).toBeLessThanOrEqual(1e-4);
    const second = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(second.usage.prompt_tokens_prefix_reused).toBe(promptTokens(p).length - QUESTION.length);
    expect(second.usage.prompt_tokens_computed).toBe(QUESTION.length);
    expect(second.usage.tier_hits.device).toBe(4);
    expect(maxAbsDiff(second.logits, reference)).toBeLessThanOrEqual(1e-4);
  });

  for (const policy of ["prophet", "cachecraft"] as const) {
    test(`${policy} at recompute ratio 1.0 equals full prefill with the chunks in another order`, async () => {
      const s = await setup();
      await managed(s, prompt([0, 1, 2, 3]), { policy, recomputeRatio: 0.2 });
      const p = prompt([2, 0, 4, 3, 1]);
      const reference = await fullPrefillLogits(s.runner, s.pool, p);
      const result = await managed(s, p, { policy, recomputeRatio: 1 });
      const reused = [2, 0, 3, 1].reduce((n, i) => n + CHUNKS[i]!.length, 0);
      expect(result.usage.prompt_tokens_prefix_reused).toBe(HEAD.length);
      expect(result.usage.prompt_tokens_recomputed).toBe(reused);
      expect(result.usage.prompt_tokens_chunk_reused).toBe(0);
      expect(result.usage.prompt_tokens_computed).toBe(CHUNKS[4]!.length + QUESTION.length);
      expect(maxAbsDiff(result.logits, reference)).toBeLessThanOrEqual(1e-4);
    });
  }

  test("decoding after a ratio-1.0 prefill continues exactly like decoding after full prefill", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([3, 2, 1, 0]);
    const ids = promptTokens(p);
    const decodeAfter = async (prefill: (table: KvBlockTable) => Promise<void>) => {
      const table = new KvBlockTable(16);
      await s.pool.grow([{ table, entries: ids.length + 4 }]);
      await prefill(table);
      const out: Float32Array[] = [];
      for (let t = 0; t < 3; t++) {
        const step = await s.runner.forward({ sequences: [{ table: table.blocks, tokens: [CHUNKS[0]![t]!], indices: [ids.length + t], logitRows: [0] }] });
        out.push(step.logits[0]!);
      }
      await s.pool.release([table]);
      return out;
    };
    const reference = await decodeAfter(async (table) => {
      await s.runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [] }] });
    });
    for (const policy of ["prophet", "cachecraft"] as const) {
      const reused = await decodeAfter(async (table) => {
        const result = await managedPrefill(s.runner, s.cache, p, table.blocks, { policy, recomputeRatio: 1 });
        await result.storeBack();
      });
      reused.forEach((logits, t) => expect(maxAbsDiff(logits, reference[t]!)).toBeLessThanOrEqual(1e-4));
    }
  });

  test("at 20% the recompute set is 20% of the reused tokens and the usage partitions the prompt", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([3, 1, 0, 2]);
    for (const policy of ["prophet", "cachecraft", "none"] as const) {
      const result = await managed(s, p, { policy, recomputeRatio: 0.2 });
      const reused = [3, 1, 0, 2].reduce((n, i) => n + CHUNKS[i]!.length, 0);
      const u = result.usage;
      expect(u.prompt_tokens_recomputed).toBe(policy === "none" ? 0 : Math.ceil(0.2 * reused));
      expect(u.prompt_tokens_prefix_reused + u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed + u.prompt_tokens_computed).toBe(promptTokens(p).length);
      expect(u.prompt_tokens_computed).toBe(QUESTION.length);
    }
  });

  test("cachecraft with focused-chunk early stop: window 1 stops after layer 1 and changes the answer; a window beyond the layers changes nothing", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3, 4]), { policy: "prophet", recomputeRatio: 0.2 });
    const p = prompt([4, 2, 0, 1, 3]);
    const plain = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3 });
    const never = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3, focusWindow: 99 });
    expect(never.usage.focus_cutoff_layer).toBeNull();
    expect(maxAbsDiff(never.logits, plain.logits)).toBeLessThanOrEqual(1e-5);
    const early = await managed(s, p, { policy: "cachecraft", recomputeRatio: 0.3, focusWindow: 1 });
    // Window 1: the first layer's focused set (always a strict subset of six candidate chunks,
    // Algorithm 1 keeps 1..k-2) is confirmed at once, so the unfocused chunks stop after layer 1.
    expect(early.usage.focus_cutoff_layer).toBe(1);
    expect(early.logits.every(Number.isFinite)).toBe(true);
    // The stopped tokens keep their stale KV in layers 2..4, so the question sees something else.
    expect(maxAbsDiff(early.logits, plain.logits)).toBeGreaterThan(1e-4);
  });

  test("epic recomputes the first tokens of every reused chunk, the budget spread evenly", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3]), { policy: "prefix", recomputeRatio: 0 });
    const p = prompt([2, 0, 3, 1]);
    const sizes = [2, 0, 3, 1].map((i) => CHUNKS[i]!.length); // 48, 40, 21, 33: 142 reused tokens
    const result = await managed(s, p, { policy: "epic", recomputeRatio: 0.2 });
    // ⌈0.2·142⌉ = 29 tokens over 4 chunks: 8, 7, 7, 7.
    const starts = [HEAD.length];
    for (const size of sizes.slice(0, -1)) starts.push(starts.at(-1)! + size);
    const expected = [8, 7, 7, 7].flatMap((k, c) => Array.from({ length: k }, (_, t) => starts[c]! + t));
    expect(Array.from(result.recomputed)).toEqual(expected);
    expect(result.usage.policy).toBe("epic");
    expect(result.usage.prompt_tokens_recomputed).toBe(29);
    expect(result.usage.prompt_tokens_chunk_reused).toBe(142 - 29);
    // Recomputing changes what the question sees; at ratio 1 it is full prefill.
    const none = await managed(s, p, { policy: "none", recomputeRatio: 0 });
    expect(maxAbsDiff(result.logits, none.logits)).toBeGreaterThan(1e-4);
    const all = await managed(s, p, { policy: "epic", recomputeRatio: 1 });
    expect(maxAbsDiff(all.logits, await fullPrefillLogits(s.runner, s.pool, p))).toBeLessThanOrEqual(1e-4);
  });

  test("prophet's shift scores: the stalest tokens by the stored variants' measured shift, attention where a variant has none", async () => {
    const order = [4, 2, 0, 1, 3];
    const measured = await setup();
    await managed(measured, prompt([0, 1, 2, 3, 4]), { policy: "prefix", recomputeRatio: 0, measureShift: true });
    const p = prompt(order);
    const attention = await managed(measured, p, { policy: "prophet", recomputeRatio: 0.1, prophetScores: "attention" });
    const shift = await managed(measured, p, { policy: "prophet", recomputeRatio: 0.1, prophetScores: "shift" });
    const product = await managed(measured, p, { policy: "prophet", recomputeRatio: 0.1, prophetScores: "product" });
    expect(shift.recomputed.length).toBe(attention.recomputed.length);
    expect(Array.from(shift.recomputed)).not.toEqual(Array.from(attention.recomputed));
    expect(product.recomputed.length).toBe(attention.recomputed.length);
    // "shift" is the global top by the stored shift: check it against the variants' metadata.
    const bounds = [HEAD.length];
    for (const i of order) bounds.push(bounds.at(-1)! + CHUNKS[i]!.length);
    const byPosition: { position: number; stale: number }[] = [];
    order.forEach((i, c) => {
      const variants = measured.cache.index.variantsOf(p.segments[c + 1]!.hash);
      expect(variants.length).toBe(1);
      Array.from(variants[0]!.meta.tokenShift!).forEach((d, t) => byPosition.push({ position: bounds[c]! + t, stale: d / (1 + d) }));
    });
    // Every chunk moved (4 was last in the warm-up), so every chunk is reused at a new position.
    const expected = byPosition
      .sort((a, b) => b.stale - a.stale || a.position - b.position)
      .slice(0, shift.recomputed.length)
      .map((x) => x.position)
      .sort((a, b) => a - b);
    expect(Array.from(shift.recomputed)).toEqual(expected);
    // Variants stored without a shift: the shift scores fall back to the question's attention.
    const unmeasured = await setup();
    await managed(unmeasured, prompt([0, 1, 2, 3, 4]), { policy: "prefix", recomputeRatio: 0, measureShift: false });
    const fallback = await managed(unmeasured, p, { policy: "prophet", recomputeRatio: 0.1, prophetScores: "shift" });
    const plain = await managed(unmeasured, p, { policy: "prophet", recomputeRatio: 0.1, prophetScores: "attention" });
    expect(Array.from(fallback.recomputed)).toEqual(Array.from(plain.recomputed));
  });

  test("prophet scored by the question's last token only: the same as all rows for a one-token question, another choice for a longer one", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3, 4]), { policy: "prefix", recomputeRatio: 0 });
    const order = [4, 2, 0, 1, 3];
    const oneToken = segmentTokens(HEAD, order.map((i) => CHUNKS[i]!), QUESTION.slice(-1));
    const all1 = await managed(s, oneToken, { policy: "prophet", recomputeRatio: 0.1, prophetQueryRows: "all" });
    const last1 = await managed(s, oneToken, { policy: "prophet", recomputeRatio: 0.1, prophetQueryRows: "last" });
    expect(all1.recomputed.length).toBeGreaterThan(0);
    expect(Array.from(last1.recomputed)).toEqual(Array.from(all1.recomputed));
    const p = prompt(order);
    const all = await managed(s, p, { policy: "prophet", recomputeRatio: 0.1, prophetQueryRows: "all" });
    const last = await managed(s, p, { policy: "prophet", recomputeRatio: 0.1, prophetQueryRows: "last" });
    expect(last.recomputed.length).toBe(all.recomputed.length);
    expect(Array.from(last.recomputed)).not.toEqual(Array.from(all.recomputed));
  });

  for (const policy of ["cachecraft", "prophet"] as const) {
    test(`serving a ${policy} request leaves the cache as it was: host hits with recomputed tokens are not promoted from the request's copy`, async () => {
      // Device room for two chunks: of the head and four chunks, the least used go to the host tier.
      const s = await setup({ deviceBlocks: 7 });
      await managed(s, prompt([0, 1, 2, 3]), { policy: "prefix", recomputeRatio: 0 });
      expect(s.cache.stats.hostVariants).toBeGreaterThan(0);
      const p = prompt([2, 0, 3, 1]);
      const before = await managed(s, p, { policy: "none", recomputeRatio: 0 });
      const fixing = await managed(s, p, { policy, recomputeRatio: 0.5 });
      expect(fixing.usage.prompt_tokens_recomputed).toBeGreaterThan(0);
      expect(fixing.usage.tier_hits.host).toBeGreaterThan(0);
      const after = await managed(s, p, { policy: "none", recomputeRatio: 0 });
      // Re-rotation on the way between tiers costs rounding at most; recomputed KV would move the logits by far more.
      expect(maxAbsDiff(after.logits, before.logits)).toBeLessThanOrEqual(1e-4);
    });
  }

  test("host tier (no device room): the same logits as from the device tier", async () => {
    const device = await setup();
    const host = await setup({ deviceBlocks: 0 });
    for (const s of [device, host]) await managed(s, prompt([0, 1, 2]), { policy: "prophet", recomputeRatio: 0.2 });
    expect(host.cache.stats.deviceVariants).toBe(0);
    expect(host.cache.stats.hostVariants).toBe(4);
    const p = prompt([2, 1, 0]);
    const a = await managed(device, p, { policy: "none", recomputeRatio: 0 });
    const b = await managed(host, p, { policy: "none", recomputeRatio: 0 });
    // The head (an exact prefix) and the three chunks.
    expect(b.usage.tier_hits.host).toBe(4);
    expect(a.usage.tier_hits.device).toBe(4);
    expect(maxAbsDiff(a.logits, b.logits)).toBeLessThanOrEqual(1e-5);
  });

  test("disk tier: lossless round trip; a damaged file is discarded and its chunk computed", async () => {
    const folder = tempFolder("ctxr-kvdir-");
    folders.push(folder);
    const identity = await modelIdentity(model.path);
    const first = await setup();
    const disk = new DiskKvTier({ dir: folder.path, capacityBytes: 1 << 30, modelIdentity: identity, layers: first.runner.info.layers, kvWidth: first.runner.info.kv_heads * first.runner.info.head_dim, pageSize: 16 });
    const s = await setup({ deviceBlocks: 0, hostBytes: 0, disk });
    await managed(s, prompt([0, 1, 2]), { policy: "prophet", recomputeRatio: 0.2 });
    expect(s.cache.stats.diskVariants).toBe(4);
    const p = prompt([0, 1, 2]);
    const reference = await fullPrefillLogits(s.runner, s.pool, p);
    const exact = await managed(s, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(exact.usage.tier_hits.disk).toBe(4);
    expect(maxAbsDiff(exact.logits, reference)).toBeLessThanOrEqual(1e-4);

    // Damage every file on disk: each is discarded when read, the chunks are computed again.
    const damaged = await setup({ deviceBlocks: 0, hostBytes: 0, disk });
    await damaged.cache.loadFromDisk();
    for (const name of readdirSync(folder.path)) {
      const path = join(folder.path, name);
      const bytes = readFileSync(path);
      bytes[bytes.length >> 1] ^= 0x10;
      writeFileSync(path, bytes);
    }
    const again = await managed(damaged, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(again.usage.tier_hits.disk).toBe(0);
    expect(again.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    expect(maxAbsDiff(again.logits, reference)).toBeLessThanOrEqual(1e-4);
    expect(damaged.cache.stats.discarded).toBeGreaterThan(0);
  });

  test("greedy next token of none/prophet at 20% is a valid token id and the runner stays consistent", async () => {
    const s = await setup();
    await managed(s, prompt([0, 1, 2, 3, 4]), { policy: "prophet", recomputeRatio: 0.2 });
    const result = await managed(s, prompt([4, 3, 2, 1, 0]), { policy: "prophet", recomputeRatio: 0.2 });
    expect(argmax(result.logits)).toBeLessThan(s.runner.info.vocab);
    expect((await s.runner.queryInfo()).free_blocks).toBe(s.pool.free);
  });
});
