// Inputs shared by the CPU kernel tests: random activations and the instruction sets to run.
#pragma once
#include <random>
#include <vector>

#include "cpu/quant_dot.h"
#include "cpu/quant_linear.h"
#include "quant.h"

namespace ctxr_test {

inline std::vector<float> random_vector(size_t n, std::mt19937& rng, float spread = 1.f) {
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// AVX2 always (the build's baseline), AVX-512 VNNI where this CPU has it.
inline std::vector<ctxr::CpuIsa> isas() {
  std::vector<ctxr::CpuIsa> v = {ctxr::CpuIsa::Avx2};
  if (ctxr::cpu_has_avx512_vnni()) v.push_back(ctxr::CpuIsa::Avx512Vnni);
  return v;
}

// y = x·mᵀ with activations quantized per 32 and one row dot product per (weight row, activation
// row): the reference the int8 GEMM agrees with up to float summation order (decode's kernels on
// AVX-512 take some types' activations per 256 instead).
inline void per32_row_dots(const ctxr::QuantMatrix& m, const float* x, int n, ctxr::CpuIsa isa, float* y) {
  const int nb = m.cols / 32;
  std::vector<ctxr::ActBlock> a(static_cast<size_t>(nb));
  for (int i = 0; i < n; i++) {
    ctxr::quantize_activations(x + static_cast<size_t>(i) * m.cols, m.cols, a.data());
    for (int r = 0; r < m.rows; r++) {
      const ctxr::QuantRows& p = m.part_of(r);
      y[static_cast<size_t>(i) * m.rows + r] = ctxr::quant_dot(p.dtype, isa)(p.data + static_cast<size_t>(r - p.first_row) * p.row_bytes, a.data(), nb);
    }
  }
}

}  // namespace ctxr_test
