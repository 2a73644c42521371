// Q2_K, Q3_K, Q5_K and IQ4_XS rows unpacked for the int8 GEMM (quant_gemm.h) as w = s·(u − z) + o
// per group: unsigned bytes u[k] in element order, one scale s per group and (Q2_K, Q5_K) one
// offset o per group.
//   Q2_K   group 16: u = 2-bit q,       z = 0,   s = d·sc,        o = −dmin·m
//   Q3_K   group 16: u = 3-bit q,       z = 4,   s = d·(sc − 32)
//   Q5_K   group 32: u = 5-bit q,       z = 0,   s = d·sc,        o = −dmin·m
//   IQ4_XS group 32: u = level + 128,   z = 128, s = d·(ls − 32)  (u up to 241: VNNI only)
#pragma once
#include <cstdint>

#include "backend.h"

namespace ctxr {

struct SuperblockGemmFormat {
  int group, zero;
  bool offset;
};

// False for types other than the four.
bool superblock_gemm_format(DType t, SuperblockGemmFormat& f);
void unpack_superblock_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o);

}  // namespace ctxr
