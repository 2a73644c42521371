/**
 * KV-cache managed generation benchmark (issue 6, item 10), on the CPU runner.
 *
 *   npx bun scripts/bench-kv.ts [--model kv] [--contexts 4096,8192,16384] [--requests 2]
 *                               [--policies prophet,cachecraft,none] [--ratios 0.1,0.2,0.3]
 *                               [--agree-tokens 32] [--decode-contexts 4096,8192,16384,32768]
 *                               [--kv-budget 0.01] [--decode-steps 16] [--threads N] [--json out.json]
 *                               [--skip-prefill] [--skip-decode]
 *
 * Part 1, reuse. A knowledge base of 64 chunks of 256–1,024 tokens (random token ids); each
 * request draws distinct chunks by Zipf popularity (s = 1) until it holds about the target
 * context, between a 32-token head and a 24-token question. Before a request is measured its
 * chunks are cached by warm-up requests holding them in other orders (so every chunk is reused
 * at a new position after another prefix). Then, for the same prompt:
 *   full      every token computed (no cache): the reference logits and its 32 greedy tokens;
 *   prefix    exact-prefix caching only (the head is the only exact prefix);
 *   cold + metadata  a prompt of the same lengths whose chunks were never seen: everything
 *             computed, with the attention statistics a chunk's metadata needs (its first use);
 *   policy × ratio  chunk reuse with `prophet`, `cachecraft` or `none` at each ratio.
 * TTFT is the wall time of the prefill (placing cached KV included); measured requests store
 * nothing back, so every configuration sees the same cache. Deviation from full prefill: max and
 * mean abs difference of the first token's logits, and top-1 agreement over the first
 * `--agree-tokens` greedy tokens (teacher-forced with full prefill's tokens, so one miss does not
 * derail the rest).
 *
 * Part 2, sparse decode. A 4,096-token prefill, copied (RELOCATE, re-rotated) to fill up to the
 * longest decode context; for each context, decode steps reading the whole KV against steps
 * reading the CHESS selection at `--kv-budget` (selection and page summaries included).
 *
 * Prints the machine, the command and markdown tables on stdout (progress on stderr).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { parseArgs } from "node:util";
import { KvBlockPool, KvBlockTable } from "../src/kv/kvBlockTable.ts";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { sequenceRange } from "../src/runner/runnerProtocol.ts";
import { tinyModelParameterCount } from "../src/model/tinyModel.ts";
import { ChunkCache } from "../src/kv/chunkCache.ts";
import { managedPrefill, type ManagedPrefillOptions } from "../src/kv/managedPrefill.ts";
import type { RecomputePolicy } from "../src/kv/recomputeSelection.ts";
import { promptTokens, segmentTokens, type SegmentedPrompt } from "../src/kv/segmentedPrompt.ts";
import { SparseDecode } from "../src/kv/sparseDecode.ts";
import { calibrateThresholds, tokenUncertainty, type TokenUncertainty } from "../src/kv/uncertaintyTrigger.ts";
import { BENCH_MODELS, benchModelFolder, buildBenchRunner, median, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "kv" },
    contexts: { type: "string", default: "4096,8192,16384" },
    requests: { type: "string", default: "2" },
    policies: { type: "string", default: "prophet,cachecraft,none" },
    ratios: { type: "string", default: "0.1,0.2,0.3" },
    "agree-tokens": { type: "string", default: "32" },
    "decode-contexts": { type: "string", default: "4096,8192,16384,32768" },
    "kv-budget": { type: "string", default: "0.01" },
    "decode-steps": { type: "string", default: "16" },
    threads: { type: "string", default: String(cpus().length) },
    json: { type: "string" },
    "skip-prefill": { type: "boolean" },
    "skip-decode": { type: "boolean" },
  },
});

const numbers = (text: string) => text.split(",").map(Number);
const modelName = values.model!;
const contexts = numbers(values.contexts!);
const requestsPerContext = Number(values.requests);
const policies = values.policies!.split(",") as RecomputePolicy[];
const ratios = numbers(values.ratios!);
const agreeTokens = Number(values["agree-tokens"]);
const decodeContexts = numbers(values["decode-contexts"]!);
const kvBudget = Number(values["kv-budget"]);
const decodeSteps = Number(values["decode-steps"]);
const threads = Number(values.threads);
const BLOCK = 16;

// ---------------------------------------------------------------------------
// Workload

function random(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

const rand = random(20261123);
const VOCAB = BENCH_MODELS[modelName]!.vocab;
const randomTokens = (n: number) => Array.from({ length: n }, () => 3 + Math.floor(rand() * (VOCAB - 3)));
const KNOWLEDGE = Array.from({ length: 64 }, () => randomTokens(256 + Math.floor(rand() * 769)));
const HEAD = randomTokens(32);
const zipfWeights = KNOWLEDGE.map((_, i) => 1 / (i + 1));
const zipfTotal = zipfWeights.reduce((a, b) => a + b, 0);

function zipfDraw(exclude: Set<number>): number {
  for (;;) {
    let u = rand() * zipfTotal;
    let i = 0;
    while (u > zipfWeights[i]! && i < KNOWLEDGE.length - 1) u -= zipfWeights[i++]!;
    if (!exclude.has(i)) return i;
  }
}

function drawChunks(context: number): number[] {
  const chosen = new Set<number>();
  let length = HEAD.length + 24;
  while (length < context && chosen.size < KNOWLEDGE.length) {
    const i = zipfDraw(chosen);
    if (length + KNOWLEDGE[i]!.length > context * 1.05 && chosen.size >= 8) break;
    chosen.add(i);
    length += KNOWLEDGE[i]!.length;
  }
  return [...chosen];
}

function shuffled<T>(xs: readonly T[]): T[] {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

const promptOf = (order: number[], question: number[]): SegmentedPrompt => segmentTokens(HEAD, order.map((i) => KNOWLEDGE[i]!), question);

// ---------------------------------------------------------------------------
// Part 1

interface PrefillRow {
  context: number;
  chunks: number;
  config: string;
  ttft_ms: number;
  vs_full: number;
  vs_prefix: number;
  recomputed: number;
  reused: number;
  max_abs_logit_diff: number;
  mean_abs_logit_diff: number;
  top1_agreement: number;
}

const argmax = (x: Float32Array) => {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
};

async function benchPrefill(runner: RunnerProcess): Promise<PrefillRow[]> {
  const pool = new KvBlockPool(runner, BLOCK, runner.info.free_blocks);
  const cache = new ChunkCache(runner, { deviceBlocks: Math.floor((runner.info.free_blocks * 2) / 3), hostBytes: 8 * 2 ** 30 });
  cache.attachPool(pool);
  const vocab = runner.info.vocab;

  // A cache with no room: prefills through it collect chunk metadata and then store nothing.
  const roomless = new ChunkCache(runner, { deviceBlocks: 0, hostBytes: 0 });
  roomless.attachPool(pool);

  /** One prefill (and optionally teacher-forced decode steps) in a fresh table; nothing stored back unless `store`. */
  async function run(prompt: SegmentedPrompt, options: ManagedPrefillOptions, forced: number[] | null, store = false, into: ChunkCache = cache) {
    const length = promptTokens(prompt).length;
    const table = new KvBlockTable(BLOCK);
    await pool.grow([{ table, entries: length + agreeTokens + 1 }]);
    const started = performance.now();
    const result = await managedPrefill(runner, into, prompt, table.blocks, { ...options, collectMetadata: store });
    const ttft = performance.now() - started;
    const steps: number[] = [argmax(result.logits)];
    if (forced !== null) {
      for (let t = 0; t + 1 < agreeTokens; t++) {
        const out = await runner.forward({ sequences: [{ table: table.blocks, tokens: [forced[t]!], indices: [length + t], logitRows: [0] }] });
        steps.push(argmax(out.logits[0]!.subarray(0, vocab)));
      }
    }
    const storeStarted = performance.now();
    if (store) await result.storeBack();
    const storeMs = performance.now() - storeStarted;
    await pool.release([table]);
    return { result, ttft, steps, storeMs };
  }

  const rows: PrefillRow[] = [];
  for (const context of contexts) {
    const perConfig = new Map<string, { ttft: number[]; recomputed: number[]; reused: number[]; maxDiff: number[]; meanDiff: number[]; agree: number[] }>();
    const record = (config: string, values: { ttft: number; recomputed: number; reused: number; maxDiff: number; meanDiff: number; agree: number }) => {
      const entry = perConfig.get(config) ?? { ttft: [], recomputed: [], reused: [], maxDiff: [], meanDiff: [], agree: [] };
      entry.ttft.push(values.ttft);
      entry.recomputed.push(values.recomputed);
      entry.reused.push(values.reused);
      entry.maxDiff.push(values.maxDiff);
      entry.meanDiff.push(values.meanDiff);
      entry.agree.push(values.agree);
      perConfig.set(config, entry);
    };
    let chunkCounts: number[] = [];
    for (let r = 0; r < requestsPerContext; r++) {
      const chunks = drawChunks(context);
      chunkCounts.push(chunks.length);
      const question = randomTokens(24);
      // Cold: chunks of the same lengths never seen before, so every token is computed, with the
      // attention statistics for their metadata (what a chunk's first request pays).
      const coldPrompt = segmentTokens(HEAD, chunks.map((i) => randomTokens(KNOWLEDGE[i]!.length)), question);
      const cold = await run(coldPrompt, { policy: "cachecraft", recomputeRatio: 0.2 }, null, true, roomless);
      record("cold + metadata", { ttft: cold.ttft, recomputed: 0, reused: 0, maxDiff: Number.NaN, meanDiff: Number.NaN, agree: Number.NaN });
      progress(`  cold, metadata collected: ${cold.ttft.toFixed(0)} ms; store-back (with the measured context shift, after the first token) ${cold.storeMs.toFixed(0)} ms`);
      // Warm-up: the chunks cached after other prefixes (two other orders, other questions).
      for (let w = 0; w < 2; w++) await run(promptOf(shuffled(chunks), randomTokens(24)), { policy: "none", recomputeRatio: 0 }, null, true);
      const prompt = promptOf(chunks, question);
      const length = promptTokens(prompt).length;
      progress(`context ${context}, request ${r + 1}/${requestsPerContext}: ${chunks.length} chunks, ${length} tokens`);

      // Full prefill is timed three times (before, between and after the others); the median counts.
      const full = await run(prompt, { policy: "full", recomputeRatio: 1 }, null);
      const fullTimes = [full.ttft];
      // Full prefill's greedy tokens (decoded from its own cache).
      const reference = await (async () => {
        const table = new KvBlockTable(BLOCK);
        await pool.grow([{ table, entries: length + agreeTokens + 1 }]);
        const ids = promptTokens(prompt);
        let out = await runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, length), logitRows: [length - 1] }] });
        const tokens = [argmax(out.logits[0]!)];
        for (let t = 0; t + 1 < agreeTokens; t++) {
          out = await runner.forward({ sequences: [{ table: table.blocks, tokens: [tokens[t]!], indices: [length + t], logitRows: [0] }] });
          tokens.push(argmax(out.logits[0]!));
        }
        await pool.release([table]);
        return tokens;
      })();
      const fullLogits = full.result.logits;
      progress(`  full: ${full.ttft.toFixed(0)} ms`);

      const configs: { name: string; options: ManagedPrefillOptions }[] = [{ name: "prefix", options: { policy: "prefix", recomputeRatio: 0 } }];
      for (const policy of policies) {
        for (const ratio of policy === "none" ? [0] : ratios) configs.push({ name: `${policy} ${policy === "none" ? "" : `@${ratio}`}`.trim(), options: { policy, recomputeRatio: ratio } });
      }
      for (const [k, config] of configs.entries()) {
        if (k === Math.floor(configs.length / 2)) fullTimes.push((await run(prompt, { policy: "full", recomputeRatio: 1 }, null)).ttft);
        const measured = await run(prompt, config.options, reference);
        const logits = measured.result.logits;
        let max = 0;
        let sum = 0;
        for (let i = 0; i < logits.length; i++) {
          const d = Math.abs(logits[i]! - fullLogits[i]!);
          max = Math.max(max, d);
          sum += d;
        }
        const agree = measured.steps.filter((id, i) => id === reference[i]).length / measured.steps.length;
        const u = measured.result.usage;
        record(config.name, { ttft: measured.ttft, recomputed: u.prompt_tokens_recomputed, reused: u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed, maxDiff: max, meanDiff: sum / logits.length, agree });
        progress(`  ${config.name}: ${measured.ttft.toFixed(0)} ms, recomputed ${u.prompt_tokens_recomputed}, top-1 ${(100 * agree).toFixed(0)}%, max |Δlogit| ${max.toFixed(3)}`);
      }
      fullTimes.push((await run(prompt, { policy: "full", recomputeRatio: 1 }, null)).ttft);
      progress(`  full (3 timings): ${fullTimes.map((t) => t.toFixed(0)).join(", ")} ms`);
      record("full", { ttft: median(fullTimes), recomputed: 0, reused: 0, maxDiff: 0, meanDiff: 0, agree: 1 });
    }
    const fullTtft = median(perConfig.get("full")!.ttft);
    const prefixTtft = median(perConfig.get("prefix")!.ttft);
    for (const [config, v] of perConfig) {
      rows.push({
        context,
        chunks: median(chunkCounts),
        config,
        ttft_ms: median(v.ttft),
        vs_full: median(v.ttft) / fullTtft,
        vs_prefix: median(v.ttft) / prefixTtft,
        recomputed: median(v.recomputed),
        reused: median(v.reused),
        max_abs_logit_diff: median(v.maxDiff),
        mean_abs_logit_diff: median(v.meanDiff),
        top1_agreement: v.agree.reduce((a, b) => a + b, 0) / v.agree.length,
      });
    }
    chunkCounts = [];
  }
  return rows;
}

// ---------------------------------------------------------------------------
// Part 2

interface DecodeRow {
  context: number;
  dense_ms: number;
  sparse_ms: number;
  speedup: number;
  pages_read: number;
  pages_total: number;
  reconstructions: number;
}

async function benchDecode(runner: RunnerProcess): Promise<DecodeRow[]> {
  const maxContext = Math.max(...decodeContexts);
  const base = 4096;
  const baseTokens = randomTokens(base);
  const blocks = Math.ceil(maxContext / BLOCK);
  const table = await runner.alloc(blocks);
  progress(`decode: prefilling ${base} tokens, copying them up to ${maxContext}`);
  await runner.forward({ sequences: [{ table, tokens: baseTokens, indices: sequenceRange(0, base), logitRows: [] }] });
  for (let start = base; start < maxContext; start += base) {
    const count = Math.min(base, maxContext - start);
    const positions = Int32Array.from({ length: count }, (_, i) => start + i);
    await runner.relocate({ srcTable: table, srcStart: 0, count, dstTable: table, dstStart: start, positions });
  }
  const rows: DecodeRow[] = [];
  for (const context of decodeContexts) {
    const prefix = table.slice(0, context / BLOCK);
    const tail = await runner.alloc(1);
    const full = [...prefix, ...tail];
    const timeSteps = async (entry: (step: number) => { table: readonly number[]; index: number }, observe: (logits: Float32Array) => void) => {
      const times: number[] = [];
      for (let step = 0; step < decodeSteps; step++) {
        const started = performance.now();
        const e = entry(step);
        const out = await runner.forward({ sequences: [{ table: e.table, tokens: [baseTokens[step]!], positions: [context + step], indices: [e.index], logitRows: [0] }] });
        observe(out.logits[0]!);
        times.push(performance.now() - started);
      }
      return median(times);
    };
    // The dense steps calibrate the reconstruction trigger (99th percentile, as CHESS does offline).
    const uncertainty: TokenUncertainty[] = [];
    const dense = await timeSteps((step) => ({ table: full, index: context + step }), (logits) => uncertainty.push(tokenUncertainty(logits)));
    const sparse = new SparseDecode(runner.info, kvBudget, { ...calibrateThresholds(uncertainty, 0.99), windowSteps: 4 });
    const started = performance.now();
    const view = new KvBlockTable(BLOCK);
    view.blocks.push(...prefix);
    view.length = context;
    await sparse.sync(runner, view);
    const summariseMs = performance.now() - started;
    let pages = 0;
    const sparseMs = await timeSteps(
      (step) => {
        const e = sparse.decodeEntry(full, context + step);
        pages = e.table.length;
        return e;
      },
      (logits) => sparse.observe(logits),
    );
    await runner.free(tail);
    rows.push({ context, dense_ms: dense, sparse_ms: sparseMs, speedup: dense / sparseMs, pages_read: pages, pages_total: full.length, reconstructions: sparse.reconstructions });
    progress(`decode @${context}: dense ${dense.toFixed(2)} ms, sparse ${sparseMs.toFixed(2)} ms (${(dense / sparseMs).toFixed(2)}×, ${pages}/${full.length} pages, ${sparse.reconstructions} selections; page summaries ${summariseMs.toFixed(0)} ms once)`);
  }
  await runner.free(table);
  return rows;
}

// ---------------------------------------------------------------------------

const executable = buildBenchRunner("cpu");
const path = benchModelFolder(modelName);
// The prefill part's runner holds the chunk cache's device tier (two prompts' worth) and a request.
const longestPrompt = Math.max(...contexts) * 1.1 + 64;
let prefillRows: PrefillRow[] = [];
let decodeRows: DecodeRow[] = [];
// One runner per part, each sized for it.
for (const part of ["prefill", "decode"] as const) {
  if (values[`skip-${part}`]) continue;
  const blocks = part === "prefill" ? Math.ceil((3 * longestPrompt) / BLOCK) : Math.ceil((Math.max(...decodeContexts) + 2 * BLOCK) / BLOCK);
  const runner = await RunnerProcess.start({ executable, model: path, blocks, blockSize: BLOCK, threads, log: () => {} });
  try {
    if (part === "prefill") prefillRows = await benchPrefill(runner);
    else decodeRows = await benchDecode(runner);
  } finally {
    await runner.shutdown();
  }
}

const cpu = cpus()[0]?.model ?? "unknown CPU";
console.log(`machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`command: npx bun scripts/bench-kv.ts ${process.argv.slice(2).join(" ")}`.trimEnd());
console.log(`model ${modelName} (${(tinyModelParameterCount(BENCH_MODELS[modelName]!) / 1e6).toFixed(1)}M parameters), CPU runner, ${threads} threads; ${requestsPerContext} requests per context (medians)`);
/** Not measured (the cold row has no deviation: it computes everything): a dash. */
const shown = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : "—");
if (prefillRows.length > 0) {
  console.log("");
  console.log("| context | chunks | config | TTFT ms | × full | × prefix | reused tokens | recomputed | max abs Δlogit | mean abs Δlogit | top-1 agreement |");
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of prefillRows) {
    console.log(
      `| ${r.context} | ${r.chunks} | ${r.config} | ${r.ttft_ms.toFixed(0)} | ${r.vs_full.toFixed(3)} | ${r.vs_prefix.toFixed(3)} | ${r.reused} | ${r.recomputed} | ${shown(r.max_abs_logit_diff, 4)} | ${shown(r.mean_abs_logit_diff, 5)} | ${Number.isFinite(r.top1_agreement) ? `${(100 * r.top1_agreement).toFixed(1)}%` : "—"} |`,
    );
  }
}
if (decodeRows.length > 0) {
  console.log("");
  console.log(`| context | dense ms/token | sparse ms/token (budget ${kvBudget}) | speedup | pages read / total | selections in ${decodeSteps} steps |`);
  console.log("|---|---|---|---|---|---|");
  for (const r of decodeRows) console.log(`| ${r.context} | ${r.dense_ms.toFixed(2)} | ${r.sparse_ms.toFixed(2)} | ${r.speedup.toFixed(2)}× | ${r.pages_read} / ${r.pages_total} | ${r.reconstructions} |`);
}
if (values.json) writeFileSync(values.json, JSON.stringify({ model: modelName, threads, prefill: prefillRows, decode: decodeRows }, null, 2));
