/**
 * gpt-oss's config.json fields from a `gpt-oss` GGUF file, as llama.cpp reads the metadata
 * (src/models/openai-moe.cpp) and as transformers' GptOssConfig names them:
 *   gpt-oss.attention.sliding_window (required) → sliding_window;
 *   gpt-oss.attention.sliding_window_pattern, a period n (default 2: layer l slides when
 *     l % n < n − 1, so even layers slide) or one bool per layer → layer_types;
 *   gpt-oss.expert_count, expert_used_count, expert_feed_forward_length (required) →
 *     num_local_experts, num_experts_per_tok, intermediate_size;
 *   YaRN (rope.scaling.*) with llama.cpp's beta_fast 32 and beta_slow 1; biases on q/k/v/o.
 * The runner reads the same keys (cuda/src/model_config_gptoss.cpp) and refuses the same files.
 * Pure; a GgufMetadataError names the bad key.
 */
import { gemma3LocalLayers } from "./ggufGemma3Config.ts";
import { GgufMetadataError, optionalInteger, plainValue, requiredInteger, type GgufMetadataLike } from "./ggufMetadataValues.ts";

const PREFIX = "gpt-oss.";

function slidingLayers(metadata: GgufMetadataLike, layers: number): boolean[] {
  const key = `${PREFIX}attention.sliding_window_pattern`;
  const value = plainValue(metadata.get(key));
  // llama.cpp's set_swa_pattern (gemma3LocalLayers) with gpt-oss's default period 2.
  if (value === undefined) return gemma3LocalLayers(layers, 2);
  if (Array.isArray(value)) {
    if (value.length !== layers || !value.every((v) => typeof v === "boolean")) throw new GgufMetadataError(`GGUF metadata key ${key} must be an integer or ${layers} bools (one per layer)`);
    return value as boolean[];
  }
  return gemma3LocalLayers(layers, optionalInteger(metadata, key, 0)!);
}

/** The expert FFN's width (gpt-oss files without a dense feed_forward_length use it as intermediate_size). */
export function gptOssExpertWidth(metadata: GgufMetadataLike): number {
  return requiredInteger(metadata, `${PREFIX}expert_feed_forward_length`, 1);
}

export function gptOssConfigFields(metadata: GgufMetadataLike, layers: number, ropeScaling: Record<string, unknown> | null): Record<string, unknown> {
  const window = requiredInteger(metadata, `${PREFIX}attention.sliding_window`, 1);
  const experts = requiredInteger(metadata, `${PREFIX}expert_count`, 1);
  const usedKey = `${PREFIX}expert_used_count`;
  const used = requiredInteger(metadata, usedKey, 1);
  if (used > experts) throw new GgufMetadataError(`GGUF metadata key ${usedKey} (${used}) exceeds ${PREFIX}expert_count (${experts})`);
  return {
    model_type: "gpt_oss",
    sliding_window: window,
    layer_types: slidingLayers(metadata, layers).map((sliding) => (sliding ? "sliding_attention" : "full_attention")),
    num_local_experts: experts,
    num_experts_per_tok: used,
    intermediate_size: gptOssExpertWidth(metadata),
    attention_bias: true,
    swiglu_limit: 7,
    rope_scaling: ropeScaling === null ? null : { ...ropeScaling, beta_fast: 32, beta_slow: 1 },
  };
}
