// Up to quant_dot_max_acts() rows of quantized activations, `stride` blocks apart, with their
// contiguous side data (quant_dot.h: ad[b] = d_a of block b, adsum16[2b + h] = d_a·Σa of half h):
// the operand of the decode kernels that dot one weight row with several activation rows.
#pragma once
#include <immintrin.h>

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

// Decode reads each weight row from memory once, front to back. On top of the hardware
// prefetcher, asking for the bytes 2 KiB ahead of the block being read gained 5-7% of a
// 151,936 x 2,048 matrix-vector product at 2 threads (Q4_K 22.4 -> 24.1 GB/s, Q6_K 26.4 ->
// 28.3, medians of 10; 1 to 8 KiB measured; Q5_K +16%). Q8_0, at the memory's bandwidth without it,
// gained nothing. Prefetches past the matrix are harmless.
constexpr size_t kDecodePrefetchBytes = 2048;
inline void prefetch_ahead(const void* block, size_t bytes) {
  for (size_t at = 0; at < bytes; at += 64) _mm_prefetch(static_cast<const char*>(block) + kDecodePrefetchBytes + at, _MM_HINT_T0);
}

}  // namespace ctxr
