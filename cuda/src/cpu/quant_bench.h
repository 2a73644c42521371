// `ctxr-runner --bench-linear TYPE M N K`: the CPU backend's linear() on a random N×K weight in
// TYPE (f32, f16, q8_0, q4_0, q4_k, q6_k) and M activation rows; prints one JSON line with the
// median time, GFLOP/s (2·M·N·K) and GB/s of weight bytes as stored. CTXR_CPU_ISA=avx2 and
// CTXR_QUANT_PATH=int8|f32 pick the kernels.
#pragma once
#include <string>

namespace ctxr {

std::string bench_linear_json(const std::string& type, int m, int n, int k, int threads, int repeat);

}  // namespace ctxr
