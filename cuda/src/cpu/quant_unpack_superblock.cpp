#include "cpu/quant_unpack_superblock.h"

#include <immintrin.h>

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

namespace {

// The values are unpacked 32 bytes at a time with AVX2 (the build's baseline), as the decode
// kernels unpack them; unpacking is a large share of a prefill-sized GEMM's work.
inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Bit `bit` of each byte of v, moved to bit `to` (bits above it cleared).
inline __m256i bit_to(__m256i v, int bit, int to) {
  const __m256i one = _mm256_and_si256(_mm256_srli_epi16(v, bit), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(one, to);
}

}  // namespace

void unpack_superblock_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o) {
  const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15);
  for (int b = 0; b < k / 256; b++, u += 256) {
    switch (t) {
      case DType::Q2_K: {
        const auto& blk = reinterpret_cast<const BlockQ2_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        for (int g = 0; g < 16; g++) {
          s[16 * b + g] = d * (blk.scales[g] & 15);
          o[16 * b + g] = -dmin * (blk.scales[g] >> 4);
        }
        for (int h = 0; h < 2; h++) {
          const __m256i raw = load(blk.qs + 32 * h);
          for (int j = 0; j < 4; j++) store(u + 128 * h + 32 * j, _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2));
        }
        break;
      }
      case DType::Q3_K: {
        const auto& blk = reinterpret_cast<const BlockQ3_K*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[16];
        q3k_scales(blk.scales, sc);
        for (int g = 0; g < 16; g++) s[16 * b + g] = d * sc[g];
        const __m256i hm = load(blk.hmask);
        for (int h = 0; h < 2; h++) {
          const __m256i raw = load(blk.qs + 32 * h);
          for (int j = 0; j < 4; j++)
            store(u + 128 * h + 32 * j, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2), bit_to(hm, 4 * h + j, 2)));
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
        const __m256i hb = load(blk.qh);
        for (int c = 0; c < 4; c++) {
          const __m256i raw = load(blk.qs + 32 * c);
          store(u + 64 * c, _mm256_or_si256(_mm256_and_si256(raw, m4), bit_to(hb, 2 * c, 4)));
          store(u + 64 * c + 32, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), bit_to(hb, 2 * c + 1, 4)));
        }
        break;
      }
      case DType::IQ4_XS: {
        const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b];
        const float d = f16_to_f32(blk.d);
        int8_t sc[8];
        iq4xs_scales(blk, sc);
        for (int g = 0; g < 8; g++) s[8 * b + g] = d * sc[g];
        // Per 32 sub-block elements: 16 low nibbles, then 16 high nibbles, each level + 128.
        const __m256i levels = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))), _mm256_set1_epi8(-128));
        for (int p = 0; p < 4; p++) {
          const __m256i raw = load(blk.qs + 32 * p);  // sub-blocks 2p (bytes 0..15) and 2p + 1
          const __m256i lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(raw, m4));
          const __m256i hi = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
          store(u + 64 * p, _mm256_permute2x128_si256(lo, hi, 0x20));
          store(u + 64 * p + 32, _mm256_permute2x128_si256(lo, hi, 0x31));
        }
        break;
      }
      default: throw std::invalid_argument("not a super-block dtype");
    }
  }
}

}  // namespace ctxr
