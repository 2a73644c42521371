#include "model_config.h"

#include <cmath>
#include <stdexcept>

#include "json.h"

namespace ctxr {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error("config.json: " + what); }

int positive_int(const JsonValue& json, const std::string& key, int fallback = -1) {
  const JsonValue* v = json.find(key);
  if (!v || v->is_null()) {
    if (fallback > 0) return fallback;
    bad(key + " is missing");
  }
  if (!v->is_number() || v->number < 1 || v->number != std::floor(v->number) || v->number > 1e9)
    bad(key + " must be a positive integer");
  return static_cast<int>(v->number);
}

double number_or(const JsonValue& json, const std::string& key, double fallback) {
  const JsonValue* v = json.find(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_number()) bad(key + " must be a number");
  return v->number;
}

std::vector<double> positive_factors(const JsonValue& rs, const std::string& key, size_t n) {
  const JsonValue* v = rs.find(key);
  if (!v || !v->is_array() || v->array.size() != n) bad("rope_scaling." + key + " must be an array of " + std::to_string(n) + " numbers (rotary dimension / 2)");
  std::vector<double> out;
  for (const JsonValue& x : v->array) {
    if (!x.is_number() || !(x.number > 0)) bad("rope_scaling." + key + " holds a factor that is not a positive number");
    out.push_back(x.number);
  }
  return out;
}

// Phi-3's rope_scaling: {"type": "longrope" | "su", "long_factor": [...], "short_factor": [...]}
// with original_max_position_embeddings beside it (Phi-3) or inside it. The attention factor is
// transformers' default, sqrt(1 + ln(s) / ln(original)) for s = max_position / original > 1,
// unless rope_scaling.attention_factor gives it.
void read_longrope(const JsonValue& json, const JsonValue& rs, ModelConfig& c) {
  const JsonValue* type = rs.find("rope_type");
  if (!type) type = rs.find("type");
  const std::string kind = type && type->is_string() ? type->string : "";
  if (kind != "longrope" && kind != "su") bad("rope_scaling type " + kind + " is not supported for Phi3ForCausalLM (longrope, su)");
  c.rope_type = "longrope";
  const size_t half = static_cast<size_t>(c.rope_dim / 2);
  c.rope_long_factors = positive_factors(rs, "long_factor", half);
  c.rope_short_factors = positive_factors(rs, "short_factor", half);
  double original = number_or(rs, "original_max_position_embeddings", number_or(json, "original_max_position_embeddings", 0));
  if (!(original >= 1)) bad("original_max_position_embeddings must be a positive integer (LongRoPE)");
  c.rope_original_max_positions = original;
  const double scale = c.max_position_embeddings / original;
  c.rope_attention_factor = scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(original)) : 1;
  if (const JsonValue* f = rs.find("attention_factor"); f && !f->is_null()) {
    if (!f->is_number() || !(f->number > 0)) bad("rope_scaling.attention_factor must be a positive number");
    c.rope_attention_factor = f->number;
  }
}

}  // namespace

ModelConfig model_config_from_json_text(const std::string& text) {
  JsonValue json;
  try {
    json = parse_json(text);
  } catch (const std::exception& e) {
    bad(e.what());
  }
  if (!json.is_object()) bad("not a JSON object");
  ModelConfig c;
  if (const JsonValue* arch = json.find("architectures"); arch && arch->is_array() && !arch->array.empty() && arch->array[0].is_string())
    c.architecture = arch->array[0].string;
  else
    c.architecture = "LlamaForCausalLM";
  static const char* supported[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM"};
  bool known = false;
  for (const char* s : supported) known = known || c.architecture == s;
  if (!known) bad("architecture " + c.architecture + " is not supported (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM)");
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  const bool phi3 = c.architecture == "Phi3ForCausalLM";
  c.hidden = positive_int(json, "hidden_size");
  c.heads = positive_int(json, "num_attention_heads");
  c.kv_heads = positive_int(json, "num_key_value_heads", c.heads);
  c.head_dim = positive_int(json, "head_dim", c.hidden / c.heads);
  c.intermediate = positive_int(json, "intermediate_size");
  c.layers = positive_int(json, "num_hidden_layers");
  c.vocab = positive_int(json, "vocab_size");
  c.max_position_embeddings = positive_int(json, "max_position_embeddings", 4096);
  if (c.heads % c.kv_heads != 0) bad("num_attention_heads is not a multiple of num_key_value_heads");
  if (c.head_dim % 2 != 0) bad("head_dim must be even");
  if (c.head_dim > 1024) bad("head_dim must be at most 1024");
  const bool gemma3 = c.architecture == "Gemma3ForCausalLM";
  if (const JsonValue* act = json.find("hidden_act"); !gemma3 && act && !(act->is_string() && act->string == "silu"))
    bad("hidden_act must be silu");
  c.rms_norm_eps = number_or(json, "rms_norm_eps", 1e-6);
  c.rope_theta = number_or(json, "rope_theta", 10000);
  if (c.rope_theta <= 0) bad("rope_theta must be positive");
  if (const JsonValue* tie = json.find("tie_word_embeddings"); tie && tie->kind == JsonValue::Kind::Bool) c.tie_word_embeddings = tie->boolean;
  if (const JsonValue* sw = json.find("sliding_window"); sw && sw->is_number()) c.sliding_window = static_cast<int>(sw->number);
  // Phi-3-mini-4k's config names a window of 2047, yet llama.cpp runs every phi3 model with full
  // attention (llama.cpp PR 13676): so do we, to give the same logits.
  if (phi3) c.sliding_window = 0;
  c.rope_dim = c.head_dim;
  if (double partial = number_or(json, "partial_rotary_factor", 1); partial != 1) {
    if (!phi3) bad("partial_rotary_factor is supported for Phi3ForCausalLM only");
    if (!(partial > 0 && partial < 1)) bad("partial_rotary_factor must be in (0, 1]");
    c.rope_dim = static_cast<int>(c.head_dim * partial);
    if (c.rope_dim < 2 || c.rope_dim % 2 != 0) bad("partial_rotary_factor gives an odd or empty rotary dimension " + std::to_string(c.rope_dim));
  }
  if (const JsonValue* rs = json.find("rope_scaling"); rs && rs->is_object() && phi3) {
    read_longrope(json, *rs, c);
  } else if (rs && rs->is_object()) {
    const JsonValue* type = rs->find("rope_type");
    if (!type) type = rs->find("type");
    c.rope_type = type && type->is_string() ? type->string : "default";
    if (c.rope_type != "default") {
      c.rope_factor = number_or(*rs, "factor", 0);
      if (c.rope_factor <= 0) bad("rope_scaling.factor must be positive");
    }
    if (c.rope_type == "llama3") {
      c.rope_low_freq_factor = number_or(*rs, "low_freq_factor", 1);
      c.rope_high_freq_factor = number_or(*rs, "high_freq_factor", 4);
      c.rope_original_max_positions = number_or(*rs, "original_max_position_embeddings", 8192);
      if (c.rope_high_freq_factor <= c.rope_low_freq_factor) bad("rope_scaling.high_freq_factor must exceed low_freq_factor");
    } else if (c.rope_type != "default" && c.rope_type != "linear") {
      bad("rope_scaling type " + c.rope_type + " is not supported (default, linear, llama3)");
    }
  }
  if (gemma3) gemma3_config_from_json(json, c);
  return c;
}

namespace {

// llama.cpp's YaRN (ggml rope_yarn): frequency i is interpolated (divided by the factor) with
// weight 1 - ramp(i) and kept with weight ramp(i), ramp falling from 1 to 0 between the
// dimensions where beta_fast and beta_slow rotations fit the original context
// (ggml_rope_yarn_corr_dims, computed in float as there: the floor and ceil must agree).
void apply_yarn(std::vector<double>& f, const ModelConfig& c, int dims) {
  auto corr_dim = [&](double rotations) {
    return dims * logf(static_cast<float>(c.rope_original_max_positions) / (static_cast<float>(rotations) * 2 * static_cast<float>(M_PI))) /
           (2 * logf(static_cast<float>(c.rope_theta)));
  };
  const float low = std::max(0.0f, std::floor(corr_dim(c.rope_yarn_beta_fast)));
  const float high = std::min(static_cast<float>(dims - 1), std::ceil(corr_dim(c.rope_yarn_beta_slow)));
  for (size_t i = 0; i < f.size(); i++) {
    const double y = (static_cast<double>(i) - low) / std::max(0.001, static_cast<double>(high - low));
    const double ramp = 1 - std::min(1.0, std::max(0.0, y));
    f[i] = f[i] / c.rope_factor * (1 - ramp) + f[i] * ramp;
  }
}

}  // namespace

double yarn_attention_factor(double factor) { return factor > 1 ? 1 + 0.1 * std::log(factor) : 1; }

void choose_longrope_factors(ModelConfig& c, long long context_tokens) {
  if (c.rope_long_factors.empty()) return;
  c.rope_freq_factors = context_tokens > c.rope_original_max_positions ? c.rope_long_factors : c.rope_short_factors;
}

std::vector<double> rope_inverse_frequencies(const ModelConfig& c) {
  const int dims = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  int half = dims / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; i++) f[i] = 1.0 / std::pow(c.rope_theta, (2.0 * i) / dims);
  if (c.rope_type == "linear") {
    for (auto& x : f) x /= c.rope_factor;
  } else if (c.rope_type == "llama3") {
    double low_wavelength = c.rope_original_max_positions / c.rope_low_freq_factor;
    double high_wavelength = c.rope_original_max_positions / c.rope_high_freq_factor;
    for (auto& x : f) {
      double wavelength = 2 * M_PI / x;
      if (wavelength < high_wavelength) continue;
      if (wavelength > low_wavelength) {
        x /= c.rope_factor;
        continue;
      }
      double smooth = (c.rope_original_max_positions / wavelength - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
      x = (1 - smooth) * x / c.rope_factor + smooth * x;
    }
  } else if (c.rope_type == "yarn") {
    apply_yarn(f, c, dims);
  }
  if (!c.rope_freq_factors.empty()) {
    if (c.rope_freq_factors.size() != static_cast<size_t>(half)) throw std::runtime_error("rope frequency factors: " + std::to_string(c.rope_freq_factors.size()) + ", expected " + std::to_string(half));
    for (int i = 0; i < half; i++) f[i] /= c.rope_freq_factors[i];
  }
  return f;
}

std::vector<double> rope_local_inverse_frequencies(const ModelConfig& c) {
  if (c.rope_local_theta <= 0) return rope_inverse_frequencies(c);
  std::vector<double> f(c.head_dim / 2);
  for (size_t i = 0; i < f.size(); i++) f[i] = 1.0 / std::pow(c.rope_local_theta, (2.0 * i) / c.head_dim);
  return f;
}

}  // namespace ctxr
