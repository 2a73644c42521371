#include "quant_superblock.h"

#include <stdexcept>

#include "halfs.h"
#include "quant.h"

namespace ctxr {

bool dtype_is_superblock(DType t) { return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q5_K || t == DType::IQ4_XS; }

size_t superblock_bytes(DType t) {
  switch (t) {
    case DType::Q2_K: return sizeof(BlockQ2_K);
    case DType::Q3_K: return sizeof(BlockQ3_K);
    case DType::Q5_K: return sizeof(BlockQ5_K);
    case DType::IQ4_XS: return sizeof(BlockIQ4_XS);
    default: return 0;
  }
}

void dequantize_superblock_row(DType t, const void* row, int cols, float* out) {
  if (cols % 256 != 0) throw std::invalid_argument("a super-block row must hold whole 256-element blocks");
  for (int b = 0; b < cols / 256; b++) {
    float* y = out + 256 * b;
    switch (t) {
      case DType::Q2_K: {
        const auto& blk = static_cast<const BlockQ2_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int e = 0; e < 256; e++) {
          const int h = e / 128, j = e % 128 / 32, l = e % 32, s = blk.scales[e / 16];
          y[e] = d * (s & 15) * (blk.qs[32 * h + l] >> (2 * j) & 3) - dmin * (s >> 4);
        }
        break;
      }
      case DType::Q3_K: {
        const auto& blk = static_cast<const BlockQ3_K*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[16];
        q3k_scales(blk.scales, sc);
        for (int e = 0; e < 256; e++) {
          const int h = e / 128, j = e % 128 / 32, l = e % 32;
          const int q = (blk.qs[32 * h + l] >> (2 * j) & 3) | (blk.hmask[l] >> (4 * h + j) & 1) << 2;
          y[e] = d * sc[e / 16] * (q - 4);
        }
        break;
      }
      case DType::Q5_K: {
        const auto& blk = static_cast<const BlockQ5_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int e = 0; e < 256; e++) {
          const int c = e / 64, n = e % 64 / 32, l = e % 32;
          int sc, m;
          q4k_scale_min(blk.scales, e / 32, sc, m);
          const int q = (blk.qs[32 * c + l] >> (4 * n) & 15) | (blk.qh[l] >> (2 * c + n) & 1) << 4;
          y[e] = d * sc * q - dmin * m;
        }
        break;
      }
      case DType::IQ4_XS: {
        const auto& blk = static_cast<const BlockIQ4_XS*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[8];
        iq4xs_scales(blk, sc);
        for (int e = 0; e < 256; e++) {
          const int k = e / 32, n = e % 32 / 16, l = e % 16;
          y[e] = d * sc[k] * kIq4nlValues[blk.qs[16 * k + l] >> (4 * n) & 15];
        }
        break;
      }
      default: throw std::invalid_argument("not a super-block dtype");
    }
  }
}

}  // namespace ctxr
