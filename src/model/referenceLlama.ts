/**
 * A plain TypeScript Llama-family forward pass in float64: the slow, obviously
 * correct twin of the native runner (as every WASM kernel has a TS twin), used by
 * tests to check checkpoints and fixtures without Python or the runner.
 *
 * Hugging Face semantics: RMSNorm, rotary embeddings with rotate_half pairs (i, i +
 * head_dim/2), rope_theta and llama3/linear rope_scaling, grouped-query attention
 * (query head h reads key/value head h / (heads / kv_heads)) with a causal mask over
 * positions, SwiGLU MLP, optional projection biases, tied embeddings, and Qwen3's RMSNorm of
 * each q and k head (self_attn.q_norm / k_norm, one head_dim weight) before RoPE when the
 * checkpoint has those weights.
 */
import { type SafetensorsFile, tensorToFloat32 } from "./safetensors.ts";

export interface LlamaConfig {
  hidden: number;
  intermediate: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  layers: number;
  vocab: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: Record<string, unknown> | null;
  tieWordEmbeddings: boolean;
}

export class ModelConfigError extends Error {
  constructor(message: string) {
    super(`config.json: ${message}`);
    this.name = "ModelConfigError";
  }
}

function positiveInteger(json: Record<string, unknown>, key: string, fallback?: number): number {
  const value = json[key] ?? fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) throw new ModelConfigError(`${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

/** The fields of a Hugging Face config.json that the forward pass needs, checked. */
export function llamaConfigFromJson(json: Record<string, unknown>): LlamaConfig {
  const hidden = positiveInteger(json, "hidden_size");
  const heads = positiveInteger(json, "num_attention_heads");
  const kvHeads = positiveInteger(json, "num_key_value_heads", heads);
  const headDim = positiveInteger(json, "head_dim", Math.floor(hidden / heads));
  if (heads % kvHeads !== 0) throw new ModelConfigError(`num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`);
  if (headDim % 2 !== 0) throw new ModelConfigError(`head_dim ${headDim} must be even`);
  const act = json.hidden_act ?? "silu";
  if (act !== "silu") throw new ModelConfigError(`hidden_act ${JSON.stringify(act)} is not supported`);
  const ropeScaling = (json.rope_scaling ?? null) as Record<string, unknown> | null;
  return {
    hidden,
    intermediate: positiveInteger(json, "intermediate_size"),
    heads,
    kvHeads,
    headDim,
    layers: positiveInteger(json, "num_hidden_layers"),
    vocab: positiveInteger(json, "vocab_size"),
    rmsNormEps: typeof json.rms_norm_eps === "number" ? json.rms_norm_eps : 1e-6,
    ropeTheta: typeof json.rope_theta === "number" ? json.rope_theta : 10000,
    ropeScaling,
    tieWordEmbeddings: json.tie_word_embeddings === true,
  };
}

/** The rotary inverse frequencies, with rope_scaling applied. */
export function inverseFrequencies(config: LlamaConfig): Float64Array {
  const half = config.headDim / 2;
  const result = new Float64Array(half);
  for (let i = 0; i < half; i++) result[i] = 1 / config.ropeTheta ** ((2 * i) / config.headDim);
  const scaling = config.ropeScaling;
  const kind = scaling === null ? "default" : (scaling.rope_type ?? scaling.type ?? "default");
  if (kind === "default") return result;
  const factor = Number(scaling!.factor);
  if (kind === "linear") return result.map((f) => f / factor);
  if (kind !== "llama3") throw new ModelConfigError(`rope_scaling type ${JSON.stringify(kind)} is not supported`);
  const low = Number(scaling!.low_freq_factor);
  const high = Number(scaling!.high_freq_factor);
  const oldContext = Number(scaling!.original_max_position_embeddings);
  const lowFreqWavelength = oldContext / low;
  const highFreqWavelength = oldContext / high;
  return result.map((f) => {
    const wavelength = (2 * Math.PI) / f;
    if (wavelength < highFreqWavelength) return f;
    if (wavelength > lowFreqWavelength) return f / factor;
    const smooth = (oldContext / wavelength - low) / (high - low);
    return ((1 - smooth) * f) / factor + smooth * f;
  });
}

export interface ReferenceLlama {
  config: LlamaConfig;
  weight(name: string): Float64Array;
  has(name: string): boolean;
}

/** The model from a parsed config.json and safetensors file (weights widened to float64). */
export function referenceLlama(configJson: Record<string, unknown>, file: SafetensorsFile): ReferenceLlama {
  const config = llamaConfigFromJson(configJson);
  const cache = new Map<string, Float64Array>();
  const resolve = (name: string) => (name === "lm_head.weight" && (config.tieWordEmbeddings || !file.tensors.has(name)) ? "model.embed_tokens.weight" : name);
  return {
    config,
    has: (name) => file.tensors.has(resolve(name)),
    weight(name) {
      const key = resolve(name);
      let values = cache.get(key);
      if (!values) {
        const tensor = file.tensors.get(key);
        if (!tensor) throw new ModelConfigError(`the checkpoint has no tensor ${key}`);
        values = Float64Array.from(tensorToFloat32(tensor));
        cache.set(key, values);
      }
      return values;
    },
  };
}

/** y = W x (+ b) for W of shape [out, in] stored row-major. */
function linear(model: ReferenceLlama, name: string, x: Float64Array, outSize: number): Float64Array {
  const w = model.weight(`${name}.weight`);
  const inSize = x.length;
  const y = new Float64Array(outSize);
  for (let o = 0; o < outSize; o++) {
    let sum = 0;
    const row = o * inSize;
    for (let i = 0; i < inSize; i++) sum += w[row + i]! * x[i]!;
    y[o] = sum;
  }
  if (model.has(`${name}.bias`)) {
    const b = model.weight(`${name}.bias`);
    for (let o = 0; o < outSize; o++) y[o]! += b[o]!;
  }
  return y;
}

function rmsNorm(x: Float64Array, weight: Float64Array, eps: number): Float64Array {
  let squares = 0;
  for (const v of x) squares += v * v;
  const scale = 1 / Math.sqrt(squares / x.length + eps);
  return x.map((v, i) => v * scale * weight[i]!);
}

/** RMS-normalizes each head of `x` (heads × headDim, concatenated) in place with one headDim weight. */
function normalizeHeads(x: Float64Array, heads: number, headDim: number, weight: Float64Array, eps: number): void {
  for (let h = 0; h < heads; h++) x.set(rmsNorm(x.subarray(h * headDim, (h + 1) * headDim), weight, eps), h * headDim);
}

/** Rotates each head of `x` (heads × headDim, concatenated) in place at `position`. */
function rotate(x: Float64Array, heads: number, headDim: number, position: number, inverse: Float64Array): void {
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    const base = h * headDim;
    for (let i = 0; i < half; i++) {
      const angle = position * inverse[i]!;
      const cos = Math.cos(angle);
      const sin = Math.sin(angle);
      const a = x[base + i]!;
      const b = x[base + half + i]!;
      x[base + i] = a * cos - b * sin;
      x[base + half + i] = b * cos + a * sin;
    }
  }
}

/**
 * Logits (one Float64Array of vocab_size per token) for `ids` at `positions` (default 0..n-1).
 * With `attention`, it also gets, per layer, the head-averaged softmax weights as an n × n
 * row-major matrix (row t = token t's weights over the tokens; 0 where it does not attend): what
 * the runner's attention statistics report.
 */
export function referenceLogits(
  model: ReferenceLlama,
  ids: readonly number[],
  positions: readonly number[] = ids.map((_, i) => i),
  attention?: Float64Array[],
): Float64Array[] {
  const c = model.config;
  if (positions.length !== ids.length) throw new RangeError("one position per token");
  const embed = model.weight("model.embed_tokens.weight");
  const inverse = inverseFrequencies(c);
  const group = c.heads / c.kvHeads;
  const qWidth = c.heads * c.headDim;
  const kvWidth = c.kvHeads * c.headDim;
  let x = ids.map((id) => {
    if (!Number.isInteger(id) || id < 0 || id >= c.vocab) throw new RangeError(`token id ${id} is outside the vocab of ${c.vocab}`);
    return embed.slice(id * c.hidden, (id + 1) * c.hidden);
  });
  for (let layer = 0; layer < c.layers; layer++) {
    const p = `model.layers.${layer}`;
    const normed = x.map((row) => rmsNorm(row, model.weight(`${p}.input_layernorm.weight`), c.rmsNormEps));
    const qNorm = model.has(`${p}.self_attn.q_norm.weight`) ? model.weight(`${p}.self_attn.q_norm.weight`) : null;
    const kNorm = model.has(`${p}.self_attn.k_norm.weight`) ? model.weight(`${p}.self_attn.k_norm.weight`) : null;
    const q = normed.map((row, t) => {
      const v = linear(model, `${p}.self_attn.q_proj`, row, qWidth);
      if (qNorm) normalizeHeads(v, c.heads, c.headDim, qNorm, c.rmsNormEps);
      rotate(v, c.heads, c.headDim, positions[t]!, inverse);
      return v;
    });
    const k = normed.map((row, t) => {
      const v = linear(model, `${p}.self_attn.k_proj`, row, kvWidth);
      if (kNorm) normalizeHeads(v, c.kvHeads, c.headDim, kNorm, c.rmsNormEps);
      rotate(v, c.kvHeads, c.headDim, positions[t]!, inverse);
      return v;
    });
    const v = normed.map((row) => linear(model, `${p}.self_attn.v_proj`, row, kvWidth));
    const scale = 1 / Math.sqrt(c.headDim);
    const averaged = attention === undefined ? null : new Float64Array(ids.length * ids.length);
    attention?.push(averaged!);
    x = x.map((row, t) => {
      const out = new Float64Array(qWidth);
      for (let h = 0; h < c.heads; h++) {
        const kvBase = Math.floor(h / group) * c.headDim;
        const scores: number[] = [];
        const visible: number[] = [];
        for (let s = 0; s < ids.length; s++) {
          if (positions[s]! > positions[t]!) continue;
          let dot = 0;
          for (let d = 0; d < c.headDim; d++) dot += q[t]![h * c.headDim + d]! * k[s]![kvBase + d]!;
          scores.push(dot * scale);
          visible.push(s);
        }
        const max = Math.max(...scores);
        const weights = scores.map((score) => Math.exp(score - max));
        const total = weights.reduce((a, b) => a + b, 0);
        visible.forEach((s, j) => {
          for (let d = 0; d < c.headDim; d++) out[h * c.headDim + d]! += (weights[j]! / total) * v[s]![kvBase + d]!;
          if (averaged !== null) averaged[t * ids.length + s]! += weights[j]! / total / c.heads;
        });
      }
      const attended = linear(model, `${p}.self_attn.o_proj`, out, c.hidden);
      return row.map((value, i) => value + attended[i]!);
    });
    x = x.map((row) => {
      const h = rmsNorm(row, model.weight(`${p}.post_attention_layernorm.weight`), c.rmsNormEps);
      const gate = linear(model, `${p}.mlp.gate_proj`, h, c.intermediate);
      const up = linear(model, `${p}.mlp.up_proj`, h, c.intermediate);
      const mixed = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
      const down = linear(model, `${p}.mlp.down_proj`, mixed, c.hidden);
      return row.map((value, i) => value + down[i]!);
    });
  }
  return x.map((row) => linear(model, "lm_head", rmsNorm(row, model.weight("model.norm.weight"), c.rmsNormEps), c.vocab));
}
