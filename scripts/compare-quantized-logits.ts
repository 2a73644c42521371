/**
 * Quantized logits against f32, ours and llama.cpp's, on the same GGUF files (issue 14, item 4:
 * "quantized logits vs the same model in f32 within the error that llama.cpp itself shows on the
 * same file").
 *
 *   mkdir -p /tmp/lcpp3 && cd /tmp/lcpp3 && npm init -y && npm i node-llama-cpp@3.22.1
 *   npx bun scripts/compare-quantized-logits.ts --folder models/quality [--types f32,q8_0,q4_k]
 *       [--out-dir /tmp/qlogits] [--prompts 4] [--lcpp-kv f32|f16] [--threads 2]
 *       [--llamacpp /tmp/lcpp3] [--runner cuda/build/ctxr-runner-cpu] [--json FILE]
 *
 * The folder is written at each --type with `ctxr model quantize`'s code (into --out-dir, reused
 * when present; f32 is always made, as llama.cpp's baseline). The prompts are held-out examples of
 * the quality task (src/quality/perplexity.ts): --prompts each of lookup, dependence and order, cut
 * before the answer, so the last position predicts the answer's first digit. The same token ids
 * go to both engines. Our logits come from the CPU runner on the folder (f32, the reference) and
 * on each file; llama.cpp's from node-llama-cpp (installed in a scratch folder, never a dependency
 * of ctxr) on each file, asking for its KV cache in --lcpp-kv (default f32, as ours; llama.cpp's
 * own default is f16). node-llama-cpp 3.22.1 takes both settings but gave bit-identical logits
 * with either on the quality model, so whether the setting reaches llama.cpp is not confirmed.
 *
 * For each type, over every position of every prompt and over the last positions alone: the
 * largest |Δlogit|, the RMS of Δlogit, and the share of positions whose argmax agrees, for
 *   ours-Qx vs ours-f32 (folder), llama.cpp-Qx vs llama.cpp-F32 (file), ours-Qx vs llama.cpp-Qx.
 * Prints a markdown table; the last stdout line is JSON (also --json FILE).
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { quantizeModel } from "../src/model/gguf/quantizeModel.ts";
import { QUANTIZE_TYPES, type QuantizeType } from "../src/model/gguf/quantizeTypePlan.ts";
import { resolveModelSource } from "../src/model/modelSource.ts";
import { loadSourceTokenizer } from "../src/model/sourceTokenizer.ts";
import { exampleDocument, heldOutExamples } from "../src/quality/perplexity.ts";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";

const REPO = resolve(import.meta.dir, "..");
const { values } = parseArgs({
  options: {
    folder: { type: "string", default: join(REPO, "models", "quality") },
    types: { type: "string", default: "f32,q8_0,q4_k" },
    "out-dir": { type: "string", default: "/tmp/ctxr-quantized-logits" },
    prompts: { type: "string", default: "4" },
    "lcpp-kv": { type: "string", default: "f32" },
    threads: { type: "string", default: "2" },
    llamacpp: { type: "string", default: "/tmp/lcpp3" },
    runner: { type: "string", default: join(REPO, "cuda", "build", "ctxr-runner-cpu") },
    json: { type: "string" },
  },
});
const folder = resolve(values.folder!);
const types = values.types!.split(",").map((t) => t.trim().toLowerCase()) as QuantizeType[];
for (const type of types) if (!(QUANTIZE_TYPES as readonly string[]).includes(type)) throw new Error(`--types: unknown type ${type}`);
if (!types.includes("f32")) types.unshift("f32");
const outDir = resolve(values["out-dir"]!);
mkdirSync(outDir, { recursive: true });
const threads = Number(values.threads);
const kvType = values["lcpp-kv"]!.toUpperCase();

/** Each type's GGUF file, written from the folder unless present. */
const files = new Map<QuantizeType, string>();
const tensorTypes = new Map<QuantizeType, Record<string, number>>();
for (const type of types) {
  const file = join(outDir, `${folder.split("/").at(-1)}-${type}.gguf`);
  if (!existsSync(file)) tensorTypes.set(type, (await quantizeModel({ input: folder, output: file, type })).types);
  files.set(type, file);
}

// Prompts: the token ids of held-out examples cut before the answer.
const { tokenizer, addBos } = await loadSourceTokenizer(resolveModelSource(folder));
const perFamily = Number(values.prompts);
const prompts = heldOutExamples(perFamily, 0, 0, ["lookup", "dependence", "order"]).map((example) => {
  const document = exampleDocument(tokenizer, addBos, example);
  return document.ids.slice(0, document.answerStart ?? document.ids.length);
});
const longest = Math.max(...prompts.map((p) => p.length));

/** Per prompt, per position, the vocab logits. */
type Logits = Float32Array[][];

async function oursLogits(model: string): Promise<{ logits: Logits; weights: string }> {
  const runner = await RunnerProcess.start({ executable: values.runner!, model, blocks: Math.ceil(longest / 16) + 1, blockSize: 16, threads });
  try {
    const vocab = runner.info.vocab;
    const out: Logits = [];
    for (const ids of prompts) {
      const table = await runner.alloc(Math.ceil(ids.length / 16));
      const rows = ids.map((_, i) => i);
      const result = await runner.forward({ sequences: [{ table, tokens: ids, indices: rows, logitRows: rows }] });
      await runner.free(table);
      const flat = result.logits[0]!;
      const stride = flat.length / ids.length;
      out.push(rows.map((i) => flat.slice(i * stride, i * stride + vocab)));
    }
    return { logits: out, weights: runner.info.weight_dtype };
  } finally {
    await runner.shutdown();
  }
}

const { getLlama, LlamaLogLevel } = await import(join(resolve(values.llamacpp!), "node_modules/node-llama-cpp/dist/index.js"));
const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });

async function llamaLogits(file: string, vocab: number): Promise<Logits> {
  const model = await llama.loadModel({ modelPath: file });
  const context = await model.createContext({
    contextSize: Math.max(512, 2 ** Math.ceil(Math.log2(longest + 1))),
    batchSize: 512,
    threads,
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
  });
  const sequence = context.getSequence();
  const out: Logits = [];
  try {
    for (const ids of prompts) {
      await sequence.clearHistory();
      const results = await sequence.controlledEvaluate(ids.map((id) => [id, { generateNext: { logits: true } }]));
      out.push(
        results.map((result: { next?: { logits?: Map<number, number> } } | undefined) => {
          const row = new Float32Array(vocab);
          const map = result?.next?.logits;
          if (!map) throw new Error(`${file}: llama.cpp returned no logits`);
          for (const [token, logit] of map) if (token < vocab) row[token] = logit;
          return row;
        }),
      );
    }
  } finally {
    await context.dispose();
    await model.dispose();
  }
  return out;
}

interface Diff {
  maxAbs: number;
  rms: number;
  top1: number;
  positions: number;
  lastMaxAbs: number;
  lastRms: number;
  lastTop1: number;
  prompts: number;
}

const argmax = (row: Float32Array) => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};

function compare(a: Logits, b: Logits): Diff {
  let maxAbs = 0, squares = 0, count = 0, agree = 0, positions = 0;
  let lastMaxAbs = 0, lastSquares = 0, lastCount = 0, lastAgree = 0;
  a.forEach((prompt, p) => {
    prompt.forEach((row, t) => {
      const other = b[p]![t]!;
      const last = t === prompt.length - 1;
      for (let i = 0; i < row.length; i++) {
        const d = Math.abs(row[i]! - other[i]!);
        maxAbs = Math.max(maxAbs, d);
        squares += d * d;
        count++;
        if (last) {
          lastMaxAbs = Math.max(lastMaxAbs, d);
          lastSquares += d * d;
          lastCount++;
        }
      }
      const same = argmax(row) === argmax(other);
      positions++;
      if (same) agree++;
      if (last && same) lastAgree++;
    });
  });
  return { maxAbs, rms: Math.sqrt(squares / count), top1: agree / positions, positions, lastMaxAbs, lastRms: Math.sqrt(lastSquares / lastCount), lastTop1: lastAgree / a.length, prompts: a.length };
}

console.error(`${prompts.length} prompts, ${prompts.reduce((s, p) => s + p.length, 0)} positions; llama.cpp KV ${kvType}`);
const reference = await oursLogits(folder);
const vocab = reference.logits[0]![0]!.length;
const ours = new Map<QuantizeType, Logits>();
const weights = new Map<QuantizeType, string>();
const theirs = new Map<QuantizeType, Logits>();
for (const type of types) {
  const run = await oursLogits(files.get(type)!);
  ours.set(type, run.logits);
  weights.set(type, run.weights);
  theirs.set(type, await llamaLogits(files.get(type)!, vocab));
  console.error(`${type}: done`);
}

const rows = types.map((type) => ({
  type,
  file: files.get(type)!,
  runnerWeights: weights.get(type)!,
  tensorTypes: tensorTypes.get(type) ?? null,
  oursVsOursF32: compare(ours.get(type)!, reference.logits),
  llamaVsLlamaF32: compare(theirs.get(type)!, theirs.get("f32")!),
  oursVsLlama: compare(ours.get(type)!, theirs.get(type)!),
}));

const cell = (d: Diff) => `${d.maxAbs.toExponential(2)} / ${d.rms.toExponential(2)} / ${(100 * d.top1).toFixed(1)}%`;
const lastCell = (d: Diff) => `${d.lastMaxAbs.toExponential(2)} / ${d.lastRms.toExponential(2)} / ${(100 * d.lastTop1).toFixed(0)}%`;
console.log(`model ${folder}; ${prompts.length} prompts (${rows[0]!.oursVsOursF32.positions} positions); llama.cpp KV cache ${kvType}; cells: max |Δlogit| / RMS Δlogit / top-1 agreement`);
console.log("");
console.log("| file | ours-Qx vs ours-f32 | llama.cpp-Qx vs llama.cpp-F32 | ours-Qx vs llama.cpp-Qx |");
console.log("|---|---|---|---|");
for (const r of rows) console.log(`| ${r.type} (all positions) | ${cell(r.oursVsOursF32)} | ${cell(r.llamaVsLlamaF32)} | ${cell(r.oursVsLlama)} |`);
for (const r of rows) console.log(`| ${r.type} (last position) | ${lastCell(r.oursVsOursF32)} | ${lastCell(r.llamaVsLlamaF32)} | ${lastCell(r.oursVsLlama)} |`);
const json = JSON.stringify({ folder, prompts: prompts.length, llamacppKv: kvType, rows });
if (values.json) writeFileSync(values.json, json + "\n");
console.log(json);
process.exit(0);
