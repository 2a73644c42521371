// Single-precision GEMM for the CPU backend: C[m][n] = A[m][k] · Bᵀ (+ bias), where B is a
// weight matrix stored row-major as [n][k] (the safetensors layout) and pre-packed once.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ctxr {

struct PackedB;  // B[n][k] rearranged for the micro-kernel

PackedB* pack_b(const float* b, int n, int k);
void free_packed_b(PackedB* p);
int packed_b_rows(const PackedB* p);  // n
int packed_b_cols(const PackedB* p);  // k

// C[m][n] = A[m][k] · Bᵀ + bias (bias may be null); A and C contiguous row-major. Parallel
// over the calling OpenMP team size `threads` (≤ 0: omp_get_max_threads()).
void sgemm_packed(const float* a, int m, const PackedB* b, const float* bias, float* c, int threads);

// The same with B[n][k] in IEEE half (or bfloat16 where bf16) read where it is, nothing packed
// ahead: each 16-row × k-block micro-panel of B is widened into a per-thread buffer (16 KB) just
// before the micro-kernel reads it. C rows have stride ldc (≥ n: B may be a row range of a wider
// fused matrix).
void sgemm_half(const float* a, int m, const uint16_t* b, bool bf16, int n, int k, const float* bias, float* c, size_t ldc, int threads);

}  // namespace ctxr
