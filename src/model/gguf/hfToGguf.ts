/**
 * A Hugging Face Llama / Mistral / Qwen2 / Qwen3 / Phi-3 checkpoint in llama.cpp's GGUF conventions:
 * the architecture's metadata keys from config.json, the tensor names, and the q/k
 * row permutation. Pure: config in, metadata and a tensor plan out.
 *
 * Names: model.embed_tokens → token_embd, layers.N.input_layernorm → blk.N.attn_norm,
 * self_attn.{q,k,v,o}_proj → attn_{q,k,v,output}, post_attention_layernorm → ffn_norm,
 * mlp.{gate,up,down}_proj → ffn_{gate,up,down}, self_attn.{q,k}_norm → attn_{q,k}_norm
 * (Qwen3's per-head norms), model.norm → output_norm, lm_head → output (absent when
 * embeddings are tied). A [rows, columns] weight has GGUF dims
 * [ne0 = columns, ne1 = rows], the same bytes.
 *
 * Permutation (llama only; qwen2 and qwen3 are written as is): Hugging Face rotates the pairs
 * (i, i + d/2) of each head of d rows; llama.cpp's llama rotates adjacent pairs (2i,
 * 2i + 1). Its converter reorders the rows of q_proj (per attention head) and k_proj
 * (per key/value head) so that within each head, new row 2i + h = old row h·d/2 + i
 * for h in {0, 1}, i in 0..d/2−1 (reshape to [heads, 2, d/2, ...], swap the middle two
 * axes). Biases of q and k, where present, are reordered the same way.
 *
 * Llama 3 rope scaling becomes a `rope_freqs.weight` F32 tensor of d/2 frequency
 * divisors (llama.cpp's converter: 1 for wavelengths under original_context /
 * high_freq_factor, `factor` over original_context / low_freq_factor, and in between
 * 1 / ((1 − s) / factor + s) with s = (original_context / wavelength − low) / (high −
 * low)); linear and yarn scaling become `rope.scaling.*` keys.
 *
 * Phi-3 (llama.cpp's conversion/phi.py, Phi3MiniModel): self_attn.qkv_proj → attn_qkv and
 * mlp.gate_up_proj → ffn_up as they are (fused, no permutation: phi3 rotates NEOX-style);
 * rope.dimension_count = ⌊partial_rotary_factor · hidden⌋ / heads; attention.sliding_window
 * (0 when absent); rope.scaling.original_context_length; LongRoPE ("longrope" or "su") becomes
 * rope_factors_long.weight / rope_factors_short.weight F32 tensors and rope.scaling.attn_factor
 * = sqrt(1 + ln(s) / ln(original)) for s = max_position_embeddings / original > 1, else 1.
 */
import { type GgufMetadata, ggufFloat32, ggufString, ggufUint32 } from "./ggufMetadata.ts";

export class ModelConversionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelConversionError";
  }
}

export type GgufArchitecture = "llama" | "qwen2" | "qwen3" | "phi3";

export interface HfModelShape {
  architecture: GgufArchitecture;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  layers: number;
  tied: boolean;
}

function integer(config: Record<string, unknown>, key: string, fallback?: number): number {
  const value = config[key] ?? fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) throw new ModelConversionError(`config.json: ${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

function number(config: Record<string, unknown>, key: string, fallback: number): number {
  const value = config[key] ?? fallback;
  if (typeof value !== "number" || !Number.isFinite(value)) throw new ModelConversionError(`config.json: ${key} must be a number, got ${JSON.stringify(value)}`);
  return value;
}

export function hfArchitecture(config: Record<string, unknown>): GgufArchitecture {
  const names = Array.isArray(config.architectures) ? config.architectures : [];
  const name = String(names[0] ?? config.model_type ?? "");
  if (/^(Llama|Mistral)ForCausalLM$/.test(name) || config.model_type === "llama" || config.model_type === "mistral") return "llama";
  if (name === "Qwen2ForCausalLM" || config.model_type === "qwen2") return "qwen2";
  if (name === "Qwen3ForCausalLM" || config.model_type === "qwen3") return "qwen3";
  if (name === "Phi3ForCausalLM" || config.model_type === "phi3") return "phi3";
  throw new ModelConversionError(`config.json: architecture ${JSON.stringify(name)} is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM)`);
}

export function hfModelShape(config: Record<string, unknown>): HfModelShape {
  const hidden = integer(config, "hidden_size");
  const heads = integer(config, "num_attention_heads");
  return {
    architecture: hfArchitecture(config),
    hidden,
    heads,
    kvHeads: integer(config, "num_key_value_heads", heads),
    headDim: integer(config, "head_dim", Math.floor(hidden / heads)),
    layers: integer(config, "num_hidden_layers"),
    tied: config.tie_word_embeddings === true,
  };
}

/** The `general.*` and `{arch}.*` keys (general.file_type is the caller's). */
export function hfModelMetadata(config: Record<string, unknown>, name: string): GgufMetadata {
  const shape = hfModelShape(config);
  const arch = shape.architecture;
  const metadata: GgufMetadata = new Map();
  metadata.set("general.architecture", ggufString(arch));
  metadata.set("general.name", ggufString(name));
  const set = (key: string, value: ReturnType<typeof ggufUint32>) => metadata.set(`${arch}.${key}`, value);
  set("vocab_size", ggufUint32(integer(config, "vocab_size")));
  set("context_length", ggufUint32(integer(config, "max_position_embeddings", 2048)));
  set("embedding_length", ggufUint32(shape.hidden));
  set("block_count", ggufUint32(shape.layers));
  set("feed_forward_length", ggufUint32(integer(config, "intermediate_size")));
  set("attention.head_count", ggufUint32(shape.heads));
  set("attention.head_count_kv", ggufUint32(shape.kvHeads));
  if (shape.headDim * shape.heads !== shape.hidden) {
    set("attention.key_length", ggufUint32(shape.headDim));
    set("attention.value_length", ggufUint32(shape.headDim));
  }
  set("attention.layer_norm_rms_epsilon", ggufFloat32(number(config, "rms_norm_eps", 1e-6)));
  set("rope.freq_base", ggufFloat32(number(config, "rope_theta", 10000)));
  if (arch === "phi3") {
    setPhi3Metadata(config, shape, (key, value) => metadata.set(`${arch}.${key}`, value));
    return metadata;
  }
  set("rope.dimension_count", ggufUint32(shape.headDim));
  const scaling = config.rope_scaling as Record<string, unknown> | null | undefined;
  if (scaling) {
    const kind = scaling.rope_type ?? scaling.type;
    if (kind === "linear" || kind === "yarn") {
      set("rope.scaling.type", ggufString(kind));
      set("rope.scaling.factor", ggufFloat32(Number(scaling.factor)));
      if (kind === "yarn" && typeof scaling.original_max_position_embeddings === "number") {
        set("rope.scaling.original_context_length", ggufUint32(scaling.original_max_position_embeddings));
      }
    } else if (kind !== "llama3" && kind !== "default") {
      throw new ModelConversionError(`config.json: rope_scaling type ${JSON.stringify(kind)} is not supported (linear, yarn, llama3)`);
    }
  }
  return metadata;
}

/** Rotated dimensions of a Phi-3 head: ⌊partial_rotary_factor · hidden⌋ / heads, as llama.cpp's converter. */
function phi3RopeDimensions(config: Record<string, unknown>, shape: HfModelShape): number {
  const partial = number(config, "partial_rotary_factor", 1);
  const dims = Math.floor(Math.floor(partial * shape.hidden) / shape.heads);
  if (!(partial > 0 && partial <= 1) || dims < 2 || dims % 2 !== 0 || dims > shape.headDim) {
    throw new ModelConversionError(`config.json: partial_rotary_factor ${partial} gives ${dims} rotary dimensions (need an even number up to head_dim ${shape.headDim})`);
  }
  return dims;
}

interface LongRope {
  original: number;
  long: Float32Array;
  short: Float32Array;
  attentionFactor: number;
}

/** Phi-3's LongRoPE scaling of config.json, checked; null without rope_scaling. */
function phi3LongRope(config: Record<string, unknown>): LongRope | null {
  const scaling = config.rope_scaling as Record<string, unknown> | null | undefined;
  if (!scaling) return null;
  const kind = scaling.rope_type ?? scaling.type;
  if (kind !== "longrope" && kind !== "su") throw new ModelConversionError(`config.json: rope_scaling type ${JSON.stringify(kind)} is not supported for Phi3ForCausalLM (longrope, su)`);
  const shape = hfModelShape(config);
  const half = phi3RopeDimensions(config, shape) / 2;
  const factors = (key: string): Float32Array => {
    const value = scaling[key];
    if (!Array.isArray(value) || value.length !== half || !value.every((x) => typeof x === "number" && x > 0)) {
      throw new ModelConversionError(`config.json: rope_scaling.${key} must be ${half} positive numbers (rotary dimensions / 2)`);
    }
    return Float32Array.from(value as number[]);
  };
  const original = integer({ original: scaling.original_max_position_embeddings ?? config.original_max_position_embeddings }, "original");
  const scale = integer(config, "max_position_embeddings", 2048) / original;
  const given = scaling.attention_factor;
  const attentionFactor = typeof given === "number" ? given : scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(original)) : 1;
  return { original, long: factors("long_factor"), short: factors("short_factor"), attentionFactor };
}

function setPhi3Metadata(config: Record<string, unknown>, shape: HfModelShape, set: (key: string, value: ReturnType<typeof ggufUint32>) => void): void {
  set("rope.dimension_count", ggufUint32(phi3RopeDimensions(config, shape)));
  set("attention.sliding_window", ggufUint32(typeof config.sliding_window === "number" ? config.sliding_window : 0));
  const longRope = phi3LongRope(config);
  const original = longRope?.original ?? (typeof config.original_max_position_embeddings === "number" ? config.original_max_position_embeddings : undefined);
  if (original !== undefined) set("rope.scaling.original_context_length", ggufUint32(original));
  if (longRope) set("rope.scaling.attn_factor", ggufFloat32(longRope.attentionFactor));
}

/** F32 tensors a converted checkpoint adds: Llama 3's rope_freqs, Phi-3's LongRoPE factors. */
export function hfRopeFactorTensors(config: Record<string, unknown>): { name: string; values: Float32Array }[] {
  if (hfArchitecture(config) === "phi3") {
    const longRope = phi3LongRope(config);
    return longRope ? [{ name: "rope_factors_long.weight", values: longRope.long }, { name: "rope_factors_short.weight", values: longRope.short }] : [];
  }
  const llama3 = llama3RopeFactors(config);
  return llama3 ? [{ name: "rope_freqs.weight", values: llama3 }] : [];
}

/** Llama 3's per-dimension rope frequency divisors, or null without llama3 scaling. */
export function llama3RopeFactors(config: Record<string, unknown>): Float32Array | null {
  const scaling = config.rope_scaling as Record<string, unknown> | null | undefined;
  if (!scaling || (scaling.rope_type ?? scaling.type) !== "llama3") return null;
  const { headDim } = hfModelShape(config);
  const base = number(config, "rope_theta", 10000);
  const factor = Number(scaling.factor ?? 8);
  const low = Number(scaling.low_freq_factor ?? 1);
  const high = Number(scaling.high_freq_factor ?? 4);
  const oldContext = Number(scaling.original_max_position_embeddings ?? 8192);
  const lowWavelength = oldContext / low;
  const highWavelength = oldContext / high;
  const factors = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const frequency = 1 / base ** ((2 * i) / headDim);
    const wavelength = (2 * Math.PI) / frequency;
    if (wavelength < highWavelength) factors[i] = 1;
    else if (wavelength > lowWavelength) factors[i] = factor;
    else {
      const smooth = (oldContext / wavelength - low) / (high - low);
      factors[i] = 1 / ((1 - smooth) / factor + smooth);
    }
  }
  return factors;
}

export interface TensorMapping {
  ggufName: string;
  /** Heads to permute the rows over (llama q/k), or 0. */
  permuteHeads: number;
}

const LAYER_NAMES: Record<string, string> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.q_proj.bias": "attn_q.bias",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.k_proj.bias": "attn_k.bias",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.v_proj.bias": "attn_v.bias",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
  "post_attention_layernorm.weight": "ffn_norm.weight",
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight",
};

/** Phi-3's fused projections (llama.cpp keeps them fused: q|k|v rows, gate|up rows). */
const PHI3_LAYER_NAMES: Record<string, string> = {
  "self_attn.qkv_proj.weight": "attn_qkv.weight",
  "mlp.gate_up_proj.weight": "ffn_up.weight",
};

/** The GGUF name of a checkpoint tensor, or null for tensors llama.cpp does not keep (rotary inv_freq). */
export function hfTensorMapping(name: string, shape: HfModelShape): TensorMapping | null {
  if (name.endsWith("rotary_emb.inv_freq")) return null;
  if (name === "model.embed_tokens.weight") return { ggufName: "token_embd.weight", permuteHeads: 0 };
  if (name === "model.norm.weight") return { ggufName: "output_norm.weight", permuteHeads: 0 };
  if (name === "lm_head.weight") return shape.tied ? null : { ggufName: "output.weight", permuteHeads: 0 };
  const layer = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
  const suffix = layer ? (shape.architecture === "phi3" ? (PHI3_LAYER_NAMES[layer[2]!] ?? LAYER_NAMES[layer[2]!]) : LAYER_NAMES[layer[2]!]) : undefined;
  if (!layer || !suffix || Number(layer[1]) >= shape.layers) throw new ModelConversionError(`tensor ${name} has no GGUF name for ${shape.architecture}`);
  let permuteHeads = 0;
  if (shape.architecture === "llama" && suffix.startsWith("attn_q.")) permuteHeads = shape.heads;
  if (shape.architecture === "llama" && suffix.startsWith("attn_k.")) permuteHeads = shape.kvHeads;
  return { ggufName: `blk.${layer[1]}.${suffix}`, permuteHeads };
}

/**
 * Reorders the rows of a [rows, columns] matrix (or a vector: columns 1) per head:
 * new row 2i + h of a head = old row h·d/2 + i (d = rows / heads). `inverse` undoes it.
 */
export function permuteQueryKeyRows(values: Float32Array, rows: number, heads: number, inverse = false): Float32Array {
  const columns = values.length / rows;
  const d = rows / heads;
  if (!Number.isInteger(columns) || !Number.isInteger(d) || d % 2 !== 0) throw new ModelConversionError(`cannot permute ${rows} rows over ${heads} heads`);
  const out = new Float32Array(values.length);
  for (let head = 0; head < heads; head++) {
    for (let h = 0; h < 2; h++) {
      for (let i = 0; i < d / 2; i++) {
        const newRow = head * d + 2 * i + h;
        const oldRow = head * d + h * (d / 2) + i;
        const [to, from] = inverse ? [oldRow, newRow] : [newRow, oldRow];
        out.set(values.subarray(from * columns, (from + 1) * columns), to * columns);
      }
    }
  }
  return out;
}
