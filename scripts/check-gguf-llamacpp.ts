/**
 * Loads a GGUF file with llama.cpp (node-llama-cpp, installed into a scratch folder,
 * never a dependency of ctxr) and prints, for a prompt, llama.cpp's tokens, the logits'
 * summary at every position and a greedy continuation. With --folder (the Hugging Face
 * folder the file was written from), it also runs src/model/referenceLlama.ts on the
 * same token ids and prints the largest logit difference per position: that checks our
 * tensor names, q/k permutation and metadata against the reference implementation.
 * With --dequantized as well, the reference runs on the GGUF file's own weights
 * (dequantized, names mapped back, q/k rows un-permuted) instead of the folder's, so
 * what remains is llama.cpp's own error on that file (f16 KV cache, activations
 * quantized to 8 bits for quantized weights), not the weights' quantization error.
 *
 *   mkdir -p /tmp/lcpp && cd /tmp/lcpp && npm init -y && npm i node-llama-cpp@3.22.1
 *   npx bun scripts/check-gguf-llamacpp.ts --gguf m.gguf [--folder DIR] [--prompt TEXT]
 *       [--ids 256,72,105] [--generate 8] [--threads 2] [--llamacpp /tmp/lcpp]
 *
 * The last stdout line is JSON: { tokens, positions: [{ top, maxLogit, finite, maxDiff? }],
 * greedy, maxAbsDiff?, maxRelDiff? }. Exit 1 when a logit is not finite.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { referenceLlama, referenceLogits } from "../src/model/referenceLlama.ts";
import { type SafetensorsFile, encodeSafetensors, readSafetensors } from "../src/model/safetensors.ts";
import { dequantizeValues } from "../src/model/gguf/ggufQuantize.ts";
import { readGgufFile, readGgufTensorData } from "../src/model/gguf/ggufReader.ts";
import { hfModelShape, hfTensorMapping, permuteQueryKeyRows } from "../src/model/gguf/hfToGguf.ts";
import { safetensorsFiles } from "../src/model/safetensorsFolder.ts";

const { values } = parseArgs({
  options: {
    gguf: { type: "string" },
    folder: { type: "string" },
    prompt: { type: "string", default: "The quick brown fox jumps over the lazy dog." },
    ids: { type: "string" },
    generate: { type: "string", default: "8" },
    threads: { type: "string", default: "2" },
    llamacpp: { type: "string", default: "/tmp/lcpp" },
    dequantized: { type: "boolean", default: false },
  },
});
if (!values.gguf) {
  console.error("usage: check-gguf-llamacpp.ts --gguf FILE [--folder DIR] [--prompt TEXT | --ids 1,2,3] [--generate N]");
  process.exit(2);
}

const entry = join(resolve(values.llamacpp!), "node_modules/node-llama-cpp/dist/index.js");
const { getLlama, LlamaLogLevel } = await import(entry);
const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.warn });
const model = await llama.loadModel({ modelPath: resolve(values.gguf) });
const context = await model.createContext({ contextSize: 512, threads: Number(values.threads), batchSize: 512 });
const sequence = context.getSequence();

const tokens: number[] = values.ids ? values.ids.split(",").map(Number) : [...model.tokenize(values.prompt!, true)];
const vocab = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length ?? model.tokens?.vocabSize ?? 0;
const results = await sequence.controlledEvaluate(tokens.map((token) => [token, { generateNext: { logits: true } }]));
const llamaLogits: Float64Array[] = results.map((result: { next?: { logits?: Map<number, number> } } | undefined) => {
  const map = result?.next?.logits ?? new Map<number, number>();
  const row = new Float64Array(Math.max(vocab, ...map.keys()) + 1);
  for (const [token, logit] of map) row[token] = logit;
  return row;
});

let reference: Float64Array[] | null = null;
if (values.folder) {
  const folder = resolve(values.folder);
  const files = safetensorsFiles(folder);
  if (files.length !== 1) throw new Error("--folder: the reference reads one model.safetensors");
  const config = JSON.parse(readFileSync(join(folder, "config.json"), "utf8"));
  const file = readSafetensors(new Uint8Array(readFileSync(join(folder, files[0]!))));
  reference = referenceLogits(referenceLlama(config, values.dequantized ? ggufAsSafetensors(resolve(values.gguf!), file) : file), tokens);
}

/** The folder's checkpoint with every tensor replaced by the GGUF file's dequantized one. */
function ggufAsSafetensors(path: string, folderFile: SafetensorsFile): SafetensorsFile {
  const gguf = readGgufFile(path);
  const config = JSON.parse(readFileSync(join(resolve(values.folder!), "config.json"), "utf8"));
  const shape = hfModelShape(config);
  const tensors = [...folderFile.tensors.values()].flatMap((tensor) => {
    const mapping = hfTensorMapping(tensor.name, shape);
    if (!mapping) return [];
    const info = gguf.tensors.find((t) => t.name === mapping.ggufName);
    if (!info) throw new Error(`${path} has no ${mapping.ggufName}`);
    let data = dequantizeValues(info.type, readGgufTensorData(path, info), info.dims.reduce((a, b) => a * b, 1));
    if (mapping.permuteHeads > 0) data = permuteQueryKeyRows(data, tensor.shape[0]!, mapping.permuteHeads, true);
    return [{ name: tensor.name, dtype: "F32" as const, shape: tensor.shape, data: new Uint8Array(data.buffer) }];
  });
  return readSafetensors(encodeSafetensors(tensors));
}

const argmax = (row: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};
let maxAbsDiff = 0;
let maxRelDiff = 0;
let allFinite = true;
const positions = llamaLogits.map((row, t) => {
  const finite = row.every(Number.isFinite);
  allFinite &&= finite;
  const info: Record<string, unknown> = { top: argmax(row), maxLogit: row[argmax(row)], finite };
  if (reference) {
    const ref = reference[t]!;
    let diff = 0;
    let scale = 0;
    for (let i = 0; i < ref.length; i++) {
      diff = Math.max(diff, Math.abs(ref[i]! - row[i]!));
      scale = Math.max(scale, Math.abs(ref[i]!));
    }
    info.referenceTop = argmax(ref);
    info.maxDiff = diff;
    maxAbsDiff = Math.max(maxAbsDiff, diff);
    maxRelDiff = Math.max(maxRelDiff, diff / scale);
  }
  return info;
});

// Greedy continuation from a fresh sequence.
await sequence.clearHistory();
const greedy: number[] = [];
for await (const token of sequence.evaluate(tokens, { temperature: 0 })) {
  greedy.push(token);
  if (greedy.length >= Number(values.generate)) break;
}

for (const [t, info] of positions.entries()) console.log(`position ${t}: token ${tokens[t]} → top ${info.top}${reference ? ` (reference ${info.referenceTop}), max |Δlogit| ${(info.maxDiff as number).toExponential(2)}` : ""}`);
console.log(JSON.stringify({ gguf: values.gguf, tokens, positions, greedy, ...(reference ? { maxAbsDiff, maxRelDiff } : {}) }));
await context.dispose();
await model.dispose();
process.exit(allFinite ? 0 : 1);
