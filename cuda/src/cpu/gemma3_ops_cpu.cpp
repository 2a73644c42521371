#include "gemma3_ops_cpu.h"

#include <cmath>
#include <cstdint>

namespace ctxr {

void cpu_gelu_tanh_mul(const float* x, int n, int ff, float* out, int threads) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;
#pragma omp parallel for num_threads(threads) schedule(static) if (static_cast<size_t>(n) * ff > 65536)
  for (int i = 0; i < n; i++) {
    const float* gate = x + static_cast<size_t>(i) * 2 * ff;
    const float* up = gate + ff;
    float* o = out + static_cast<size_t>(i) * ff;
    for (int j = 0; j < ff; j++) {
      const float g = gate[j];
      o[j] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCubic * g * g))) * up[j];
    }
  }
}

void cpu_scale(float* x, float s, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace ctxr
