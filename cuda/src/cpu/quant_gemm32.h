// The int8 GEMM's (quant_gemm.h) view of the 32-element block formats of quant_blocks32.h:
// every one is w = s·(u − z) + o per block, with unsigned bytes u:
//   Q4_1 u = q, z = 0, o = m;  Q5_0 u = q, z = 16;  Q5_1 u = q, z = 0, o = m;
//   IQ4_NL u = v + 128, z = 128;  MXFP4 u = v + 12, z = 12 (v: the table value).
#pragma once
#include <cstdint>

#include "backend.h"

namespace ctxr {

// Whether t is of the family; then its z and whether it has the per-block offset o.
bool gemm32_format(DType t, int& zero, bool& offset);
// One row of k elements to u[k], s[k / 32] and (where the format has it) o[k / 32].
void gemm32_unpack_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o);

}  // namespace ctxr
