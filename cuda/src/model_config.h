// The fields of a Hugging Face config.json the Llama-family forward pass needs, checked, and
// the rotary inverse frequencies (with llama3 / linear rope_scaling) computed in double.
#pragma once
#include <string>
#include <vector>

#include "moe_config.h"

namespace ctxr {

struct ModelConfig {
  std::string architecture;
  int hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0, layers = 0, vocab = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  std::string rope_type = "default";  // default | linear | llama3 | longrope (Phi-3's "su") | yarn
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4, rope_original_max_positions = 8192;
  bool tie_word_embeddings = false;
  int sliding_window = 0;  // Mistral; 0 when absent
  // Qwen3: each head of q and of k is RMS-normalized (its own head_dim weight) before RoPE.
  bool qk_norm = false;
  // GGUF's rope_freqs.weight (llama3 scaling as per-frequency divisors); empty when absent.
  std::vector<double> rope_freq_factors;
  // Gemma 3 (model_config_gemma3.cpp); the defaults are the Llama family's.
  std::vector<int> layer_window;       // per layer: sliding-window length, 0 = global; empty: all global
  double rope_local_theta = 0;         // rotary base of sliding-window layers (unscaled); 0: none
  double attention_scale = 0;          // query·key scale; 0: 1/sqrt(head_dim)
  double embedding_scale = 1;          // token embeddings are multiplied by this
  std::string hidden_act = "silu";     // silu | gelu_tanh (GeGLU with tanh-approximated GELU)
  bool sandwich_norms = false;         // RMSNorm of the attention and MLP outputs before the residual add
  double norm_weight_offset = 0;       // added to every RMSNorm weight at load (HF Gemma's 1 + w)
  double final_logit_softcap = 0;      // logits = cap * tanh(logits / cap); 0: none
  int layer_window_of(int layer) const { return layer_window.empty() ? 0 : layer_window[layer]; }
  // Rotated dimensions of each head (the first rope_dim of head_dim; Phi-4-mini rotates 3/4).
  int rope_dim = 0;
  // LongRoPE (phi3): per-frequency divisors for contexts longer than rope_original_max_positions
  // and for shorter ones (rope_dim/2 each), and the factor both cos and sin are multiplied by.
  std::vector<double> rope_long_factors, rope_short_factors;
  double rope_attention_factor = 1;
  // YaRN (rope_type "yarn", from GGUF as llama.cpp applies it): frequencies interpolated by
  // rope_factor below a ramp between the dimensions of beta_fast and beta_slow rotations over
  // rope_original_max_positions; cos and sin scaled by rope_attention_factor (1 + 0.1 ln factor).
  double rope_yarn_beta_fast = 32, rope_yarn_beta_slow = 1;
  // gpt-oss (model_config_gptoss.cpp): a learned sink logit per head joins each softmax
  // (tensor self_attn.sinks.weight, AttentionBatch::sinks).
  bool attention_sinks = false;
  // Mixture of experts (qwen3moe, gpt-oss): every layer's FFN is routed experts; moe.experts == 0: dense.
  MoeConfig moe;
};

// LongRoPE picks its factors once for the whole cache, as llama.cpp does by its context size:
// the long ones when the KV cache holds more tokens than the original context. Sets
// rope_freq_factors from them (no-op without LongRoPE factors).
void choose_longrope_factors(ModelConfig& c, long long context_tokens);

class GgufFile;
// The same fields from a GGUF file's metadata ({arch}.embedding_length, ...; llama | qwen2 | qwen3).
// Throws std::runtime_error("<file>: metadata KEY ...") naming the bad key.
// `other_parts`: the other files of a split model, whose tensors count too (gguf_split.h).
ModelConfig model_config_from_gguf(const GgufFile& file, const std::vector<const GgufFile*>& other_parts = {});

// Throws std::runtime_error("config.json: ...") naming the bad field.
ModelConfig model_config_from_json_text(const std::string& text);
// YaRN's magnitude scale of cos and sin for a context `factor` times the original (llama.cpp's
// net mscale: 1 + 0.1 ln factor above 1, else 1), before rope.scaling.attn_factor.
double yarn_attention_factor(double factor);
// Global (full-attention) layers' inverse frequencies.
std::vector<double> rope_inverse_frequencies(const ModelConfig& c);
// Sliding-window layers' (rope_local_theta, no scaling); the global table when rope_local_theta is 0.
std::vector<double> rope_local_inverse_frequencies(const ModelConfig& c);

// Gemma 3 (model_config_gemma3.cpp): the fields above from GGUF metadata as llama.cpp reads them
// (general.architecture "gemma3"), and from a Gemma3ForCausalLM config.json.
struct JsonValue;
void gemma3_config_from_gguf(const GgufFile& file, ModelConfig& c);
void gemma3_config_from_json(const JsonValue& json, ModelConfig& c);
// llama.cpp's sliding-window layers of {prefix}attention.sliding_window_pattern: one bool per
// layer, or a period n (layer l slides when l % n < n - 1), `default_period` when absent.
std::vector<bool> gguf_sliding_layers(const GgufFile& file, const std::string& prefix, int layers, int default_period);

// gpt-oss (model_config_gptoss.cpp): sliding-window and full layers alternating, attention
// sinks, YaRN, q/k/v/o biases, and the mixture-of-experts metadata, as llama.cpp reads them
// (general.architecture "gpt-oss", LLM_ARCH_OPENAI_MOE).
void gptoss_config_from_gguf(const GgufFile& file, ModelConfig& c);

}  // namespace ctxr
