/**
 * What llama.cpp's quantizer (src/llama-quant.cpp) needs to know of a tensor from its GGUF
 * name and dims alone: whether it is quantized at all, and the broad role its type rules
 * key on. Pure.
 *
 *   allowsQuantization("blk.0.attn_norm.weight", [256])    // false: a norm, and 1-D
 *   tensorCategory("blk.3.attn_v.weight")                  // "attn_v"
 */

export type TensorCategory =
  | "output"
  | "token_embd"
  | "attn_qkv"
  | "attn_kv_b"
  | "attn_v"
  | "attn_k"
  | "attn_q"
  | "attn_output"
  | "ffn_up"
  | "ffn_gate"
  | "ffn_down"
  | "other";

/** Name parts of 2-D (or 3-D) weights llama.cpp leaves in their input type. */
const NEVER_QUANTIZED = [
  "_norm.weight",
  "ffn_gate_inp.weight",
  "ffn_gate_tid2eid.weight",
  "altup",
  "laurel",
  "per_layer_model_proj",
  "ssm_conv1d",
  "shortconv.conv.weight",
  "indexer.k_proj.weight",
  "indexer.q_proj.weight",
  "time_mix_",
  "attn_rel_b.weight",
  ".position_embd",
  ".rel_pos",
  ".patch_embd",
  ".patch_merger",
];
const NEVER_QUANTIZED_NAMES = new Set(["position_embd.weight", "token_types.weight"]);

/** llama.cpp quantizes 2-D and 3-D tensors named *weight, except norms and the few above. */
export function allowsQuantization(name: string, dims: readonly number[]): boolean {
  if (dims.length < 2 || !name.endsWith("weight") || NEVER_QUANTIZED_NAMES.has(name)) return false;
  return !NEVER_QUANTIZED.some((part) => name.includes(part));
}

/** The first match in llama.cpp's order (attn_qkv before attn_v, ffn_up before ffn_gate…). */
export function tensorCategory(name: string): TensorCategory {
  if (name === "output.weight") return "output";
  if (name === "token_embd.weight" || name === "per_layer_token_embd.weight") return "token_embd";
  const parts: [string, TensorCategory][] = [
    ["attn_qkv.weight", "attn_qkv"],
    ["attn_kv_b.weight", "attn_kv_b"],
    ["attn_v.weight", "attn_v"],
    ["attn_k.weight", "attn_k"],
    ["attn_q.weight", "attn_q"],
    ["attn_output.weight", "attn_output"],
    ["ffn_up", "ffn_up"],
    ["ffn_gate", "ffn_gate"],
    ["ffn_down", "ffn_down"],
  ];
  for (const [part, category] of parts) if (name.includes(part)) return category;
  return "other";
}

/** attn_v, fused qkv and MLA's kv_b: the tensors llama.cpp gives more bits as "attention v". */
export function isAttentionValueLike(category: TensorCategory): boolean {
  return category === "attn_v" || category === "attn_qkv" || category === "attn_kv_b";
}

/** The layer number of a blk.N.* name, −1 for the others (llama.cpp sorts tensors by it). */
export function tensorLayer(name: string): number {
  const match = /^blk\.(\d+)\./.exec(name);
  return match ? Number(match[1]) : -1;
}
