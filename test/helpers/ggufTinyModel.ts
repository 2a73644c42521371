/**
 * A tiny model folder (config.json + model.safetensors) rewritten as a GGUF file the way
 * llama.cpp's converter writes it: llama.cpp tensor names and metadata keys, the rows of
 * attn_q / attn_k permuted per head so RoPE pairs are interleaved (llama only), norms in F32,
 * matrices in F32 or F16, llama3 rope scaling as rope_freqs.weight, no output.weight when tied.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ggufArray, ggufFloat32, type GgufMetadata, ggufString, ggufUint32 } from "../../src/model/gguf/ggufMetadata.ts";
import { GGML_TYPE } from "../../src/model/gguf/ggufTypes.ts";
import { encodeGguf, type GgufTensorToWrite } from "../../src/model/gguf/ggufWriter.ts";
import { float32ToFloat16Bits } from "../../src/model/halfFloats.ts";
import { readSafetensors, tensorToFloat32 } from "../../src/model/safetensors.ts";

export type TinyGgufType = "f32" | "f16";

interface TinyConfig {
  model_type?: string;
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta: number;
  tie_word_embeddings?: boolean;
  rope_scaling?: { rope_type?: string; factor: number; low_freq_factor: number; high_freq_factor: number; original_max_position_embeddings: number };
}

/** Hugging Face row of row r of a converted q/k projection: the inverse of the converter's permutation. */
export function hfRowOfGgufRow(r: number, headDim: number): number {
  const head = Math.floor(r / headDim), within = r % headDim;
  return head * headDim + (within % 2) * (headDim / 2) + Math.floor(within / 2);
}

/** llama3 rope scaling as llama.cpp stores it: per frequency, the divisor of the unscaled inverse frequency. */
function llama3FreqFactors(c: TinyConfig, headDim: number): Float32Array {
  const s = c.rope_scaling!;
  const factors = new Float32Array(headDim / 2);
  const lowWavelength = s.original_max_position_embeddings / s.low_freq_factor;
  const highWavelength = s.original_max_position_embeddings / s.high_freq_factor;
  for (let i = 0; i < headDim / 2; i++) {
    const freq = 1 / Math.pow(c.rope_theta, (2 * i) / headDim);
    const wavelength = (2 * Math.PI) / freq;
    let scaled = freq;
    if (wavelength > lowWavelength) scaled = freq / s.factor;
    else if (wavelength >= highWavelength) {
      const smooth = (s.original_max_position_embeddings / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      scaled = ((1 - smooth) * freq) / s.factor + smooth * freq;
    }
    factors[i] = freq / scaled;
  }
  return factors;
}

export function ggufFromModelFolder(folder: string, type: TinyGgufType): Uint8Array {
  const c = JSON.parse(readFileSync(join(folder, "config.json"), "utf8")) as TinyConfig;
  const st = readSafetensors(new Uint8Array(readFileSync(join(folder, "model.safetensors"))));
  const arch = c.model_type === "qwen2" ? "qwen2" : "llama";
  const headDim = c.hidden_size / c.num_attention_heads;
  const metadata: GgufMetadata = new Map([
    ["general.architecture", ggufString(arch)],
    [`${arch}.context_length`, ggufUint32(c.max_position_embeddings)],
    [`${arch}.embedding_length`, ggufUint32(c.hidden_size)],
    [`${arch}.block_count`, ggufUint32(c.num_hidden_layers)],
    [`${arch}.feed_forward_length`, ggufUint32(c.intermediate_size)],
    [`${arch}.attention.head_count`, ggufUint32(c.num_attention_heads)],
    [`${arch}.attention.head_count_kv`, ggufUint32(c.num_key_value_heads)],
    [`${arch}.attention.layer_norm_rms_epsilon`, ggufFloat32(c.rms_norm_eps)],
    [`${arch}.rope.freq_base`, ggufFloat32(c.rope_theta)],
    [`${arch}.rope.dimension_count`, ggufUint32(headDim)],
    ["tokenizer.ggml.tokens", ggufArray("string", Array.from({ length: c.vocab_size }, (_, i) => `t${i}`))],
  ]);
  const tensors: GgufTensorToWrite[] = [];
  const add = (ggufName: string, hfName: string, permuteHeads = false) => {
    const t = st.tensors.get(hfName);
    if (!t) throw new Error(`${folder}: no tensor ${hfName}`);
    const values = tensorToFloat32(t);
    const rows = t.shape.length === 2 ? t.shape[0]! : values.length;
    const cols = t.shape.length === 2 ? t.shape[1]! : 1;
    const ordered = new Float32Array(values.length);
    for (let r = 0; r < rows; r++) {
      const from = permuteHeads && arch === "llama" ? hfRowOfGgufRow(r, headDim) : r;
      ordered.set(values.subarray(from * cols, (from + 1) * cols), r * cols);
    }
    const matrix = t.shape.length === 2;
    const half = matrix && type === "f16";
    let bytes: Uint8Array;
    if (half) {
      const h = new Uint16Array(ordered.length);
      for (let i = 0; i < ordered.length; i++) h[i] = float32ToFloat16Bits(ordered[i]!);
      bytes = new Uint8Array(h.buffer);
    } else {
      bytes = new Uint8Array(ordered.buffer);
    }
    tensors.push({ name: ggufName, type: half ? GGML_TYPE.F16 : GGML_TYPE.F32, dims: matrix ? [cols, rows] : [rows], data: () => bytes });
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  if (st.tensors.has("lm_head.weight") && !c.tie_word_embeddings) add("output.weight", "lm_head.weight");
  add("output_norm.weight", "model.norm.weight");
  if (c.rope_scaling?.rope_type === "llama3") {
    const factors = llama3FreqFactors(c, headDim);
    tensors.push({ name: "rope_freqs.weight", type: GGML_TYPE.F32, dims: [factors.length], data: () => new Uint8Array(factors.buffer) });
  }
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`, g = `blk.${l}.`;
    add(`${g}attn_norm.weight`, `${p}input_layernorm.weight`);
    add(`${g}attn_q.weight`, `${p}self_attn.q_proj.weight`, true);
    add(`${g}attn_k.weight`, `${p}self_attn.k_proj.weight`, true);
    add(`${g}attn_v.weight`, `${p}self_attn.v_proj.weight`);
    if (st.tensors.has(`${p}self_attn.q_proj.bias`)) {
      add(`${g}attn_q.bias`, `${p}self_attn.q_proj.bias`, true);
      add(`${g}attn_k.bias`, `${p}self_attn.k_proj.bias`, true);
      add(`${g}attn_v.bias`, `${p}self_attn.v_proj.bias`);
    }
    add(`${g}attn_output.weight`, `${p}self_attn.o_proj.weight`);
    add(`${g}ffn_norm.weight`, `${p}post_attention_layernorm.weight`);
    add(`${g}ffn_gate.weight`, `${p}mlp.gate_proj.weight`);
    add(`${g}ffn_up.weight`, `${p}mlp.up_proj.weight`);
    add(`${g}ffn_down.weight`, `${p}mlp.down_proj.weight`);
  }
  return encodeGguf(metadata, tensors);
}
