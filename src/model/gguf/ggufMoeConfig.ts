/**
 * A mixture-of-experts GGUF file's expert fields as Hugging Face's Qwen3MoeForCausalLM config.json
 * names them (ARCH = general.architecture, qwen3moe): ARCH.expert_count (num_experts),
 * ARCH.expert_used_count (num_experts_per_tok, at most expert_count),
 * ARCH.expert_feed_forward_length (moe_intermediate_size; llama.cpp's default: feed_forward_length /
 * expert_used_count). The router's top-k weights are renormalised (norm_topk_prob), as llama.cpp
 * runs qwen3moe. Pure: a GgufMetadataError naming the key when one is missing or invalid.
 */
import { GgufMetadataError, optionalInteger, requiredInteger, type GgufMetadataLike } from "./ggufMetadataValues.ts";

export interface MoeConfigFields {
  num_experts: number;
  num_experts_per_tok: number;
  moe_intermediate_size: number;
  norm_topk_prob: boolean;
}

export function moeConfigFields(metadata: GgufMetadataLike, arch: string, intermediate: number): MoeConfigFields {
  const experts = requiredInteger(metadata, `${arch}.expert_count`, 1);
  const usedKey = `${arch}.expert_used_count`;
  const used = requiredInteger(metadata, usedKey, 1);
  if (used > experts) throw new GgufMetadataError(`GGUF metadata key ${usedKey} (${used}) is above ${arch}.expert_count (${experts})`);
  const expertFfn = optionalInteger(metadata, `${arch}.expert_feed_forward_length`, 1) ?? Math.max(1, Math.floor(intermediate / used));
  return { num_experts: experts, num_experts_per_tok: used, moe_intermediate_size: expertFfn, norm_topk_prob: true };
}
