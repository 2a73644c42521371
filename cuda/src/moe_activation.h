// The experts' gated activations over one row (moe_config.h's ExpertActivation): gate and up are
// the two halves of an expert's fused gate|up output.
#pragma once
#include <algorithm>
#include <cmath>

#include "moe_config.h"

namespace ctxr {

inline void expert_activation_row(const float* gate, const float* up, int ff, const MoeConfig& c, float* out) {
  if (c.activation == ExpertActivation::SwiGLU) {
    for (int j = 0; j < ff; j++) out[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
    return;
  }
  // gpt-oss (llama.cpp's swiglu_oai): the gate is clamped above only, up on both sides, and up + 1.
  const float limit = c.swiglu_limit, alpha = c.swiglu_alpha;
  for (int j = 0; j < ff; j++) {
    const float g = std::min(gate[j], limit);
    const float u = std::clamp(up[j], -limit, limit);
    out[j] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

}  // namespace ctxr
