// ModelConfig from GGUF metadata (llama.cpp's key names, prefixed by general.architecture).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gguf.h"
#include "model_config.h"

namespace ctxr {

namespace {

class Keys {
 public:
  Keys(const GgufFile& f, std::string prefix) : f_(f), prefix_(std::move(prefix)) {}
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw std::runtime_error(f_.path() + ": metadata " + key + " " + what);
  }
  int positive_int(const std::string& name, int fallback = -1) const {
    const std::string key = prefix_ + name;
    const GgufValue* v = f_.find(key);
    if (!v) {
      if (fallback > 0) return fallback;
      bad(key, "is missing");
    }
    if (!v->is_integer() || v->integer < 1 || v->integer > 1000000000) bad(key, "must be a positive integer");
    return static_cast<int>(v->integer);
  }
  double number(const std::string& name, double fallback) const {
    const std::string key = prefix_ + name;
    const GgufValue* v = f_.find(key);
    if (!v) return fallback;
    if (!v->is_number()) bad(key, "must be a number");
    return v->as_number();
  }
  const GgufValue* find(const std::string& name) const { return f_.find(prefix_ + name); }
  std::string key(const std::string& name) const { return prefix_ + name; }

 private:
  const GgufFile& f_;
  std::string prefix_;
};

}  // namespace

ModelConfig model_config_from_gguf(const GgufFile& file, const std::vector<const GgufFile*>& other_parts) {
  auto tensor = [&](const std::string& name) -> const GgufTensor* {
    if (const GgufTensor* t = file.tensor(name)) return t;
    for (const GgufFile* part : other_parts)
      if (const GgufTensor* t = part->tensor(name)) return t;
    return nullptr;
  };
  const GgufValue* arch = file.find("general.architecture");
  if (!arch || arch->type != GgufValueType::String) throw std::runtime_error(file.path() + ": metadata general.architecture is missing");
  ModelConfig c;
  if (arch->text == "llama") c.architecture = "LlamaForCausalLM";
  else if (arch->text == "qwen2") c.architecture = "Qwen2ForCausalLM";
  else if (arch->text == "qwen3") c.architecture = "Qwen3ForCausalLM";
  else if (arch->text == "gemma3") c.architecture = "Gemma3ForCausalLM";
  else if (arch->text == "phi3") c.architecture = "Phi3ForCausalLM";
  else if (arch->text == "qwen3moe") c.architecture = "Qwen3MoeForCausalLM";
  else if (arch->text == "gpt-oss") c.architecture = "GptOssForCausalLM";
  else throw std::runtime_error(file.path() + ": metadata general.architecture " + arch->text + " is not supported (llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss)");
  c.qk_norm = arch->text == "qwen3" || arch->text == "qwen3moe";
  const bool phi3 = arch->text == "phi3";
  Keys k(file, arch->text + ".");
  c.hidden = k.positive_int("embedding_length");
  c.heads = k.positive_int("attention.head_count");
  c.kv_heads = k.positive_int("attention.head_count_kv", c.heads);
  c.head_dim = k.positive_int("attention.key_length", c.hidden / c.heads);
  if (k.positive_int("attention.value_length", c.head_dim) != c.head_dim) k.bad(k.key("attention.value_length"), "differs from key_length");
  const bool gptoss = arch->text == "gpt-oss";
  // gpt-oss has no dense FFN: its experts' width stands in when feed_forward_length is absent.
  c.intermediate = gptoss && !k.find("feed_forward_length") ? k.positive_int("expert_feed_forward_length") : k.positive_int("feed_forward_length");
  c.layers = k.positive_int("block_count");
  c.max_position_embeddings = k.positive_int("context_length", 4096);
  if (c.heads % c.kv_heads != 0) k.bad(k.key("attention.head_count"), "is not a multiple of head_count_kv");
  if (c.head_dim % 2 != 0) k.bad(k.key("attention.key_length"), "must be even");
  c.rope_dim = k.positive_int("rope.dimension_count", c.head_dim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) k.bad(k.key("rope.dimension_count"), "must be even and at most the head size " + std::to_string(c.head_dim));
  if (c.rope_dim != c.head_dim && !phi3) k.bad(k.key("rope.dimension_count"), "differs from the head size (partial rotary is supported for phi3 only)");
  c.rms_norm_eps = k.number("attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_theta = k.number("rope.freq_base", 10000);
  if (c.rope_theta <= 0) k.bad(k.key("rope.freq_base"), "must be positive");
  if (const GgufValue* t = k.find("rope.scaling.type")) {
    if (t->type != GgufValueType::String) k.bad(k.key("rope.scaling.type"), "must be a string");
    if (t->text == "linear") {
      c.rope_type = "linear";
      c.rope_factor = k.number("rope.scaling.factor", 0);
      if (c.rope_factor <= 0) k.bad(k.key("rope.scaling.factor"), "must be positive");
    } else if (t->text == "yarn") {
      // llama.cpp: freq_scale = 1 / rope.scaling.factor, the ramp over original_context_length
      // (default the training context), cos and sin times 1 + 0.1 ln factor and attn_factor.
      c.rope_type = "yarn";
      c.rope_factor = k.number("rope.scaling.factor", 1);
      if (!(c.rope_factor > 0)) k.bad(k.key("rope.scaling.factor"), "must be positive");
      c.rope_original_max_positions = k.positive_int("rope.scaling.original_context_length", c.max_position_embeddings);
      const double attn_factor = k.number("rope.scaling.attn_factor", 1);
      if (!(attn_factor > 0)) k.bad(k.key("rope.scaling.attn_factor"), "must be positive");
      c.rope_attention_factor = yarn_attention_factor(c.rope_factor) * attn_factor;
    } else if (t->text != "none") {
      k.bad(k.key("rope.scaling.type"), t->text + " is not supported (none, linear, yarn)");
    }
  }
  if (const GgufValue* sw = k.find("attention.sliding_window"); sw && sw->is_integer()) c.sliding_window = static_cast<int>(sw->integer);
  if (phi3) {
    // llama.cpp runs phi3 with full attention whatever its sliding_window says (PR 13676); its
    // LongRoPE factors (tensors rope_factors_long/short, read by GgufWeights) switch at
    // rope.scaling.original_context_length, and scale cos and sin by rope.scaling.attn_factor.
    c.sliding_window = 0;
    c.rope_original_max_positions = k.positive_int("rope.scaling.original_context_length", c.max_position_embeddings);
    c.rope_attention_factor = k.number("rope.scaling.attn_factor", 1);
    if (!(c.rope_attention_factor > 0)) k.bad(k.key("rope.scaling.attn_factor"), "must be positive");
  }
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (tokens && tokens->type == GgufValueType::Array && tokens->count > 0) c.vocab = static_cast<int>(tokens->count);
  else if (k.find("vocab_size")) c.vocab = k.positive_int("vocab_size");
  else if (const GgufTensor* e = tensor("token_embd.weight"); e && e->dims.size() == 2) c.vocab = static_cast<int>(e->dims[1]);
  else throw std::runtime_error(file.path() + ": metadata tokenizer.ggml.tokens is missing (no vocabulary size)");
  c.tie_word_embeddings = tensor("output.weight") == nullptr;
  if (arch->text == "gemma3") gemma3_config_from_gguf(file, c);
  if (gptoss) gptoss_config_from_gguf(file, c);
  if (arch->text == "qwen3moe") {
    // llama.cpp (src/models/qwen3moe.cpp): softmax over every expert, top-k, the k weights
    // renormalised to sum 1, no shared expert.
    MoeConfig& m = c.moe;
    m.experts = k.positive_int("expert_count");
    m.experts_used = k.positive_int("expert_used_count");
    if (m.experts > 4096) k.bad(k.key("expert_count"), "is above 4096");
    if (m.experts_used > m.experts) k.bad(k.key("expert_used_count"), "is above expert_count " + std::to_string(m.experts));
    m.expert_ff = k.positive_int("expert_feed_forward_length", std::max(1, c.intermediate / m.experts_used));
    m.gating = ExpertGating::SoftmaxThenTopK;
    m.normalize_topk = true;
    m.weights_scale = static_cast<float>(k.number("expert_weights_scale", 0));
    if (!(m.weights_scale >= 0)) k.bad(k.key("expert_weights_scale"), "must not be negative");
  }
  return c;
}

}  // namespace ctxr
