// YaRN rotary frequencies (model_config.cpp, rope_type "yarn") against llama.cpp's formula as
// ggml computes it (ggml-cpu/ops.cpp rope_yarn and ggml_rope_cache_init, ggml.c
// ggml_rope_yarn_corr_dims), transcribed here in float as there: the angle of frequency i at
// position p is θ_extrap·(1 - ramp) / factor + θ_extrap·ramp, θ_extrap = p·base^(-2i/d).
#include <algorithm>
#include <cmath>
#include <vector>

#include "model_config.h"
#include "runner_test.h"

using namespace ctxr;

namespace {

// ggml's angles of position p for the d/2 frequencies (ext_factor 1, freq_scale 1 / factor).
std::vector<float> ggml_yarn_angles(int p, int d, float base, float factor, int n_ctx_orig, float beta_fast, float beta_slow) {
  auto corr_dim = [&](float n_rot) { return d * logf(n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * logf(base)); };
  const float low = std::max(0.0f, floorf(corr_dim(beta_fast)));
  const float high = std::min(static_cast<float>(d - 1), ceilf(corr_dim(beta_slow)));
  const float theta_scale = powf(base, -2.0f / d), freq_scale = 1.0f / factor;
  std::vector<float> angles;
  float theta_extrap = static_cast<float>(p);
  for (int i0 = 0; i0 < d; i0 += 2) {
    const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
    const float ramp_mix = 1 - std::min(1.0f, std::max(0.0f, y));
    const float theta_interp = freq_scale * theta_extrap;
    angles.push_back(theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix);
    theta_extrap *= theta_scale;
  }
  return angles;
}

ModelConfig yarn_config(int head_dim, double base, double factor, int original) {
  ModelConfig c;
  c.head_dim = c.rope_dim = head_dim;
  c.rope_theta = base;
  c.rope_type = "yarn";
  c.rope_factor = factor;
  c.rope_original_max_positions = original;
  return c;
}

}  // namespace

RUNNER_TEST(yarn, frequencies_equal_llama_cpp_formula) {
  // gpt-oss-20b's (head_dim 64, base 150000, ×32 over 4096) and a small file's shape.
  const struct {
    int d;
    double base, factor;
    int original;
  } cases[] = {{64, 150000, 32, 4096}, {16, 150000, 32, 4096}, {128, 10000, 4, 2048}};
  for (const auto& k : cases) {
    const std::vector<double> inv = rope_inverse_frequencies(yarn_config(k.d, k.base, k.factor, k.original));
    CHECK_EQ(inv.size(), static_cast<size_t>(k.d / 2));
    for (int p : {1, 7, 100, 4095, 20000, 131071}) {
      const std::vector<float> want = ggml_yarn_angles(p, k.d, static_cast<float>(k.base), static_cast<float>(k.factor), k.original, 32, 1);
      for (int i = 0; i < k.d / 2; i++) {
        const double got = p * inv[i];
        // ggml's angle accumulates float rounding over i multiplications: ~i·6e-8 relative.
        CHECK_MSG(std::fabs(got - want[i]) <= 1e-6 * (i + 1) * std::fabs(want[i]) + 1e-7,
                  "d " << k.d << " position " << p << " frequency " << i << ": ctxr " << got << ", ggml " << want[i]);
      }
    }
  }
}

RUNNER_TEST(yarn, ramp_keeps_fast_frequencies_and_interpolates_slow_ones) {
  // gpt-oss-20b: the corrections dims are floor(8.09) = 8 and ceil(17.4) = 18, so frequencies
  // 0..8 are kept, 18.. divided by 32, those between mixed — not vacuous: neither the plain
  // table nor linear scaling.
  const std::vector<double> inv = rope_inverse_frequencies(yarn_config(64, 150000, 32, 4096));
  for (int i = 0; i < 32; i++) {
    const double plain = 1.0 / std::pow(150000.0, 2.0 * i / 64);
    if (i <= 8) CHECK_NEAR(inv[i], plain, plain * 1e-12);
    else if (i >= 18) CHECK_NEAR(inv[i], plain / 32, plain * 1e-12);
    else CHECK_MSG(inv[i] < plain * 0.99 && inv[i] > plain / 32 * 1.01, "frequency " << i << " is not between its plain and interpolated values");
  }
  // Factor 1: nothing changes.
  const std::vector<double> same = rope_inverse_frequencies(yarn_config(64, 150000, 1, 4096));
  for (int i = 0; i < 32; i++) CHECK_NEAR(same[i], 1.0 / std::pow(150000.0, 2.0 * i / 64), 1e-15);
}

RUNNER_TEST(yarn, attention_factor_is_llama_cpp_mscale) {
  // llama.cpp: cparams.yarn_attn_factor = mscale(factor) / (1 + 0.1 ln factor), and ggml then
  // multiplies cos and sin by it and by 1 + 0.1 ln factor again: net 1 + 0.1 ln factor.
  CHECK_NEAR(yarn_attention_factor(32), 1 + 0.1 * std::log(32.0), 1e-15);
  CHECK_NEAR(yarn_attention_factor(1), 1, 0);
  CHECK_NEAR(yarn_attention_factor(0.5), 1, 0);
}
