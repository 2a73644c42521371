// Phi-3 (Phi3ForCausalLM) in config.json: LongRoPE factors and attention factor, partial rotary,
// errors naming the field; and the CPU backend's rope() over part of a head with a scale.
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "backend.h"
#include "model_config.h"
#include "runner_test.h"

using namespace ctxr;

namespace {

std::string phi3_json(const std::string& extra) {
  return R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8,
    "num_hidden_layers": 1, "vocab_size": 10, "hidden_act": "silu", "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "sliding_window": 262144)" + extra + "}";
}

std::string error_of_json(const std::string& text) {
  try {
    model_config_from_json_text(text);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

RUNNER_TEST(phi3, longrope_config_and_factors) {
  // Phi-4-mini's shape at head_dim 16: 3/4 rotated, so 6 factors each.
  ModelConfig c = model_config_from_json_text(phi3_json(R"(, "partial_rotary_factor": 0.75,
    "rope_scaling": {"type": "longrope", "long_factor": [1, 2, 3, 4, 5, 6], "short_factor": [1, 1, 1, 1.5, 1.5, 2]})"));
  CHECK(c.architecture == "Phi3ForCausalLM");
  CHECK_EQ(c.rope_dim, 12);
  CHECK_EQ(c.sliding_window, 0);  // as llama.cpp: full attention for phi3
  CHECK(c.rope_type == "longrope");
  // transformers' default: sqrt(1 + ln(131072 / 4096) / ln(4096))
  CHECK_NEAR(c.rope_attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
  ModelConfig long_ctx = c, short_ctx = c;
  choose_longrope_factors(long_ctx, 4097);
  choose_longrope_factors(short_ctx, 4096);
  std::vector<double> f_long = rope_inverse_frequencies(long_ctx), f_short = rope_inverse_frequencies(short_ctx);
  CHECK_EQ(f_long.size(), 6u);
  for (int i = 0; i < 6; i++) {
    const double plain = 1.0 / std::pow(10000.0, 2.0 * i / 12);  // frequencies over the rotated 12
    CHECK_NEAR(f_long[i], plain / (i + 1), plain * 1e-12);
    CHECK_NEAR(f_short[i], plain / c.rope_short_factors[i], plain * 1e-12);
  }
  ModelConfig given = model_config_from_json_text(phi3_json(R"(, "rope_scaling": {"rope_type": "longrope", "attention_factor": 1.5,
    "long_factor": [1, 1, 1, 1, 1, 1, 1, 1], "short_factor": [1, 1, 1, 1, 1, 1, 1, 1]})"));
  CHECK_EQ(given.rope_dim, 16);
  CHECK_NEAR(given.rope_attention_factor, 1.5, 0);
}

RUNNER_TEST(phi3, config_errors_name_the_field) {
  CHECK(contains(error_of_json(phi3_json(R"(, "rope_scaling": {"type": "longrope", "long_factor": [1, 2], "short_factor": [1, 2]})")),
                 "rope_scaling.long_factor must be an array of 8 numbers"));
  CHECK(contains(error_of_json(phi3_json(R"(, "rope_scaling": {"type": "longrope", "long_factor": [1, 1, 1, 1, 1, 1, 1, 0], "short_factor": [1, 1, 1, 1, 1, 1, 1, 1]})")),
                 "not a positive number"));
  CHECK(contains(error_of_json(phi3_json(R"(, "rope_scaling": {"type": "yarn", "factor": 4})")), "yarn is not supported for Phi3ForCausalLM"));
  CHECK(contains(error_of_json(phi3_json(R"(, "partial_rotary_factor": 1.5)")), "partial_rotary_factor must be in (0, 1]"));
  CHECK(contains(error_of_json(phi3_json(R"(, "partial_rotary_factor": 0.1)")), "odd or empty rotary dimension"));
}

RUNNER_TEST(phi3, cpu_rope_partial_with_scale) {
  std::unique_ptr<Backend> cpu(make_cpu_backend(2));
  const int n = 3, heads = 2, head_dim = 16, rot = 12, stride = heads * head_dim + 5;
  const float scale = 1.25f;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<size_t>(n) * stride);
  for (float& v : x) v = u(rng);
  std::vector<float> inv(rot / 2);
  for (int j = 0; j < rot / 2; j++) inv[j] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * j / rot));
  const int32_t pos[n] = {0, 7, 4000};
  std::vector<float> y = x;
  cpu->rope(y.data(), stride, n, heads, RopeShape{head_dim, rot, scale}, pos, inv.data(), 1);
  for (int i = 0; i < n; i++)
    for (int h = 0; h < heads; h++) {
      const size_t o = static_cast<size_t>(i) * stride + h * head_dim;
      for (int j = 0; j < rot / 2; j++) {
        const double a = static_cast<double>(pos[i]) * inv[j];
        CHECK_NEAR(y[o + j], scale * (x[o + j] * std::cos(a) - x[o + j + rot / 2] * std::sin(a)), 1e-5);
        CHECK_NEAR(y[o + j + rot / 2], scale * (x[o + j + rot / 2] * std::cos(a) + x[o + j] * std::sin(a)), 1e-5);
      }
      for (int j = rot; j < head_dim; j++) CHECK_NEAR(y[o + j], x[o + j], 0);  // not rotated, not scaled
    }
  for (int i = 0; i < n; i++)  // beyond the heads: untouched
    for (int j = heads * head_dim; j < stride; j++) CHECK_NEAR(y[static_cast<size_t>(i) * stride + j], x[static_cast<size_t>(i) * stride + j], 0);
  cpu->rope(y.data(), stride, n, heads, RopeShape{head_dim, rot, scale}, pos, inv.data(), -1);
  for (size_t k = 0; k < x.size(); k++) CHECK_NEAR(y[k], x[k], 2e-6);
}
