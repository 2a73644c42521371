// The CPU backend's Gemma 3 ops (backend.h: gelu_tanh_mul, scale), OpenMP over rows.
#pragma once
#include <cstddef>

namespace ctxr {

void cpu_gelu_tanh_mul(const float* x, int n, int ff, float* out, int threads);
void cpu_scale(float* x, float s, size_t n, int threads);

}  // namespace ctxr
