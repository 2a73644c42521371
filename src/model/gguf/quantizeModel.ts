/**
 * `ctxr model quantize`'s work: a Hugging Face Llama/Mistral/Qwen2 folder or a GGUF file
 * in, a GGUF file out at the chosen type (quantizeTypePlan.ts). For a folder: the
 * architecture's metadata and tensor names (hfToGguf.ts), q/k rows permuted for llama,
 * rope_freqs for Llama 3 rope scaling (Phi-3's LongRoPE factors), and the tokenizer metadata (tokenizerToGguf.ts).
 * For a GGUF file: its metadata copied (general.file_type updated) and every tensor
 * dequantized and quantized again. Tensors are read, converted and written one at a
 * time; the file appears only when complete.
 */
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { openSafetensorsFolder } from "../safetensorsFolder.ts";
import { hfModelMetadata, hfModelShape, hfRopeFactorTensors, hfTensorMapping, permuteQueryKeyRows } from "./hfToGguf.ts";
import { type GgufMetadata, ggufUint32 } from "./ggufMetadata.ts";
import { dequantizeValues } from "./ggufQuantize.ts";
import { GGUF_MAGIC, readGgufTensorData } from "./ggufReader.ts";
import { ggufModelTensors, readGgufParts } from "./ggufSplit.ts";
import { GGML_TYPE, ggmlElementCount, ggmlTypeName } from "./ggufTypes.ts";
import { type GgufTensorToWriteAsync, writeGgufFileAsync } from "./ggufWriter.ts";
import { QuantizePool } from "./quantizePool.ts";
import { optionalInteger, optionalString } from "./ggufMetadataValues.ts";
import { tensorLayer } from "./quantizeTensorCategory.ts";
import { type ModelFactsForPlan, QUANTIZE_PLANS, type QuantizeType, planTensorTypes } from "./quantizeTypePlan.ts";
import { tokenizerToGguf } from "./tokenizerToGguf.ts";

export class QuantizeInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QuantizeInputError";
  }
}

export interface QuantizeModelOptions {
  input: string;
  output: string;
  type: QuantizeType;
  /** Threads that quantize (default 1: inline). */
  threads?: number;
  /** general.name of a folder's model (default: the folder's name; a hub snapshot's is its commit, so a model by name passes its repository's). */
  modelName?: string;
  /** Called after each tensor is written: tensors done, total, the tensor's GGUF name. */
  onProgress?(done: number, total: number, name: string): void;
}

export interface QuantizeSummary {
  input: "folder" | "gguf";
  architecture: string;
  tensors: number;
  bytes: number;
  seconds: number;
  /** How many tensors of each ggml type were written. */
  types: Record<string, number>;
}

/** A tensor to write: its float32 values (from the input) and the type to store them as. */
interface TensorSource {
  name: string;
  type: number;
  dims: readonly number[];
  /** The stored bytes as they are, when the input already has them in this type. */
  raw?: () => Uint8Array;
  values(): Float32Array;
}

interface Conversion {
  kind: "folder" | "gguf";
  metadata: GgufMetadata;
  tensors: TensorSource[];
}

function readJson(path: string, required: boolean): Record<string, unknown> | null {
  if (!existsSync(path)) {
    if (required) throw new QuantizeInputError(`${path} is missing`);
    return null;
  }
  try {
    const value = JSON.parse(readFileSync(path, "utf8"));
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error("not a JSON object");
    return value as Record<string, unknown>;
  } catch (error) {
    throw new QuantizeInputError(`${path}: ${(error as Error).message}`);
  }
}

function fromFolder(folder: string, type: QuantizeType, modelName: string): Conversion {
  const config = readJson(join(folder, "config.json"), true)!;
  const tokenizerJson = readJson(join(folder, "tokenizer.json"), false);
  if (!tokenizerJson) throw new QuantizeInputError(`${join(folder, "tokenizer.json")} is missing (a GGUF file carries the tokenizer; folders with only tokenizer.model are not supported)`);
  const shape = hfModelShape(config);
  const metadata = hfModelMetadata(config, modelName);
  metadata.set("general.file_type", ggufUint32(QUANTIZE_PLANS[type].fileType));
  metadata.set("general.quantization_version", ggufUint32(2));
  const templatePath = join(folder, "chat_template.jinja");
  const tokenizer = tokenizerToGguf({
    tokenizerJson,
    tokenizerConfig: readJson(join(folder, "tokenizer_config.json"), false),
    modelConfig: config,
    chatTemplateFile: existsSync(templatePath) ? readFileSync(templatePath, "utf8") : null,
  });
  for (const [key, value] of tokenizer) metadata.set(key, value);

  const folderTensors = openSafetensorsFolder(folder);
  const tensors: TensorSource[] = [];
  for (const { name, values } of hfRopeFactorTensors(config)) tensors.push({ name, type: GGML_TYPE.F32, dims: [values.length], values: () => values });
  for (const [name, entry] of folderTensors.tensors) {
    const mapping = hfTensorMapping(name, shape);
    if (!mapping) continue;
    tensors.push({
      name: mapping.ggufName,
      type: GGML_TYPE.F32,
      dims: [...entry.shape].reverse(),
      values: () => {
        const values = folderTensors.readFloat32(name);
        return mapping.permuteHeads > 0 ? permuteQueryKeyRows(values, entry.shape[0]!, mapping.permuteHeads) : values;
      },
    });
  }
  const facts: ModelFactsForPlan = { architecture: shape.architecture, layers: shape.layers, heads: shape.heads, kvHeads: shape.kvHeads, experts: 0, tied: shape.tied };
  planTensorTypes(type, tensors, facts).forEach((planned, i) => {
    if (planned !== null) tensors[i]!.type = planned;
  });
  if (!tensors.some((t) => t.name === "token_embd.weight")) throw new QuantizeInputError(`${folder}: no model.embed_tokens.weight tensor`);
  return { kind: "folder", metadata, tensors };
}

/** A GGUF model, one file or the parts of a split one (written as one file: the split keys go). */
function fromGguf(path: string, type: QuantizeType): Conversion {
  const parts = readGgufParts(path);
  const gguf = parts[0]!.header;
  const metadata: GgufMetadata = new Map(gguf.metadata);
  for (const key of ["split.no", "split.count", "split.tensors.count"]) metadata.delete(key);
  metadata.set("general.file_type", ggufUint32(QUANTIZE_PLANS[type].fileType));
  if (!metadata.has("general.quantization_version")) metadata.set("general.quantization_version", ggufUint32(2));
  const infos = parts.flatMap((part) => part.header.tensors.map((info) => ({ info, path: part.path })));
  const planned = planTensorTypes(type, infos.map((entry) => entry.info), ggufModelFacts(gguf.metadata, ggufModelTensors(parts)));
  const tensors = infos.map(({ info, path }, i): TensorSource => {
    const tensorType = planned[i] ?? info.type; // a tensor llama.cpp does not quantize keeps its type
    return {
      name: info.name,
      type: tensorType,
      dims: info.dims,
      raw: tensorType === info.type ? () => readGgufTensorData(path, info) : undefined,
      values: () => dequantizeValues(info.type, readGgufTensorData(path, info), ggmlElementCount(info.dims)),
    };
  });
  return { kind: "gguf", metadata, tensors };
}

/** A head count may be one per layer (an array): llama.cpp's rules read layer 0's. */
function firstInteger(metadata: GgufMetadata, key: string): number | undefined {
  const value = metadata.get(key);
  if (value?.type === "array") {
    const first = value.value.items[0];
    return typeof first === "number" && Number.isSafeInteger(first) ? first : undefined;
  }
  return optionalInteger(metadata, key);
}

/** What the type rules need of a GGUF model: its metadata, else what its tensor names say. */
function ggufModelFacts(metadata: GgufMetadata, tensors: readonly { name: string }[]): ModelFactsForPlan {
  const architecture = optionalString(metadata, "general.architecture") ?? "unknown";
  const layers = optionalInteger(metadata, `${architecture}.block_count`) ?? new Set(tensors.map((t) => tensorLayer(t.name)).filter((n) => n >= 0)).size;
  const heads = firstInteger(metadata, `${architecture}.attention.head_count`) ?? 0;
  return {
    architecture,
    layers,
    heads,
    kvHeads: firstInteger(metadata, `${architecture}.attention.head_count_kv`) ?? heads,
    experts: optionalInteger(metadata, `${architecture}.expert_count`) ?? 0,
    tied: !tensors.some((t) => t.name === "output.weight"),
  };
}

function isGgufFile(path: string): boolean {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const head = new Uint8Array(4);
    return readSync(fd, head, 0, 4, 0) === 4 && new DataView(head.buffer).getUint32(0, true) === GGUF_MAGIC;
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export async function quantizeModel(options: QuantizeModelOptions): Promise<QuantizeSummary> {
  const started = performance.now();
  let stats;
  try {
    stats = statSync(options.input);
  } catch (error) {
    throw new QuantizeInputError(`cannot read ${options.input}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let conversion: Conversion;
  if (stats.isDirectory()) conversion = fromFolder(options.input, options.type, options.modelName ?? basename(resolve(options.input)));
  else if (isGgufFile(options.input)) conversion = fromGguf(options.input, options.type);
  else throw new QuantizeInputError(`${options.input} is neither a model folder nor a GGUF file`);

  const total = conversion.tensors.length;
  let done = 0;
  const pool = new QuantizePool(options.threads ?? 1);
  const tensors = conversion.tensors.map(
    (tensor): GgufTensorToWriteAsync => ({
      name: tensor.name,
      type: tensor.type,
      dims: tensor.dims,
      data: async () => {
        const bytes = tensor.raw ? tensor.raw() : await pool.quantize(tensor.type, tensor.values());
        options.onProgress?.(++done, total, tensor.name);
        return bytes;
      },
    }),
  );
  let bytes: number;
  try {
    bytes = await writeGgufFileAsync(options.output, conversion.metadata, tensors);
  } finally {
    pool.close();
  }
  const types: Record<string, number> = {};
  for (const tensor of tensors) types[ggmlTypeName(tensor.type)] = (types[ggmlTypeName(tensor.type)] ?? 0) + 1;
  const architecture = conversion.metadata.get("general.architecture");
  return {
    input: conversion.kind,
    architecture: architecture?.type === "string" ? architecture.value : "unknown",
    tensors: total,
    bytes,
    seconds: (performance.now() - started) / 1000,
    types,
  };
}

