// gpt-oss's hyperparameters from GGUF, as llama.cpp reads them (src/models/openai-moe.cpp,
// LLM_ARCH_OPENAI_MOE, general.architecture "gpt-oss"):
// - gpt-oss.attention.sliding_window (required; 128 in the released models) with the
//   sliding_window_pattern default 2: even layers slide, odd ones attend to everything;
// - one rotary table for both kinds (rope.freq_base_swa defaults to rope.freq_base there and
//   the sliding layers take the same YaRN scaling), YaRN read by model_config_gguf.cpp;
// - a sink logit per head (blk.N.attn_sinks.weight) and biases on q, k, v and the output;
// - expert_count, expert_used_count and expert_feed_forward_length for the mixture-of-experts
//   FFN (softmax over the chosen experts' router logits, SwiGLU with clamp and α, biases).
// Queries are scaled by 1/sqrt(key_length) (llama.cpp: 1/sqrt(n_rot)), the default.
#include <stdexcept>

#include "gguf.h"
#include "model_config.h"

namespace ctxr {

void gptoss_config_from_gguf(const GgufFile& file, ModelConfig& c) {
  const std::string prefix = "gpt-oss.";
  auto bad = [&](const std::string& key, const std::string& what) -> void {
    throw std::runtime_error(file.path() + ": metadata " + prefix + key + " " + what);
  };
  auto positive = [&](const std::string& key) -> int {
    const GgufValue* v = file.find(prefix + key);
    if (!v) bad(key, "is missing (gpt-oss needs it)");
    if (!v->is_integer() || v->integer < 1 || v->integer > 1000000000) bad(key, "must be a positive integer");
    return static_cast<int>(v->integer);
  };
  const int window = positive("attention.sliding_window");
  const std::vector<bool> sliding = gguf_sliding_layers(file, prefix, c.layers, 2);
  c.layer_window.assign(c.layers, 0);
  for (int l = 0; l < c.layers; l++) c.layer_window[l] = sliding[l] ? window : 0;
  c.sliding_window = 0;  // per layer (layer_window), not Mistral's whole-model window
  if (const GgufValue* base = file.find(prefix + "rope.freq_base_swa")) {
    if (!base->is_number()) bad("rope.freq_base_swa", "must be a number");
    if (base->as_number() != c.rope_theta) bad("rope.freq_base_swa", "differs from rope.freq_base (gpt-oss's two kinds of layers share one rotary table here)");
  }
  c.attention_sinks = true;
  MoeConfig& m = c.moe;
  m.experts = positive("expert_count");
  m.experts_used = positive("expert_used_count");
  if (m.experts_used > m.experts) bad("expert_used_count", "exceeds expert_count (" + std::to_string(m.experts) + ")");
  m.expert_ff = positive("expert_feed_forward_length");
  m.gating = ExpertGating::TopKThenSoftmax;
  m.activation = ExpertActivation::SwiGLUClamped;
}

}  // namespace ctxr
