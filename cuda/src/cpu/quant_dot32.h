// Dot products of the 32-element block formats of quant_blocks32.h (Q4_1, Q5_0, Q5_1, IQ4_NL,
// MXFP4) with quantized activations (quant.h ActBlock), as quant_dot.h's kernels: integer
// products per block, f32 accumulation. The AVX2 and AVX-512 VNNI variants are reached through
// quant_dot(t, isa); the scalar reference is what the tests hold them to.
//   Q4_1, Q5_1: unsigned q × a, plus m·d_a·Σa (the activation sum, llama.cpp's Q8_1 pairing);
//   Q5_0: unsigned q × a − 16·Σa (AVX2), |q − 16| × ±a (AVX-512);
//   IQ4_NL, MXFP4: the nibble looked up in the 16-entry table by a byte shuffle, |v| × ±a.
#pragma once
#include "cpu/quant_dot.h"

namespace ctxr {

QuantDotFn quant_dot32_avx2(DType t);    // null for a type outside the family
QuantDotFn quant_dot32_avx512(DType t);  // call only where cpu_has_avx512_vnni()
// Decode's activation-group kernels (quant_dot.h) of these formats and Q8_0, Q4_0.
QuantDotActsFn quant_dot32_acts_avx512(DType t, int n);

// Σ over blocks of (scale·Σ v·q + offset·Σq)·d_a, the integer sums exact, in double.
float quant_dot32_reference(DType t, const void* w, const ActBlock* a, int blocks32);

}  // namespace ctxr
