/**
 * A deterministic tiny Llama-architecture checkpoint in Hugging Face layout, for
 * tests, fixtures, smoke runs and benchmarks (`ctxr model tiny`): config.json,
 * model.safetensors with random weights, and a byte-level tokenizer
 * (tokenizer.json, tokenizer_config.json with a chat template).
 *
 * Weights come from one seeded normal stream per tensor (labelled by the tensor's
 * name, so a tensor does not change when other tensors are added or resized).
 * Projections and embeddings get standard deviation 1/√fan_in (1/√hidden for the
 * embedding, which may double as the output projection), so activations, attention
 * scores and logits all stay of order one: attention is far from uniform and a wrong
 * rotary embedding, mask or head grouping moves the logits by much more than a
 * test's tolerance (with the common 0.02 they would barely move), while logits stay
 * small enough for float32 to be accurate to ~1e-6. Norm weights are 1 + N(0, 0.1²);
 * optional q/k/v biases N(0, 0.5²); optional q/k norm weights (Qwen3) 1 + N(0, 0.1²).
 *
 * Pure: builds bytes, writes nothing (see writeModelFolder.ts). Same options, same
 * bytes on every machine.
 */
import {
  BOS_TOKEN_ID,
  BYTE_TOKENIZER_VOCAB,
  EOS_TOKEN_ID,
  PAD_TOKEN_ID,
  byteTokenizerConfig,
  byteTokenizerJson,
} from "./byteTokenizer.ts";
import { float32ToBfloat16Bits, float32ToFloat16Bits } from "./halfFloats.ts";
import { NormalRandom } from "./normalRandom.ts";
import {
  type SafetensorsDtype,
  type SafetensorsLayout,
  type TensorEntry,
  type TensorSpec,
  elementCount,
  safetensorsChunks,
  safetensorsLayout,
} from "./safetensors.ts";

export const MODEL_DTYPES = ["f32", "f16", "bf16"] as const;
export type ModelDtype = (typeof MODEL_DTYPES)[number];

export const ROPE_SCALINGS = ["none", "llama3"] as const;
export type RopeScaling = (typeof ROPE_SCALINGS)[number];

export interface TinyModelOptions {
  seed: number;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
  vocab: number;
  dtype: ModelDtype;
  maxPositions: number;
  ropeTheta: number;
  /** Llama 3's rope_scaling block (factor 8, original context 256, so short prompts feel it). */
  ropeScaling: RopeScaling;
  /** No lm_head.weight: the output projection is the embedding (tie_word_embeddings). */
  tieEmbeddings: boolean;
  /** q/k/v projection biases, written as a Qwen2 checkpoint (Qwen2ForCausalLM). */
  qkvBias: boolean;
  /** Qwen3's per-head RMSNorm of q and k (self_attn.q_norm / k_norm), written as Qwen3ForCausalLM. */
  qkNorm: boolean;
  /** Head size (config.json head_dim); 0: hidden / heads. Qwen3 uses heads · head_dim ≠ hidden. */
  headDim: number;
  /**
   * Multiplies the std of q_proj and k_proj: attention logits grow by its square, so attention
   * concentrates on few entries, as a trained model's does (1: logits of std about 1).
   */
  attentionGain: number;
}

export const TINY_MODEL_DEFAULTS: Readonly<TinyModelOptions> = {
  seed: 0,
  layers: 2,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  intermediate: 128,
  vocab: BYTE_TOKENIZER_VOCAB,
  dtype: "f32",
  maxPositions: 8192,
  ropeTheta: 10000,
  ropeScaling: "none",
  tieEmbeddings: false,
  qkvBias: false,
  qkNorm: false,
  headDim: 0,
  attentionGain: 1,
};

export const RMS_NORM_EPS = 1e-5;
export const LLAMA3_ROPE_SCALING = {
  rope_type: "llama3",
  factor: 8,
  low_freq_factor: 1,
  high_freq_factor: 4,
  original_max_position_embeddings: 256,
} as const;

/** Each tensor's bytes must fit a typed array. */
const MAX_TENSOR_ELEMENTS = 2 ** 31 - 1;

/** An impossible combination of sizes; the message names the config fields. */
export class TinyModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TinyModelError";
  }
}

export function headDim(options: TinyModelOptions): number {
  return options.headDim > 0 ? options.headDim : options.hidden / options.heads;
}

export function checkTinyModelOptions(options: TinyModelOptions): void {
  const positive: [keyof TinyModelOptions, string][] = [
    ["layers", "layers"],
    ["hidden", "hidden size"],
    ["heads", "attention heads"],
    ["kvHeads", "key/value heads"],
    ["intermediate", "intermediate size"],
    ["maxPositions", "max positions"],
  ];
  for (const [key, what] of positive) {
    const value = options[key] as number;
    if (!Number.isSafeInteger(value) || value < 1) throw new TinyModelError(`${what} must be a positive integer, got ${value}`);
  }
  if (!(options.attentionGain > 0) || !Number.isFinite(options.attentionGain)) throw new TinyModelError(`attention gain must be a positive number, got ${options.attentionGain}`);
  if (!Number.isSafeInteger(options.seed) || options.seed < 0) throw new TinyModelError(`seed must be a non-negative integer, got ${options.seed}`);
  if (!Number.isSafeInteger(options.vocab) || options.vocab < BYTE_TOKENIZER_VOCAB) {
    throw new TinyModelError(`vocab size must be an integer >= ${BYTE_TOKENIZER_VOCAB} (256 bytes + <s>, </s>, <pad>), got ${options.vocab}`);
  }
  if (!Number.isSafeInteger(options.headDim) || options.headDim < 0) throw new TinyModelError(`head size must be a positive integer (0: hidden / heads), got ${options.headDim}`);
  if (options.qkvBias && options.qkNorm) throw new TinyModelError("q/k/v biases (Qwen2) and q/k norms (Qwen3) are two architectures: pick one");
  if (options.headDim === 0 && options.hidden % options.heads !== 0) {
    throw new TinyModelError(`hidden size ${options.hidden} is not a multiple of the ${options.heads} attention heads`);
  }
  if (headDim(options) % 2 !== 0) {
    throw new TinyModelError(`head size ${headDim(options)}${options.headDim === 0 ? " (hidden / heads)" : ""} must be even for rotary embeddings`);
  }
  if (options.heads % options.kvHeads !== 0) {
    throw new TinyModelError(`${options.heads} attention heads are not a multiple of the ${options.kvHeads} key/value heads`);
  }
  if (!(options.ropeTheta > 0) || !Number.isFinite(options.ropeTheta)) throw new TinyModelError(`rope theta must be a positive number, got ${options.ropeTheta}`);
  if (!(MODEL_DTYPES as readonly string[]).includes(options.dtype)) throw new TinyModelError(`unknown dtype ${options.dtype}`);
  if (!(ROPE_SCALINGS as readonly string[]).includes(options.ropeScaling)) throw new TinyModelError(`unknown rope scaling ${options.ropeScaling}`);
  for (const spec of tinyModelTensorSpecs(options)) {
    const count = elementCount(spec.shape);
    if (count > MAX_TENSOR_ELEMENTS) throw new TinyModelError(`tensor ${spec.name} would hold ${count} values, over the limit of ${MAX_TENSOR_ELEMENTS}`);
  }
}

const SAFETENSORS_DTYPE: Record<ModelDtype, SafetensorsDtype> = { f32: "F32", f16: "F16", bf16: "BF16" };
const TORCH_DTYPE: Record<ModelDtype, string> = { f32: "float32", f16: "float16", bf16: "bfloat16" };

/** How a tensor's values are drawn: mean + std·N(0, 1). */
interface TensorInit {
  mean: number;
  std: number;
}

interface TinyTensorSpec extends TensorSpec {
  init: TensorInit;
}

/** The tensors, named and shaped as Hugging Face's Llama (and Qwen2) checkpoints. */
export function tinyModelTensorSpecs(options: TinyModelOptions): TinyTensorSpec[] {
  const dtype = SAFETENSORS_DTYPE[options.dtype];
  const { hidden, intermediate, vocab } = options;
  const queryWidth = options.heads * headDim(options);
  const keyValueWidth = options.kvHeads * headDim(options);
  const norm: TensorInit = { mean: 1, std: 0.1 };
  const bias: TensorInit = { mean: 0, std: 0.5 };
  const projection = (fanIn: number): TensorInit => ({ mean: 0, std: 1 / Math.sqrt(fanIn) });
  const queryKey: TensorInit = { mean: 0, std: options.attentionGain / Math.sqrt(hidden) };
  const specs: TinyTensorSpec[] = [];
  const add = (name: string, shape: number[], init: TensorInit) => specs.push({ name, dtype, shape, init });

  add("model.embed_tokens.weight", [vocab, hidden], projection(hidden));
  for (let layer = 0; layer < options.layers; layer++) {
    const prefix = `model.layers.${layer}`;
    add(`${prefix}.input_layernorm.weight`, [hidden], norm);
    add(`${prefix}.self_attn.q_proj.weight`, [queryWidth, hidden], queryKey);
    if (options.qkvBias) add(`${prefix}.self_attn.q_proj.bias`, [queryWidth], bias);
    add(`${prefix}.self_attn.k_proj.weight`, [keyValueWidth, hidden], queryKey);
    if (options.qkvBias) add(`${prefix}.self_attn.k_proj.bias`, [keyValueWidth], bias);
    if (options.qkNorm) {
      add(`${prefix}.self_attn.q_norm.weight`, [headDim(options)], norm);
      add(`${prefix}.self_attn.k_norm.weight`, [headDim(options)], norm);
    }
    add(`${prefix}.self_attn.v_proj.weight`, [keyValueWidth, hidden], projection(hidden));
    if (options.qkvBias) add(`${prefix}.self_attn.v_proj.bias`, [keyValueWidth], bias);
    add(`${prefix}.self_attn.o_proj.weight`, [hidden, queryWidth], projection(queryWidth));
    add(`${prefix}.post_attention_layernorm.weight`, [hidden], norm);
    add(`${prefix}.mlp.gate_proj.weight`, [intermediate, hidden], projection(hidden));
    add(`${prefix}.mlp.up_proj.weight`, [intermediate, hidden], projection(hidden));
    add(`${prefix}.mlp.down_proj.weight`, [hidden, intermediate], projection(intermediate));
  }
  add("model.norm.weight", [hidden], norm);
  if (!options.tieEmbeddings) add("lm_head.weight", [vocab, hidden], projection(hidden));
  return specs;
}

export function tinyModelParameterCount(options: TinyModelOptions): number {
  return tinyModelTensorSpecs(options).reduce((sum, spec) => sum + elementCount(spec.shape), 0);
}

/** A tensor's bytes: its own seeded stream, rounded to float32, then to the dtype. */
export function tinyModelTensorBytes(seed: number, spec: TinyTensorSpec): Uint8Array {
  const count = elementCount(spec.shape);
  const random = new NormalRandom(seed, spec.name);
  const { mean, std } = spec.init;
  if (spec.dtype === "F32") {
    const values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = mean + std * random.next();
    return littleEndianBytes(values);
  }
  const toBits = spec.dtype === "F16" ? float32ToFloat16Bits : float32ToBfloat16Bits;
  const values = new Uint16Array(count);
  for (let i = 0; i < count; i++) values[i] = toBits(mean + std * random.next());
  return littleEndianBytes(values);
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function littleEndianBytes(values: Float32Array | Uint16Array): Uint8Array {
  if (!LITTLE_ENDIAN) throw new Error("writing checkpoints needs a little-endian machine");
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

/** The command line that writes this model (defaults left out). */
export function tinyModelArgs(options: TinyModelOptions): string[] {
  const args = ["model", "tiny", "--seed", String(options.seed)];
  const flags: [keyof TinyModelOptions, string][] = [
    ["layers", "--layers"],
    ["hidden", "--hidden"],
    ["heads", "--heads"],
    ["kvHeads", "--kv-heads"],
    ["intermediate", "--intermediate"],
    ["vocab", "--vocab"],
    ["dtype", "--dtype"],
    ["maxPositions", "--max-positions"],
    ["ropeTheta", "--rope-theta"],
    ["ropeScaling", "--rope-scaling"],
    ["headDim", "--head-dim"],
    ["attentionGain", "--attention-gain"],
  ];
  for (const [key, flag] of flags) {
    if (options[key] !== TINY_MODEL_DEFAULTS[key]) args.push(flag, String(options[key]));
  }
  if (options.tieEmbeddings) args.push("--tie-embeddings");
  if (options.qkvBias) args.push("--qkv-bias");
  if (options.qkNorm) args.push("--qk-norm");
  return args;
}

/** config.json: a LlamaForCausalLM config (Qwen2ForCausalLM with --qkv-bias, Qwen3ForCausalLM with --qk-norm). */
export function tinyModelConfig(options: TinyModelOptions): Record<string, unknown> {
  const qwen = options.qkvBias;
  const qwen3 = options.qkNorm;
  const config: Record<string, unknown> = {
    architectures: [qwen ? "Qwen2ForCausalLM" : qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"],
    model_type: qwen ? "qwen2" : qwen3 ? "qwen3" : "llama",
    vocab_size: options.vocab,
    hidden_size: options.hidden,
    intermediate_size: options.intermediate,
    num_hidden_layers: options.layers,
    num_attention_heads: options.heads,
    num_key_value_heads: options.kvHeads,
    head_dim: headDim(options),
    hidden_act: "silu",
    max_position_embeddings: options.maxPositions,
    rms_norm_eps: RMS_NORM_EPS,
    rope_theta: options.ropeTheta,
    rope_scaling: options.ropeScaling === "llama3" ? { ...LLAMA3_ROPE_SCALING } : null,
    attention_dropout: 0,
    tie_word_embeddings: options.tieEmbeddings,
    torch_dtype: TORCH_DTYPE[options.dtype],
    bos_token_id: BOS_TOKEN_ID,
    eos_token_id: EOS_TOKEN_ID,
    pad_token_id: PAD_TOKEN_ID,
    use_cache: true,
  };
  if (qwen || qwen3) {
    Object.assign(config, { use_sliding_window: false, sliding_window: null, max_window_layers: options.layers });
    if (qwen3) config.attention_bias = false;
  } else {
    Object.assign(config, { attention_bias: false, mlp_bias: false, pretraining_tp: 1 });
  }
  config.ctxr = {
    generator: `ctxr ${tinyModelArgs(options).join(" ")}`,
    seed: options.seed,
    init: `one seeded normal stream per tensor (mean, std): embeddings and projections (0, 1/sqrt(fan_in)), embeddings' fan_in being hidden, norms (1, 0.1), q/k/v biases (0, 0.5)${options.qkNorm ? ", q/k norms (1, 0.1)" : ""}${options.attentionGain !== 1 ? `, q_proj and k_proj std times ${options.attentionGain}` : ""}`,
  };
  return config;
}

/** A file of the checkpoint: its name, size and bytes (produced on demand, in chunks). */
export interface ModelFile {
  name: string;
  bytes: number;
  chunks(): Iterable<Uint8Array>;
}

function jsonFile(name: string, value: unknown): ModelFile {
  const bytes = new TextEncoder().encode(JSON.stringify(value, null, 2) + "\n");
  return { name, bytes: bytes.length, chunks: () => [bytes] };
}

export function tinyModelLayout(options: TinyModelOptions): SafetensorsLayout {
  return safetensorsLayout(tinyModelTensorSpecs(options), { format: "pt" });
}

/** The checkpoint's files; model.safetensors is generated tensor by tensor as it is read. */
export function tinyModelFiles(options: TinyModelOptions): ModelFile[] {
  checkTinyModelOptions(options);
  const specs = new Map(tinyModelTensorSpecs(options).map((spec) => [spec.name, spec]));
  const layout = tinyModelLayout(options);
  const tensorData = (entry: TensorEntry) => tinyModelTensorBytes(options.seed, specs.get(entry.name)!);
  return [
    jsonFile("config.json", tinyModelConfig(options)),
    { name: "model.safetensors", bytes: layout.fileBytes, chunks: () => safetensorsChunks(layout, tensorData) },
    jsonFile("tokenizer.json", byteTokenizerJson()),
    jsonFile("tokenizer_config.json", byteTokenizerConfig(options.maxPositions)),
  ];
}
