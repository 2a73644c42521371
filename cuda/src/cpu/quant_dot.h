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

// Decode's kernels: one weight row against n activation rows (1 ≤ n ≤ quant_dot_max_acts(), the
// streams of one decode step), each row `stride` blocks after the last in a and ad (2·stride in
// adsum16), with the per-block f32 side data laid out contiguously so that a 256-element
// super-block's scales are one load: ad[b] = a[b].d, adsum16[2b + h] = a[b].d·a[b].sum[h].
// out[i] = the dot with activation row i, bitwise what n = 1 gives for that row. AVX-512 VNNI
// the 32-element types (null otherwise).
using QuantDotActsFn = void (*)(const void* w, const ActBlock* a, const float* ad, const float* adsum16, int blocks32, size_t stride, float* out);
constexpr int quant_dot_max_acts() { return 4; }
QuantDotActsFn quant_dot_acts_avx512(DType t, int n);

// The same against activations grouped four blocks at a time (quant_act_groups.h), each row
// `group_stride` groups after the last: AVX-512 VNNI + VBMI MXFP4 (null otherwise, and where the
// CPU lacks VBMI). The groups are built with quant_dot_groups_offset(t).
struct ActGroup4;
using QuantDotGroupsFn = void (*)(const void* w, const ActGroup4* g, size_t group_stride, int blocks32, float* out);
QuantDotGroupsFn quant_dot_groups_avx512(DType t, int n);
int quant_dot_groups_offset(DType t);
bool cpu_has_avx512_vbmi();

// The same against activations quantized per 256 elements (quant.h), `superblocks` of them a row,
// each row `stride` super-blocks after the last: AVX-512 VNNI Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
// IQ4_XS (null otherwise; quant_dot_acts_avx512 has none for these).
using QuantDotSuperActsFn = void (*)(const void* w, const ActSuperBlock* a, int superblocks, size_t stride, float* out);
QuantDotSuperActsFn quant_dot_superacts_avx512(DType t, int n);

}  // namespace ctxr
