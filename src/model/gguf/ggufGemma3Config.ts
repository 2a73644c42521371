/**
 * Gemma 3's config.json fields from a `gemma3` GGUF file, as llama.cpp reads the metadata
 * (src/models/gemma3.cpp, llama-hparams.cpp) and as transformers' Gemma3TextConfig names them:
 *   gemma3.attention.sliding_window (absent or 0: every layer global) → sliding_window;
 *   gemma3.attention.sliding_window_pattern, a period n (default 6: layer l is local when
 *     l % n < n − 1) or one bool per layer → layer_types (sliding_attention | full_attention);
 *   gemma3.rope.freq_base_swa (default 10000) → rope_local_base_freq;
 *   query_pre_attn_scalar: key_length, or embedding_length / head_count for the 62-layer (27B)
 *     model (llama.cpp's attention scale is 1/√ of it);
 *   gemma3.final_logit_softcapping → final_logit_softcapping (null when absent).
 * Pure; a GgufMetadataError names the bad key.
 */
import { GgufMetadataError, optionalInteger, optionalNumber, plainValue, type GgufMetadataLike } from "./ggufMetadataValues.ts";

export interface Gemma3Shape {
  hidden: number;
  heads: number;
  headDim: number;
  layers: number;
}

/** llama.cpp's set_swa_pattern: layer l is sliding-window when l % period < period − 1 (period 0: all). */
export function gemma3LocalLayers(layers: number, period: number): boolean[] {
  return Array.from({ length: layers }, (_, l) => period === 0 || l % period < period - 1);
}

function localLayers(metadata: GgufMetadataLike, layers: number): boolean[] {
  const key = "gemma3.attention.sliding_window_pattern";
  const value = plainValue(metadata.get(key));
  if (value === undefined) return gemma3LocalLayers(layers, 6);
  if (Array.isArray(value)) {
    if (value.length !== layers || !value.every((v) => typeof v === "boolean")) throw new GgufMetadataError(`GGUF metadata key ${key} must be an integer or ${layers} bools (one per layer)`);
    return value as boolean[];
  }
  return gemma3LocalLayers(layers, optionalInteger(metadata, key, 0)!);
}

export function gemma3ConfigFields(metadata: GgufMetadataLike, shape: Gemma3Shape): Record<string, unknown> {
  const window = optionalInteger(metadata, "gemma3.attention.sliding_window", 0) ?? 0;
  const local = window > 0 ? localLayers(metadata, shape.layers) : new Array<boolean>(shape.layers).fill(false);
  const localBaseKey = "gemma3.rope.freq_base_swa";
  const localBase = optionalNumber(metadata, localBaseKey) ?? 10000;
  if (localBase <= 0) throw new GgufMetadataError(`GGUF metadata key ${localBaseKey} must be positive, got ${localBase}`);
  const softcapKey = "gemma3.final_logit_softcapping";
  const softcap = optionalNumber(metadata, softcapKey);
  if (softcap !== undefined && softcap < 0) throw new GgufMetadataError(`GGUF metadata key ${softcapKey} must not be negative, got ${softcap}`);
  return {
    model_type: "gemma3_text",
    hidden_activation: "gelu_pytorch_tanh",
    hidden_act: undefined,
    sliding_window: window > 0 ? window : null,
    layer_types: local.map((isLocal) => (isLocal ? "sliding_attention" : "full_attention")),
    rope_local_base_freq: localBase,
    query_pre_attn_scalar: shape.layers === 62 ? shape.hidden / shape.heads : shape.headDim,
    final_logit_softcapping: softcap && softcap > 0 ? softcap : null,
    attn_logit_softcapping: null,
  };
}
