#include "cpu/quant_unpack_superblock.h"

#include <stdexcept>

#include "halfs.h"
#include "quant.h"
#include "quant_superblock.h"

namespace ctxr {

bool superblock_gemm_format(DType t, SuperblockGemmFormat& f) {
  switch (t) {
    case DType::Q2_K: f = {16, 0, true}; return true;
    case DType::Q3_K: f = {16, 4, false}; return true;
    case DType::Q5_K: f = {32, 0, true}; return true;
    case DType::IQ4_XS: f = {32, 128, false}; return true;
    default: return false;
  }
}

void unpack_superblock_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o) {
  for (int b = 0; b < k / 256; b++, u += 256) {
    switch (t) {
      case DType::Q2_K: {
        const auto& blk = reinterpret_cast<const BlockQ2_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int g = 0; g < 16; g++) {
          s[16 * b + g] = d * (blk.scales[g] & 15);
          o[16 * b + g] = -dmin * (blk.scales[g] >> 4);
        }
        for (int e = 0; e < 256; e++) u[e] = blk.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3;
        break;
      }
      case DType::Q3_K: {
        const auto& blk = reinterpret_cast<const BlockQ3_K*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[16];
        q3k_scales(blk.scales, sc);
        for (int g = 0; g < 16; g++) s[16 * b + g] = d * sc[g];
        for (int e = 0; e < 256; e++) {
          const int h = e / 128, j = e % 128 / 32, l = e % 32;
          u[e] = static_cast<uint8_t>((blk.qs[32 * h + l] >> (2 * j) & 3) | (blk.hmask[l] >> (4 * h + j) & 1) << 2);
        }
        break;
      }
      case DType::Q5_K: {
        const auto& blk = reinterpret_cast<const BlockQ5_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int g = 0; g < 8; g++) {
          int sc, m;
          q4k_scale_min(blk.scales, g, sc, m);
          s[8 * b + g] = d * sc;
          o[8 * b + g] = -dmin * m;
        }
        for (int e = 0; e < 256; e++) {
          const int c = e / 64, n = e % 64 / 32, l = e % 32;
          u[e] = static_cast<uint8_t>((blk.qs[32 * c + l] >> (4 * n) & 15) | (blk.qh[l] >> (2 * c + n) & 1) << 4);
        }
        break;
      }
      case DType::IQ4_XS: {
        const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[8];
        iq4xs_scales(blk, sc);
        for (int g = 0; g < 8; g++) s[8 * b + g] = d * sc[g];
        for (int e = 0; e < 256; e++) u[e] = static_cast<uint8_t>(kIq4nlValues[blk.qs[16 * (e / 32) + e % 16] >> (4 * (e % 32 / 16)) & 15] + 128);
        break;
      }
      default: throw std::invalid_argument("not a super-block dtype");
    }
  }
}

}  // namespace ctxr
