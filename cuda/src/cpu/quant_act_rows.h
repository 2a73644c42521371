// Up to quant_dot_max_acts() rows of quantized activations, `stride` blocks apart, with their
// contiguous side data (quant_dot.h: ad[b] = d_a of block b, adsum16[2b + h] = d_a·Σa of half h):
// the operand of the decode kernels that dot one weight row with several activation rows.
#pragma once
#include <cstddef>

#include "quant.h"

namespace ctxr {

struct ActRows {
  const ActBlock* a;
  const float* ad;
  const float* adsum16;
  size_t stride;
  const ActBlock* blocks(int i) const { return a + i * stride; }
  const float* d(int i) const { return ad + i * stride; }
  const float* sums(int i) const { return adsum16 + 2 * i * stride; }
};

}  // namespace ctxr
