// The CPU backend's mixture-of-experts ops (backend.h: expert_activation, scatter_add_weighted).
#pragma once
#include <cstdint>

#include "moe_config.h"

namespace ctxr {

void cpu_expert_activation(const float* x, int n, int ff, const MoeConfig& c, float* out, int threads);
void cpu_scatter_add_weighted(const float* src, const int32_t* rows, const float* weights, int n, int d, float* dst, int threads);

}  // namespace ctxr
