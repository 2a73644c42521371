/**
 * Which ggml type each tensor gets for a `--type` of `ctxr model quantize`, after
 * llama.cpp's defaults where they are simple:
 *
 *   type  general.file_type            2-D weights   output.weight (token_embd.weight when tied)
 *   f32   0  ALL_F32                   F32           F32
 *   f16   1  MOSTLY_F16                F16           F16
 *   bf16  32 MOSTLY_BF16               BF16          BF16
 *   q8_0  7  MOSTLY_Q8_0               Q8_0          Q8_0
 *   q4_0  2  MOSTLY_Q4_0               Q4_0          Q6_K
 *   q4_k  14 MOSTLY_Q4_K_S             Q4_K          Q6_K
 *   q4_k_m 15 MOSTLY_Q4_K_M            Q4_K, some    Q6_K
 *                                      attn_v/ffn_down Q6_K
 *   q6_k  18 MOSTLY_Q6_K               Q6_K          Q6_K
 *
 * q4_k_m follows llama.cpp's Q4_K_M: attn_v (Phi-3's fused attn_qkv counts as attn_v, as
 * llama-quant.cpp's category_is_attn_v has it) and ffn_down of layer i (of n) are Q6_K when
 * i < n/8, i ≥ 7n/8, or (i − n/8) mod 3 = 2 (integer n/8), Q4_K otherwise.
 *
 * 1-D tensors (norms, biases, rope_freqs) stay F32. A row length (ne[0]) that is not a
 * whole number of blocks falls back: K-quants to Q8_0 (llama.cpp picks Q5_0 for Q4_K,
 * which we do not write), then anything to F16. (llama.cpp's Q4_K_S also bumps a few
 * layers' attn_v and ffn_down to Q5_K; we keep them Q4_K.)
 */
import { GGML_TYPE, type GgmlType, ggmlTypeInfo } from "./ggufTypes.ts";

export const QUANTIZE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q4_k_m", "q6_k"] as const;
export type QuantizeType = (typeof QUANTIZE_TYPES)[number];

interface FilePlan {
  fileType: number;
  weights: GgmlType;
  output: GgmlType;
}

export const QUANTIZE_PLANS: Readonly<Record<QuantizeType, FilePlan>> = {
  f32: { fileType: 0, weights: GGML_TYPE.F32, output: GGML_TYPE.F32 },
  f16: { fileType: 1, weights: GGML_TYPE.F16, output: GGML_TYPE.F16 },
  bf16: { fileType: 32, weights: GGML_TYPE.BF16, output: GGML_TYPE.BF16 },
  q8_0: { fileType: 7, weights: GGML_TYPE.Q8_0, output: GGML_TYPE.Q8_0 },
  q4_0: { fileType: 2, weights: GGML_TYPE.Q4_0, output: GGML_TYPE.Q6_K },
  q4_k: { fileType: 14, weights: GGML_TYPE.Q4_K, output: GGML_TYPE.Q6_K },
  q4_k_m: { fileType: 15, weights: GGML_TYPE.Q4_K, output: GGML_TYPE.Q6_K },
  q6_k: { fileType: 18, weights: GGML_TYPE.Q6_K, output: GGML_TYPE.Q6_K },
};

/** llama.cpp's choice of the layers that get more bits in its _M file types. */
export function useMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.floor(layers / 8);
  return layer < eighth || layer >= Math.floor((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

/**
 * The type of a tensor named `name` (GGUF names) of dims `dims`; `tied`: no output.weight;
 * `layers`: the model's block count.
 */
export function tensorTypeFor(plan: QuantizeType, name: string, dims: readonly number[], tied: boolean, layers = 0): GgmlType {
  if (dims.length < 2) return GGML_TYPE.F32;
  const isOutput = name === "output.weight" || (tied && name === "token_embd.weight");
  let wanted = isOutput ? QUANTIZE_PLANS[plan].output : QUANTIZE_PLANS[plan].weights;
  const layer = /^blk\.(\d+)\.(attn_v|attn_qkv|ffn_down)\.weight$/.exec(name);
  if (plan === "q4_k_m" && layer && useMoreBits(Number(layer[1]), layers)) wanted = GGML_TYPE.Q6_K;
  const fits = (type: GgmlType) => dims[0]! % ggmlTypeInfo(type).blockSize === 0;
  if (fits(wanted)) return wanted;
  if ((wanted === GGML_TYPE.Q4_K || wanted === GGML_TYPE.Q6_K) && fits(GGML_TYPE.Q8_0)) return GGML_TYPE.Q8_0;
  return GGML_TYPE.F16;
}
