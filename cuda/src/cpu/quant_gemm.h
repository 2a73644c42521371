// Register-blocked int8 GEMM for quantized weight matrices (prefill-sized n): y = x · Wᵀ (+ bias).
//
// Weight rows are unpacked from their blocks once per tile of 64 rows into panels of 16 rows:
// unsigned bytes laid out [k/4][16 rows][4] (so one 512-bit load holds 4 k-values of 16 rows,
// the operand of VNNI dpbusd), one f32 scale per row and group (32 elements, 16 for Q6_K), and
// for Q4_K one f32 offset (−dmin·min) per row and group. Every format is w = s·(u − z) (+ o):
//   Q8_0 u = q + 128, z = 128;  Q4_0 u = nibble, z = 8;  Q4_K u = nibble, z = 0, o = −dmin·m;
//   Q6_K u = six bits, z = 32, groups of 16; Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4: quant_gemm32.h;
//   Q2_K, Q3_K, Q5_K, IQ4_XS: quant_unpack_superblock.h (Q2_K's offsets per group of 16).
// Activations are quantized once per row (quant.h ActBlock, per 32); the micro-kernel keeps MR
// activation rows × 16 weight rows in int32 for one group (initialized to −z·Σa of the group),
// then adds int32→f32 × s·d_a (and the group's offset × d_a·Σa) into f32 accumulators.
// AVX-512 VNNI: MR = 8 (dpbusd); AVX2: MR = 2 (maddubs; the formats with z = 128, Q8_0, IQ4_NL
// and IQ4_XS, whose u + 128 could saturate maddubs, are taken as signed values: |v| × a with
// v's sign, no −z·Σa).
#pragma once
#include "cpu/quant_dot.h"
#include "cpu/quant_linear.h"

namespace ctxr {

// Whether quant_gemm() takes every part of `w` on `isa`.
bool quant_gemm_supports(const QuantMatrix& w, CpuIsa isa);
void quant_gemm(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa);

}  // namespace ctxr
