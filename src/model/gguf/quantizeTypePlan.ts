/**
 * Which ggml type each tensor gets for a `--type` of `ctxr model quantize`, by llama.cpp's
 * rules (llama_tensor_get_type in src/llama-quant.cpp), so that a file we write and the one
 * llama-quantize writes at the same file type agree tensor for tensor:
 *
 *   type    general.file_type   weights  output.weight (token_embd when tied)
 *   f32     0  ALL_F32          F32      F32
 *   f16     1  MOSTLY_F16       F16      F16
 *   bf16    32 MOSTLY_BF16      BF16     BF16
 *   q8_0    7  MOSTLY_Q8_0      Q8_0     Q8_0
 *   q4_0    2  MOSTLY_Q4_0      Q4_0     Q6_K
 *   q4_k_s  14 MOSTLY_Q4_K_S    Q4_K     Q6_K   attn_v of layers 0-3 and ffn_down of the first eighth Q5_K
 *   q4_k_m  15 MOSTLY_Q4_K_M    Q4_K     Q6_K   attn_v and ffn_down of the useMoreBits layers Q6_K
 *   q5_k_s  16 MOSTLY_Q5_K_S    Q5_K     Q6_K
 *   q5_k_m  17 MOSTLY_Q5_K_M    Q5_K     Q6_K   attn_v and ffn_down of the useMoreBits layers Q6_K
 *   q6_k    18 MOSTLY_Q6_K      Q6_K     Q6_K
 *   q4_k    14 MOSTLY_Q4_K_S    Q4_K     Q6_K   ctxr's own: no per-layer rules, short rows Q8_0
 *
 * Also as llama.cpp: a row length (ne[0]) that is not whole blocks falls back (Q4_K → Q5_0,
 * Q5_K → Q5_1, Q6_K → Q8_0, a 32-block type stays), then to F16; an output row that is not
 * whole blocks of the file's type is Q8_0; "attention v" counts fused attn_qkv and MLA's
 * attn_kv_b; 8-expert models (Mixtral) get Q8_0 attn_v/attn_k (and Q5_K attn_output at
 * Q4_K_*); 70B-class models (80-layer llama with GQA, 80-layer qwen2) Q5_K attn_v where it
 * would be Q4_K; falcon keeps its own output and Q4_K_M ffn_down rules. Tensors llama.cpp
 * does not quantize (quantizeTensorCategory.ts) keep their type (F32 from a folder).
 *
 * The per-layer rules count positions the way llama.cpp does: attn_v-like tensors by their
 * running index among all of them (in llama.cpp's tensor order: by layer, then name) out of
 * how many there are; ffn_down by its running index out of the block count (by the layer in
 * its name for mixture-of-experts models). planTensorTypes does that counting.
 */
import { GGML_TYPE, type GgmlType, ggmlTypeInfo } from "./ggufTypes.ts";
import { allowsQuantization, isAttentionValueLike, tensorCategory, tensorLayer } from "./quantizeTensorCategory.ts";

export const QUANTIZE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"] as const;
export type QuantizeType = (typeof QUANTIZE_TYPES)[number];

interface FilePlan {
  /** general.file_type (llama_ftype). */
  fileType: number;
  /** The type of a weight no rule moves. */
  weights: GgmlType;
}

export const QUANTIZE_PLANS: Readonly<Record<QuantizeType, FilePlan>> = {
  f32: { fileType: 0, weights: GGML_TYPE.F32 },
  f16: { fileType: 1, weights: GGML_TYPE.F16 },
  bf16: { fileType: 32, weights: GGML_TYPE.BF16 },
  q8_0: { fileType: 7, weights: GGML_TYPE.Q8_0 },
  q4_0: { fileType: 2, weights: GGML_TYPE.Q4_0 },
  q4_k: { fileType: 14, weights: GGML_TYPE.Q4_K },
  q4_k_s: { fileType: 14, weights: GGML_TYPE.Q4_K },
  q4_k_m: { fileType: 15, weights: GGML_TYPE.Q4_K },
  q5_k_s: { fileType: 16, weights: GGML_TYPE.Q5_K },
  q5_k_m: { fileType: 17, weights: GGML_TYPE.Q5_K },
  q6_k: { fileType: 18, weights: GGML_TYPE.Q6_K },
};

/** What the rules need of the model as a whole. */
export interface ModelFactsForPlan {
  /** general.architecture. */
  architecture: string;
  /** Block count (llama.cpp's n_layer). */
  layers: number;
  heads: number;
  kvHeads: number;
  /** Experts per MoE layer; 0 for dense models. */
  experts: number;
  /** No output.weight: token_embd.weight is also the output. */
  tied: boolean;
}

/** Where a tensor stands among its kind, as llama.cpp counts (see planTensorTypes). */
export interface TensorPosition {
  /** Index of this attn_v-like tensor among all of them, and how many there are. */
  attentionValue?: { index: number; count: number };
  /** The ffn_down's layer position (index, out of the block count). */
  ffnDown?: { index: number; count: number };
}

/** llama.cpp's choice of the layers that get more bits in its _M file types. */
export function useMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.trunc(layers / 8);
  return layer < eighth || layer >= Math.trunc((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

const fits = (type: GgmlType, rowLength: number) => rowLength % ggmlTypeInfo(type).blockSize === 0;

/** llama.cpp's model-size class "70B" (the only GQA-dependent rule of the K_S/K_M types). */
function isSeventyBClass(model: ModelFactsForPlan): boolean {
  if (model.layers !== 80) return false;
  if (model.architecture === "llama") return model.heads !== model.kvHeads;
  return ["qwen2", "olmo", "deci"].includes(model.architecture);
}

function isQuantized(type: GgmlType): boolean {
  return ggmlTypeInfo(type).blockSize > 1;
}

/** A type for rows of `rowLength` values: the wanted one, its fallback, or F16. */
function fallbackFor(plan: QuantizeType, wanted: GgmlType, rowLength: number): GgmlType {
  if (fits(wanted, rowLength)) return wanted;
  const fallbacks: Partial<Record<GgmlType, GgmlType>> =
    plan === "q4_k" ? { [GGML_TYPE.Q4_K]: GGML_TYPE.Q8_0, [GGML_TYPE.Q6_K]: GGML_TYPE.Q8_0 } : { [GGML_TYPE.Q4_K]: GGML_TYPE.Q5_0, [GGML_TYPE.Q5_K]: GGML_TYPE.Q5_1, [GGML_TYPE.Q6_K]: GGML_TYPE.Q8_0 };
  const fallback = fallbacks[wanted] ?? wanted;
  return fits(fallback, rowLength) ? fallback : GGML_TYPE.F16;
}

/** The mix rules of llama_tensor_get_type_impl for the file types above, before fallbacks. */
function mixedType(plan: QuantizeType, name: string, dims: readonly number[], model: ModelFactsForPlan, position: TensorPosition): GgmlType {
  const base = QUANTIZE_PLANS[plan].weights;
  const category = tensorCategory(name);
  if (category === "output" || (model.tied && category === "token_embd")) {
    if (model.architecture === "falcon" || !fits(base, dims[0]!)) return GGML_TYPE.Q8_0;
    return base === GGML_TYPE.Q8_0 ? base : GGML_TYPE.Q6_K;
  }
  if (plan === "q4_k") return base;
  const eightExperts = model.experts === 8;
  const kM = plan === "q4_k_m" || plan === "q5_k_m";
  if (isAttentionValueLike(category)) {
    const { index, count } = position.attentionValue ?? { index: 0, count: 0 };
    let type = base;
    if (kM && useMoreBits(index, count)) type = GGML_TYPE.Q6_K;
    else if (plan === "q4_k_s" && index < 4) type = GGML_TYPE.Q5_K;
    if (isSeventyBClass(model) && type === GGML_TYPE.Q4_K) type = GGML_TYPE.Q5_K;
    return eightExperts ? GGML_TYPE.Q8_0 : type;
  }
  if (category === "attn_k") return eightExperts ? GGML_TYPE.Q8_0 : base;
  if (category === "ffn_down") {
    const { index, count } = position.ffnDown ?? { index: 0, count: 0 };
    if (plan === "q4_k_m" && model.architecture === "falcon") {
      return index < Math.trunc(count / 16) ? GGML_TYPE.Q6_K : useMoreBits(index, count) ? GGML_TYPE.Q5_K : GGML_TYPE.Q4_K;
    }
    if (kM && useMoreBits(index, count)) return GGML_TYPE.Q6_K;
    if (plan === "q4_k_s" && model.architecture !== "falcon" && index < Math.trunc(count / 8)) return GGML_TYPE.Q5_K;
    return base;
  }
  if (category === "attn_output" && eightExperts && model.architecture !== "falcon" && (plan === "q4_k_s" || plan === "q4_k_m")) return GGML_TYPE.Q5_K;
  return base;
}

/**
 * The type of one tensor (GGUF name, dims ne[0..]) that llama.cpp quantizes; F32 for one it
 * does not (a caller copying a GGUF file keeps such a tensor's type instead).
 */
export function tensorTypeFor(plan: QuantizeType, name: string, dims: readonly number[], model: ModelFactsForPlan, position: TensorPosition = {}): GgmlType {
  if (!allowsQuantization(name, dims)) return GGML_TYPE.F32;
  const base = QUANTIZE_PLANS[plan].weights;
  if (!isQuantized(base)) return base;
  return fallbackFor(plan, mixedType(plan, name, dims, model, position), dims[0]!);
}

/** llama.cpp's tensor order: by the layer in the name (others first), then by name. */
function llamaCppOrder(a: string, b: string): number {
  const layerA = tensorLayer(a);
  const layerB = tensorLayer(b);
  if (layerA !== layerB) return layerA - layerB;
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The types of all of a model's tensors (in the order given), counting attn_v-like and
 * ffn_down positions as llama.cpp does; `null` for a tensor llama.cpp does not quantize.
 */
export function planTensorTypes(plan: QuantizeType, tensors: readonly { name: string; dims: readonly number[] }[], model: ModelFactsForPlan): (GgmlType | null)[] {
  const order = tensors.map((_, i) => i).sort((a, b) => llamaCppOrder(tensors[a]!.name, tensors[b]!.name));
  const attentionValueCount = tensors.filter((t) => isAttentionValueLike(tensorCategory(t.name))).length;
  const types: (GgmlType | null)[] = new Array(tensors.length).fill(null);
  let attentionValueIndex = 0;
  let ffnDownIndex = 0;
  for (const i of order) {
    const { name, dims } = tensors[i]!;
    if (!allowsQuantization(name, dims)) continue;
    const category = tensorCategory(name);
    const position: TensorPosition = {};
    const counted = category !== "output" && !(model.tied && category === "token_embd");
    if (counted && isAttentionValueLike(category)) position.attentionValue = { index: attentionValueIndex++, count: attentionValueCount };
    if (counted && category === "ffn_down") {
      position.ffnDown = { index: model.experts > 1 ? tensorLayer(name) : ffnDownIndex, count: model.layers };
      ffnDownIndex++;
    }
    types[i] = tensorTypeFor(plan, name, dims, model, position);
  }
  return types;
}
