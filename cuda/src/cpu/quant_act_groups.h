// Activations laid out for the decode kernels that unpack four 4-bit weight blocks at a time
// into two 512-bit registers (quant_dot_groups_avx512.cpp): 128 activations, four 32-element
// blocks, as the weight nibbles fall — the low nibbles of the four blocks' qs are elements 0..15
// of each, the high nibbles elements 16..31. The int32 lane k of a dpbusd over both registers sums
// elements 4(k%4)..4(k%4)+3 and 16+4(k%4)..+3 of block k/4: its scale and its correction are per lane.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant.h"

namespace ctxr {

struct alignas(64) ActGroup4 {
  int8_t lo[64];  // lo[16j + i] = element i of block j
  int8_t hi[64];  // hi[16j + i] = element 16 + i of block j
  float d[16];    // d_a of lane k's block
  // −offset · Σ a over lane k's eight elements: the weights are looked up as v + offset (unsigned
  // for dpbusd), and this term, the accumulator's start, takes the offset back out.
  int32_t offset_sum[16];
};

// The ⌈blocks32 / 4⌉ groups of a row of blocks32 blocks; a last group of fewer than four blocks
// has zeros in the place of the missing ones (the kernels read zeros for their weights too).
inline int activation_groups4(int blocks32) { return (blocks32 + 3) / 4; }
inline void group_activations4(const ActBlock* blocks, int blocks32, int offset, ActGroup4* out) {
  for (int g = 0; g < activation_groups4(blocks32); g++) {
    ActGroup4& o = out[g];
    o = ActGroup4{};
    for (int j = 0; j < 4 && 4 * g + j < blocks32; j++) {
      const ActBlock& b = blocks[4 * g + j];
      for (int i = 0; i < 16; i++) o.lo[16 * j + i] = b.q[i], o.hi[16 * j + i] = b.q[16 + i];
      for (int l = 0; l < 4; l++) {
        int sum = 0;
        for (int t = 0; t < 4; t++) sum += b.q[4 * l + t] + b.q[16 + 4 * l + t];
        o.d[4 * j + l] = b.d;
        o.offset_sum[4 * j + l] = -offset * sum;
      }
    }
  }
}

}  // namespace ctxr
