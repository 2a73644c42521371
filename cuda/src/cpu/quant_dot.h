// Dot products of one quantized weight row with one row of quantized activations (quant.h),
// integer products per block and f32 accumulation, one implementation per instruction set,
// picked at run time by CPUID: AVX2 (maddubs) everywhere the runner runs, AVX-512 VNNI
// (512-bit dpbusd, two 32-element blocks per instruction) where the CPU has it.
// CTXR_CPU_ISA=avx2 forces the AVX2 kernels.
#pragma once
#include "backend.h"
#include "quant.h"

namespace ctxr {

enum class CpuIsa { Avx2, Avx512Vnni };

CpuIsa detected_cpu_isa();  // the best the CPU has, unless CTXR_CPU_ISA says avx2
bool cpu_has_avx512_vnni();
const char* cpu_isa_name(CpuIsa isa);

// Σ over `blocks32` blocks of 32 elements of w·a (w: a row of `t` blocks, a: activations).
using QuantDotFn = float (*)(const void* w, const ActBlock* a, int blocks32);
QuantDotFn quant_dot_avx2(DType t);
QuantDotFn quant_dot_avx512(DType t);  // call only where cpu_has_avx512_vnni()
QuantDotFn quant_dot(DType t, CpuIsa isa);
// Q2_K, Q3_K, Q5_K and IQ4_XS (quant_dot_superblock_*.cpp; null for other types).
QuantDotFn quant_dot_superblock_avx2(DType t);
QuantDotFn quant_dot_superblock_avx512(DType t);

// The same with the activation row's per-block f32 side data laid out contiguously (so that a
// 256-element super-block's scales are one load): ad[b] = a[b].d, adsum16[2b + h] =
// a[b].d·a[b].sum[h]. AVX-512 VNNI Q4_K, Q6_K, Q2_K, Q3_K, Q5_K and IQ4_XS (null otherwise):
// their decode kernels, with the weights' scales, mins and offsets applied as vectors.
using QuantDotAuxFn = float (*)(const void* w, const ActBlock* a, const float* ad, const float* adsum16, int blocks32);
QuantDotAuxFn quant_dot_aux_avx512(DType t);
QuantDotAuxFn quant_dot_superblock_aux_avx512(DType t);  // Q2_K, Q3_K, Q5_K, IQ4_XS

// quant_dot_rows() rows at once: out[r] = the dot of the row at w + r·row_bytes with `a`, bitwise
// what the one-row kernel gives (the aux one where there is one; ad and adsum16 as there, unused
// by Q8_0). AVX-512 VNNI Q8_0, Q4_K, Q6_K, Q2_K, Q3_K, Q5_K and IQ4_XS (null otherwise): decode's
// matrix-vector products.
using QuantDotRowsFn = void (*)(const uint8_t* w, size_t row_bytes, const ActBlock* a, const float* ad, const float* adsum16, int blocks32,
                                float* out);
constexpr int quant_dot_rows() { return 4; }
QuantDotRowsFn quant_dot_rows_avx512(DType t);
QuantDotRowsFn quant_dot_superblock_rows_avx512(DType t);  // Q2_K, Q3_K, Q5_K, IQ4_XS

}  // namespace ctxr
