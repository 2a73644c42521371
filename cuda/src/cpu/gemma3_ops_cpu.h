// The CPU backend's Gemma 3 ops (backend.h: rms_norm_heads, gelu_tanh_mul, scale), OpenMP over rows.
#pragma once
#include <cstddef>

namespace ctxr {

void cpu_rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w, float eps, int threads);
void cpu_gelu_tanh_mul(const float* x, int n, int ff, float* out, int threads);
void cpu_scale(float* x, float s, size_t n, int threads);

}  // namespace ctxr
