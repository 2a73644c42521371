// Inputs shared by the CPU kernel tests: random activations and the instruction sets to run.
#pragma once
#include <random>
#include <vector>

#include "cpu/quant_dot.h"

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

}  // namespace ctxr_test
