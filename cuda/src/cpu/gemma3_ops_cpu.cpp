#include "gemma3_ops_cpu.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace ctxr {

namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;

// exp(x) for 8 floats, x clamped to [-88, 88] (Cephes polynomial, ~1 ulp).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.0f)), _mm256_set1_ps(88.0f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
  return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
}

// gelu_tanh(g) = 0.5·g·(1 + tanh(u)) = g · sigmoid(2u) = g / (1 + exp(-2u)), u = √(2/π)·(g + 0.044715·g³):
// one exp and one division, no tanh (libm's tanhf was a tenth of a Gemma 3 prefill).
inline __m256 gelu_tanh8(__m256 g) {
  const __m256 g2 = _mm256_mul_ps(g, g);
  const __m256 u = _mm256_mul_ps(_mm256_mul_ps(g, _mm256_set1_ps(-2.0f * kSqrt2OverPi)), _mm256_fmadd_ps(g2, _mm256_set1_ps(kCubic), _mm256_set1_ps(1.0f)));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(u)));
}

inline float gelu_tanh(float g) { return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCubic * g * g))); }

}  // namespace

void cpu_gelu_tanh_mul(const float* x, int n, int ff, float* out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (static_cast<size_t>(n) * ff > 65536)
  for (int i = 0; i < n; i++) {
    const float* gate = x + static_cast<size_t>(i) * 2 * ff;
    const float* up = gate + ff;
    float* o = out + static_cast<size_t>(i) * ff;
    int j = 0;
    for (; j + 8 <= ff; j += 8) _mm256_storeu_ps(o + j, _mm256_mul_ps(gelu_tanh8(_mm256_loadu_ps(gate + j)), _mm256_loadu_ps(up + j)));
    for (; j < ff; j++) o[j] = gelu_tanh(gate[j]) * up[j];
  }
}

void cpu_scale(float* x, float s, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

}  // namespace ctxr
