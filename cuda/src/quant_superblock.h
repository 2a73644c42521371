// The 256-element super-block formats beyond Q4_K/Q6_K, as GGUF stores them (llama.cpp's
// ggml-common.h block_q2_K, block_q3_K, block_q5_K, block_iq4_xs), and their scalar reference
// dequantization. In each, element e of a super-block belongs to the 16- or 32-element
// sub-block e/16 or e/32 (scales below are per sub-block):
//
//   Q2_K  84 B: u8 scales[16] (low nibble scale, high nibble min), u8 qs[64], f16 d, f16 dmin.
//               e = 128h + 32j + l:  q = qs[32h + l] >> 2j & 3;  x = d·sc·q − dmin·m (per 16)
//   Q3_K 110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 six-bit scales, stored + 32), f16 d.
//               e = 128h + 32j + l:  q = (qs[32h + l] >> 2j & 3) | (hmask[l] >> (4h + j) & 1) << 2
//               x = d·(sc − 32)·(q − 4) (per 16)
//   Q5_K 176 B: f16 d, f16 dmin, u8 scales[12] (as Q4_K), u8 qh[32], u8 qs[128].
//               e = 64c + 32n + l:  q = (qs[32c + l] >> 4n & 15) | (qh[l] >> (2c + n) & 1) << 4
//               x = d·sc·q − dmin·m (per 32)
//   IQ4_XS 136 B: f16 d, u16 scales_h (2 high bits a sub-block), u8 scales_l[4] (4 low bits),
//               u8 qs[128].  e = 32k + 16n + l:  x = d·(ls − 32)·kIq4nlValues[qs[16k + l] >> 4n & 15]
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend.h"
#include "quant_blocks32.h"  // kIq4nlValues: IQ4_XS shares IQ4_NL's levels

namespace ctxr {

struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ5_K) == 176 && sizeof(BlockIQ4_XS) == 136,
              "ggml block sizes");

bool dtype_is_superblock(DType t);  // Q2_K, Q3_K, Q5_K, IQ4_XS
size_t superblock_bytes(DType t);   // 0 for other types

// Q3_K's sixteen signed scales (sc − 32, in [−32, 31]), four at a time as bytes of 32-bit words:
// scale i has its low nibble in byte i % 8 (bits 4·(i / 8)..) and its two high bits in byte
// 8 + i % 4 (bits 2·(i / 4)..). Inline: the decode kernels call it per super-block and row.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t words[4] = {(u[0] & 0x0f0f0f0f) | (u[2] & 0x03030303) << 4, (u[1] & 0x0f0f0f0f) | (u[2] >> 2 & 0x03030303) << 4,
                             (u[0] >> 4 & 0x0f0f0f0f) | (u[2] >> 4 & 0x03030303) << 4, (u[1] >> 4 & 0x0f0f0f0f) | (u[2] >> 6 & 0x03030303) << 4};
  for (int w = 0; w < 4; w++)
    for (int b = 0; b < 4; b++) out[4 * w + b] = static_cast<int8_t>(static_cast<int>(words[w] >> (8 * b) & 63) - 32);
}

// IQ4_XS's eight signed scales (ls − 32): sub-block k's low nibble is bits 4k.. of scales_l (as
// one 32-bit word), its two high bits are bits 2k.. of scales_h.
inline void iq4xs_scales(const BlockIQ4_XS& blk, int8_t out[8]) {
  uint32_t low;
  std::memcpy(&low, blk.scales_l, 4);
  for (int k = 0; k < 8; k++) out[k] = static_cast<int8_t>(static_cast<int>((low >> (4 * k) & 15) | (blk.scales_h >> (2 * k) & 3) << 4) - 32);
}

// One row of `cols` (a multiple of 256) elements of t to float32: the reference.
void dequantize_superblock_row(DType t, const void* row, int cols, float* out);

}  // namespace ctxr
