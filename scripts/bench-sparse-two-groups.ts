/**
 * Sparse decode on a model with two KV cache groups (issue 32 item 4): decode step time reading the
 * whole KV against reading the CHESS selection of the full-attention layers' pages, the
 * sliding-window layers reading their window either way.
 *
 *   npx bun scripts/bench-sparse-two-groups.ts [--contexts 4096,8192,16384] [--kv-budget 0.05]
 *     [--decode-steps 16] [--layers 4] [--hidden 2880] [--heads 64] [--kv-heads 8] [--head-dim 64]
 *     [--window 128] [--threads 2] [--json OUT]
 *
 * The model: a random-weight gpt-oss file written by llama.cpp's gguf-py (scripts/oracle/random_gguf.py,
 * F16) with gpt-oss-20b's attention shape (hidden 2880, 64 query heads, 8 KV heads of 64, window
 * 128, even layers sliding) but `--layers` layers and 4 small experts, so that attention is a
 * visible share of a step (gpt-oss-20b's 24 layers and MXFP4 experts read ~2 GB a step). Kept in
 * .bench/sparse-two-groups/. One prefill of the longest context, then for each context
 * `--decode-steps` dense steps (the full table) and as many sparse ones (SparseDecode's compacted
 * table for the full group, the sliding table and the true index for the sliding one: FORWARD
 * flags bit 5), interleaved; the first selection (page summaries, token scores) timed apart, and
 * each step's attention time from the runner's PROFILE. f16 KV cache, as `serve --model FILE.gguf`.
 * A table on stdout (and --json), progress on stderr.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { KvBlockTable } from "../src/kv/kvBlockTable.ts";
import { SparseDecode } from "../src/kv/sparseDecode.ts";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { sequenceRange, type ForwardSequence } from "../src/runner/runnerProtocol.ts";
import { writeRandomGguf } from "../test/helpers/llamaOracle.ts";
import { buildBenchRunner, median, progress, REPO } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    contexts: { type: "string", default: "4096,8192,16384" },
    "kv-budget": { type: "string", default: "0.05" },
    "decode-steps": { type: "string", default: "16" },
    layers: { type: "string", default: "4" },
    hidden: { type: "string", default: "2880" },
    heads: { type: "string", default: "64" },
    "kv-heads": { type: "string", default: "8" },
    "head-dim": { type: "string", default: "64" },
    window: { type: "string", default: "128" },
    threads: { type: "string", default: "2" },
    json: { type: "string" },
  },
});
const num = (name: keyof typeof values) => Number(values[name]);
const contexts = values.contexts!.split(",").map(Number).sort((a, b) => a - b);
const BLOCK = 16;
const PREFILL_CHUNK = 512;
const decodeSteps = num("decode-steps");
const kvBudget = num("kv-budget");
if (contexts.some((c) => !Number.isInteger(c) || c <= 0 || c % BLOCK !== 0)) throw new Error(`--contexts must be positive multiples of ${BLOCK}`);
if (!(decodeSteps >= 1 && decodeSteps <= BLOCK)) throw new Error(`--decode-steps must be 1..${BLOCK} (the steps write one tail block)`);

function modelFile(): string {
  const dir = join(REPO, ".bench", "sparse-two-groups");
  mkdirSync(dir, { recursive: true });
  const shape = ["layers", "hidden", "heads", "kv-heads", "head-dim", "window"].map((k) => values[k as keyof typeof values]).join("-");
  const file = join(dir, `gptoss-${shape}.gguf`);
  if (!existsSync(file)) {
    progress(`writing ${file}`);
    writeRandomGguf("gptoss", file, {
      layers: num("layers"), hidden: num("hidden"), heads: num("heads"), kvHeads: num("kv-heads"), headDim: num("head-dim"), ffn: 256,
      context: 131072, extraArgs: ["--sliding-window", values.window!, "--dtype", "f16"],
    });
  }
  return file;
}

interface Row {
  context: number;
  dense_ms: number;
  sparse_ms: number;
  speedup: number;
  /** The step's attention (every layer), from the runner's profile. */
  dense_attention_ms: number;
  sparse_attention_ms: number;
  pages_read: number;
  pages_total: number;
  selection_ms: number;
}

const longest = contexts[contexts.length - 1]!;
const blocks = longest / BLOCK + 2;
const runner = await RunnerProcess.start({ executable: buildBenchRunner("cpu"), model: modelFile(), blocks, slidingBlocks: blocks, blockSize: BLOCK, threads: num("threads"), kvDtype: "f16", log: () => {} });
const rows: Row[] = [];
try {
  if (runner.info.kv_groups === undefined) throw new Error("the model has one KV group; this benchmark needs sliding-window layers");
  const tokens = Array.from({ length: longest + BLOCK }, (_, i) => 4 + ((i * 7919) % (runner.info.vocab - 4)));
  const table = await runner.alloc(longest / BLOCK);
  const slidingTable = await runner.alloc(longest / BLOCK, 1);
  const started = performance.now();
  for (let start = 0; start < longest; start += PREFILL_CHUNK) {
    const count = Math.min(PREFILL_CHUNK, longest - start);
    await runner.forward({ sequences: [{ table, slidingTable, tokens: tokens.slice(start, start + count), indices: sequenceRange(start, count), logitRows: [] }] });
    progress(`prefill ${start + count}/${longest} (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  for (const context of contexts) {
    const tail = await runner.alloc(1);
    const slidingTail = await runner.alloc(1, 1);
    const full = [...table.slice(0, context / BLOCK), ...tail];
    const sliding = [...slidingTable.slice(0, context / BLOCK), ...slidingTail];
    const step = async (at: number, forward: Omit<ForwardSequence, "tokens" | "positions" | "logitRows" | "slidingTable">) => {
      const out = await runner.forward({ sequences: [{ ...forward, slidingTable: sliding, tokens: [tokens[at]!], positions: [at], logitRows: [0] }] });
      return out.logits[0]!;
    };
    // No reselection after the first (the trigger never fires): the steady sparse step.
    const sparse = new SparseDecode(runner.info, kvBudget, { entropyThreshold: 1e9, varentropyThreshold: 1e9 });
    const view = new KvBlockTable(BLOCK);
    view.blocks.push(...full);
    view.length = context;
    let t = performance.now();
    await sparse.sync(runner, view);
    const selectionMs = performance.now() - t;
    // Dense and sparse steps interleaved (the machine is shared: drift hits both alike); each
    // step's attention time from the runner's profile, fetched outside the timed part.
    const dense: number[] = [], denseAttention: number[] = [], sparseTimes: number[] = [], sparseAttention: number[] = [];
    let pages = 0;
    await runner.profile(true);
    for (let s = 0; s < decodeSteps; s++) {
      t = performance.now();
      await step(context + s, { table: full, indices: [context + s] });
      dense.push(performance.now() - t);
      denseAttention.push((await runner.profile(true)).attention_seconds * 1000);
      t = performance.now();
      const entry = sparse.decodeEntry(full, context + s);
      pages = entry.table.length;
      sparse.observe(await step(context + s, { table: entry.table, indices: [entry.index], slidingIndices: [context + s] }));
      sparseTimes.push(performance.now() - t);
      sparseAttention.push((await runner.profile(true)).attention_seconds * 1000);
    }
    await runner.profile(false);
    await runner.free(tail);
    await runner.free(slidingTail, 1);
    const row = {
      context, dense_ms: median(dense), sparse_ms: median(sparseTimes), speedup: median(dense) / median(sparseTimes),
      dense_attention_ms: median(denseAttention), sparse_attention_ms: median(sparseAttention), pages_read: pages, pages_total: full.length, selection_ms: selectionMs,
    };
    rows.push(row);
    progress(`@${context}: dense ${row.dense_ms.toFixed(2)} ms (attention ${row.dense_attention_ms.toFixed(2)}), sparse ${row.sparse_ms.toFixed(2)} ms (attention ${row.sparse_attention_ms.toFixed(2)}), ${pages}/${full.length} pages`);
  }
} finally {
  await runner.shutdown();
}

console.log(`machine: ${cpus()[0]?.model ?? "unknown CPU"}, ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`command: npx bun scripts/bench-sparse-two-groups.ts ${process.argv.slice(2).join(" ")}`.trimEnd());
console.log(`model: random gpt-oss, ${values.layers} layers (${runner.info.kv_groups?.[0]?.layers.length} full-attention), hidden ${values.hidden}, ${values.heads} heads, ${values["kv-heads"]} KV heads of ${values["head-dim"]}, window ${values.window}; f16 KV; ${values.threads} threads`);
console.log("");
console.log(`| context | dense ms/token | sparse ms/token (budget ${kvBudget}) | speedup | dense attention ms | sparse attention ms | full-group pages read / total | first selection ms |`);
console.log("|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  console.log(
    `| ${r.context} | ${r.dense_ms.toFixed(2)} | ${r.sparse_ms.toFixed(2)} | ${r.speedup.toFixed(2)}× | ${r.dense_attention_ms.toFixed(2)} | ${r.sparse_attention_ms.toFixed(2)} | ${r.pages_read} / ${r.pages_total} | ${r.selection_ms.toFixed(0)} |`,
  );
}
if (values.json) writeFileSync(values.json, JSON.stringify({ kv_budget: kvBudget, rows }, null, 2));
