// Gemma 3's hyperparameters. From GGUF as llama.cpp reads them (src/models/gemma3.cpp,
// llama-model.cpp, llama-hparams.cpp): a layer is sliding-window ("local") when
// {arch}.attention.sliding_window > 0 and the layer is local in
// {arch}.attention.sliding_window_pattern (a bool per layer, or a period n, default 6: layer l is
// local when l % n < n - 1, so every 6th layer is global); local layers rotate with
// {arch}.rope.freq_base_swa (default 10000) unscaled, global ones with rope.freq_base and the
// linear rope.scaling.factor. Queries are scaled by 1/sqrt(key_length), except for the 62-layer
// (27B) model: 1/sqrt(embedding_length / head_count). GGUF norm weights already hold 1 + w.
// From config.json as transformers' Gemma3TextConfig: layer_types (or sliding_window_pattern),
// sliding_window, rope_local_base_freq, query_pre_attn_scalar, and (1 + w) norm weights.
#include <cmath>
#include <stdexcept>

#include "gguf.h"
#include "json.h"
#include "model_config.h"

namespace ctxr {

namespace {

void set_common(ModelConfig& c) {
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden));  // llama.cpp: sqrtf(n_embd)
  c.hidden_act = "gelu_tanh";
  c.qk_norm = true;
  c.sandwich_norms = true;
}

// llama.cpp's set_swa_pattern (dense_first = false).
std::vector<bool> local_layers_of_period(int layers, int64_t period) {
  std::vector<bool> local(layers);
  for (int l = 0; l < layers; l++) local[l] = period == 0 || (l % period) < (period - 1);
  return local;
}

}  // namespace

std::vector<bool> gguf_sliding_layers(const GgufFile& file, const std::string& prefix, int layers, int default_period) {
  const std::string key = prefix + "attention.sliding_window_pattern";
  const GgufValue* pattern = file.find(key);
  if (!pattern) return local_layers_of_period(layers, default_period);
  const std::string expected = "must be an integer or one bool per layer (" + std::to_string(layers) + ")";
  if (pattern->type == GgufValueType::Array) {
    if (pattern->element_type != GgufValueType::Bool || pattern->count != static_cast<uint64_t>(layers))
      throw std::runtime_error(file.path() + ": metadata " + key + " " + expected);
    std::vector<bool> local;
    for (double b : pattern->numbers) local.push_back(b != 0);
    return local;
  }
  if (pattern->is_integer() && pattern->integer >= 0 && pattern->integer <= 1000000) return local_layers_of_period(layers, pattern->integer);
  throw std::runtime_error(file.path() + ": metadata " + key + " " + expected);
}

void gemma3_config_from_gguf(const GgufFile& file, ModelConfig& c) {
  const std::string prefix = "gemma3.";
  auto bad = [&](const std::string& key, const std::string& what) -> void {
    throw std::runtime_error(file.path() + ": metadata " + prefix + key + " " + what);
  };
  auto number = [&](const std::string& key, double fallback) {
    const GgufValue* v = file.find(prefix + key);
    if (!v) return fallback;
    if (!v->is_number()) bad(key, "must be a number");
    return v->as_number();
  };
  set_common(c);
  int64_t window = 0;
  if (const GgufValue* sw = file.find(prefix + "attention.sliding_window")) {
    if (!sw->is_integer() || sw->integer < 0 || sw->integer > 1000000000) bad("attention.sliding_window", "must be a non-negative integer");
    window = sw->integer;
  }
  if (window > 0) {
    const std::vector<bool> local = gguf_sliding_layers(file, prefix, c.layers, 6);
    c.layer_window.assign(c.layers, 0);
    for (int l = 0; l < c.layers; l++) c.layer_window[l] = local[l] ? static_cast<int>(window) : 0;
    c.rope_local_theta = number("rope.freq_base_swa", 10000);
    if (!(c.rope_local_theta > 0)) bad("rope.freq_base_swa", "must be positive");
  }
  // llama.cpp takes rope.scaling.factor as linear scaling when rope.scaling.type is absent.
  if (c.rope_type == "default" && !file.find(prefix + "rope.scaling.type")) {
    const double factor = number("rope.scaling.factor", 0);
    if (factor < 0) bad("rope.scaling.factor", "must be positive");
    if (factor > 0 && factor != 1) c.rope_type = "linear", c.rope_factor = factor;
  }
  const int scale_width = c.layers == 62 ? c.hidden / c.heads : c.head_dim;
  c.attention_scale = 1.0 / std::sqrt(static_cast<float>(scale_width));
  c.final_logit_softcap = number("final_logit_softcapping", 0);
  if (c.final_logit_softcap < 0) bad("final_logit_softcapping", "must not be negative");
}

void gemma3_config_from_json(const JsonValue& json, ModelConfig& c) {
  auto bad = [](const std::string& what) -> void { throw std::runtime_error("config.json: " + what); };
  set_common(c);
  c.norm_weight_offset = 1;  // Gemma3RMSNorm: x / rms(x) * (1 + w)
  const JsonValue* act = json.find("hidden_activation");
  if (!act || act->is_null()) act = json.find("hidden_act");
  if (act && !act->is_null() && !(act->is_string() && (act->string == "gelu_pytorch_tanh" || act->string == "gelu_tanh")))
    bad("hidden_activation must be gelu_pytorch_tanh");
  if (const JsonValue* cap = json.find("attn_logit_softcapping"); cap && !cap->is_null())
    bad("attn_logit_softcapping is not supported (Gemma 3 has none)");
  if (const JsonValue* cap = json.find("final_logit_softcapping"); cap && !cap->is_null()) {
    if (!cap->is_number() || cap->number < 0) bad("final_logit_softcapping must be a non-negative number");
    c.final_logit_softcap = cap->number;
  }
  double scalar = c.head_dim;
  if (const JsonValue* q = json.find("query_pre_attn_scalar"); q && !q->is_null()) {
    if (!q->is_number() || !(q->number > 0)) bad("query_pre_attn_scalar must be a positive number");
    scalar = q->number;
  }
  c.attention_scale = 1.0 / std::sqrt(scalar);

  int window = 4096;  // Gemma3TextConfig's default
  if (const JsonValue* sw = json.find("sliding_window"); sw && !sw->is_null()) {
    if (!sw->is_number() || sw->number < 1 || sw->number != std::floor(sw->number) || sw->number > 1e9) bad("sliding_window must be a positive integer");
    window = static_cast<int>(sw->number);
  }
  std::vector<bool> local;
  if (const JsonValue* types = json.find("layer_types"); types && !types->is_null()) {
    if (!types->is_array() || types->array.size() != static_cast<size_t>(c.layers)) bad("layer_types must list one type per layer");
    for (const JsonValue& t : types->array) {
      if (!t.is_string() || (t.string != "sliding_attention" && t.string != "full_attention"))
        bad("layer_types entries must be sliding_attention or full_attention");
      local.push_back(t.string == "sliding_attention");
    }
  } else {
    double period = 6;
    if (const JsonValue* p = json.find("sliding_window_pattern"); p && !p->is_null()) {
      if (!p->is_number() || p->number < 1 || p->number != std::floor(p->number) || p->number > 1e6) bad("sliding_window_pattern must be a positive integer");
      period = p->number;
    }
    // transformers: layer i is global when (i + 1) % pattern == 0 (the same layers as llama.cpp's).
    for (int l = 0; l < c.layers; l++) local.push_back((l + 1) % static_cast<int>(period) != 0);
  }
  c.layer_window.assign(c.layers, 0);
  for (int l = 0; l < c.layers; l++) c.layer_window[l] = local[l] ? window : 0;

  c.rope_local_theta = 10000;
  if (const JsonValue* base = json.find("rope_local_base_freq"); base && !base->is_null()) {
    if (!base->is_number() || !(base->number > 0)) bad("rope_local_base_freq must be a positive number");
    c.rope_local_theta = base->number;
  }
  // transformers 5 keeps both kinds' rope in rope_parameters.{sliding_attention, full_attention}.
  if (const JsonValue* params = json.find("rope_parameters"); params && params->is_object()) {
    auto theta = [&](const char* kind, double& out) {
      const JsonValue* p = params->find(kind);
      if (!p || !p->is_object()) return;
      if (const JsonValue* t = p->find("rope_theta"); t && !t->is_null()) {
        if (!t->is_number() || !(t->number > 0)) bad(std::string("rope_parameters.") + kind + ".rope_theta must be a positive number");
        out = t->number;
      }
      const JsonValue* type = p->find("rope_type");
      const std::string rope_type = type && type->is_string() ? type->string : "default";
      if (std::string(kind) == "sliding_attention") {
        if (rope_type != "default") bad("rope_parameters.sliding_attention.rope_type " + rope_type + " is not supported (default)");
        return;
      }
      if (rope_type == "linear") {
        const JsonValue* f = p->find("factor");
        if (!f || !f->is_number() || !(f->number > 0)) bad("rope_parameters.full_attention.factor must be a positive number");
        c.rope_type = "linear", c.rope_factor = f->number;
      } else if (rope_type != "default") {
        bad("rope_parameters.full_attention.rope_type " + rope_type + " is not supported (default, linear)");
      }
    };
    theta("sliding_attention", c.rope_local_theta);
    theta("full_attention", c.rope_theta);
  }
  if (c.rope_type == "llama3") bad("rope_scaling llama3 is not supported for Gemma 3 (default, linear)");
}

}  // namespace ctxr
