// quant.h's activation quantizers for an instruction set: AVX-512 where `isa` is Avx512Vnni
// (call it only where the CPU has it), the scalar ones otherwise; bitwise the same results.
#pragma once
#include "cpu/quant_dot.h"
#include "quant.h"

namespace ctxr {

void quantize_activations(const float* x, int cols, ActBlock* out, CpuIsa isa);
void quantize_activations_256(const float* x, int cols, ActSuperBlock* out, CpuIsa isa);

}  // namespace ctxr
