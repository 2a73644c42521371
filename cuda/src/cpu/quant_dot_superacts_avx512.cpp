// AVX-512 VNNI decode kernels of the K-quants (Q2_K..Q6_K) and IQ4_XS against activations quantized per 256 elements
// (ActSuperBlock, as llama.cpp's Q8_K): one weight row against N activation rows, the weight
// bytes unpacked once, every activation row running exactly what N = 1 runs (bitwise).
//
// With one activation scale per super-block, a super-block's integer products add up in int32:
// u8 weights × s8 activations summed in pairs to int16 (maddubs), times the int16 sub-block
// scales summed into int32 (dpwssd), then one convert and one f32 multiply-add per super-block.
// The per-32 kernels (quant_dot_avx512.cpp) pay a convert, a permute and a multiply-add per 64
// weights; on a 151,936 × 2,048 matrix-vector product that compute, not the memory, was the
// limit (BENCHMARKS.md, issue 29). Bounds: |maddubs| ≤ 2·63·127 = 16,002 (no saturation);
// |dpwssd| per super-block ≤ 16·16,002·128 per lane.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_act_rows.h"
#include "cpu/quant_dot.h"
#include "quant_blocks32.h"
#include "quant_superblock.h"

namespace ctxr {

namespace {

// The int16 lanes that take scale j of an int16 vector: 32 lanes in runs of `run` (16 for Q4_K's
// 32-element sub-blocks, 8 for Q6_K's 16-element ones), starting at scale `first`.
CTXR_AVX512 inline __m512i runs_of(int first, int run) {
  alignas(64) int16_t idx[32];
  for (int l = 0; l < 32; l++) idx[l] = static_cast<int16_t>(first + l / run);
  return _mm512_load_si512(idx);
}

// Bytes 0..31 as they are, bytes 32..63 shifted right by `hi_shift` within 16-bit lanes.
CTXR_AVX512 inline __m512i lane_shifts(int lo_shift, int hi_shift) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(lo_shift))), _mm256_set1_epi16(static_cast<int16_t>(hi_shift)), 1);
}

CTXR_AVX512 inline float hsum256(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// Q3_K's sixteen scales − 32 as int16 (quant_superblock.h's q3k_scales, in registers: bytes
// written one by one and read as a vector would stall the store forwarding every super-block).
CTXR_AVX512 inline __m256i q3k_scales16(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const __m128i bytes = _mm_set_epi32(static_cast<int>((u[1] >> 4 & 0x0f0f0f0f) | (u[2] >> 6 & 0x03030303) << 4), static_cast<int>((u[0] >> 4 & 0x0f0f0f0f) | (u[2] >> 4 & 0x03030303) << 4),
                                      static_cast<int>((u[1] & 0x0f0f0f0f) | (u[2] >> 2 & 0x03030303) << 4), static_cast<int>((u[0] & 0x0f0f0f0f) | (u[2] & 0x03030303) << 4));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(32));
}

// IQ4_XS's eight scales ls − 32 as int16: the low nibbles and high bit pairs deposited into bytes.
CTXR_AVX512 inline __m128i iq4xs_scales16(const BlockIQ4_XS& blk) {
  uint32_t low;
  std::memcpy(&low, blk.scales_l, 4);
  const uint64_t ls = _pdep_u64(low, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(blk.scales_h, 0x3030303030303030ull);
  return _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(ls))), _mm_set1_epi16(32));
}

// Q4_K/Q5_K's eight six-bit scales and mins as bytes (the 12 packed bytes as three words).
inline void q4k_scale_and_min_bytes(const uint8_t* packed, uint64_t& scales, uint64_t& mins) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  scales = static_cast<uint64_t>(sc_hi) << 32 | sc_lo;
  mins = static_cast<uint64_t>(m_hi) << 32 | m_lo;
}

// Σ q over each 32-element sub-block j times min j, as eight int32 lanes: the 16-element sums
// against the mins duplicated in pairs.
CTXR_AVX512 inline __m256i q4k_min_products(const ActSuperBlock& a, __m128i mins_pairs) {
  return _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(a.sum16)), _mm256_cvtepu8_epi16(mins_pairs));
}

// Q4_K and Q5_K: chunk c's 64 values are the low nibbles of qs[32c..32c + 32) (sub-block 2c)
// then their high nibbles (2c + 1), Q5_K's fifth bits in qh (bit 2c, 2c + 1 of byte l).
template <int N, bool kFifthBit, typename Block>
CTXR_AVX512 void q45_k_superacts(const void* wv, const ActSuperBlock* a0, int superblocks, size_t stride, float* out) {
  const auto* w = static_cast<const Block*>(wv);
  const __m512i m4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1), nibble_shift = lane_shifts(0, 4);
  const __m512i spread[4] = {runs_of(0, 16), runs_of(2, 16), runs_of(4, 16), runs_of(6, 16)};
  __m512 acc[N];
  __m256 mins[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps(), mins[i] = _mm256_setzero_ps();
  for (int sb = 0; sb < superblocks; sb++) {
    const Block& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    uint64_t sc_bytes, m_bytes;
    q4k_scale_and_min_bytes(blk.scales, sc_bytes, m_bytes);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc_bytes))));
    const __m128i m_raw = _mm_cvtsi64_si128(static_cast<int64_t>(m_bytes));
    const __m128i mins_pairs = _mm_unpacklo_epi8(m_raw, m_raw);
    __m512i fifth = _mm512_setzero_si512();
    if constexpr (kFifthBit) fifth = _mm512_broadcast_i64x4(avx512::load256(blk.qh));
    __m512i sum[N];
    for (int c = 0; c < 4; c++) {
      __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(avx512::load256(blk.qs + 32 * c)), nibble_shift), m4);
      if constexpr (kFifthBit) q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(fifth, lane_shifts(2 * c, 2 * c + 1)), one), 4));
      const __m512i scale = _mm512_permutexvar_epi16(spread[c], sc16);
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const __m512i p = _mm512_maddubs_epi16(q, _mm512_load_si512(a0[i * stride + sb].q + 64 * c));
        sum[i] = c == 0 ? _mm512_madd_epi16(p, scale) : _mm512_dpwssd_epi32(sum[i], p, scale);
      }
    }
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      const ActSuperBlock& a = a0[i * stride + sb];
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_set1_ps(d * a.d), acc[i]);
      mins[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q4k_min_products(a, mins_pairs)), _mm256_set1_ps(dmin * a.d), mins[i]);
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - hsum256(mins[i]);
}

template <int N>
CTXR_AVX512 void q4_k_superacts(const void* w, const ActSuperBlock* a, int superblocks, size_t stride, float* out) {
  q45_k_superacts<N, false, BlockQ4_K>(w, a, superblocks, stride, out);
}
template <int N>
CTXR_AVX512 void q5_k_superacts(const void* w, const ActSuperBlock* a, int superblocks, size_t stride, float* out) {
  q45_k_superacts<N, true, BlockQ5_K>(w, a, superblocks, stride, out);
}

template <int N>
CTXR_AVX512 void q6_k_superacts(const void* wv, const ActSuperBlock* a0, int superblocks, size_t stride, float* out) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
  // qh's bit pairs: elements 0..31 of a half at bits 0-1, 32..63 at 2-3, 64..95 at 4-5, 96..127 at 6-7.
  const __m512i shifts01 = lane_shifts(0, 2), shifts23 = lane_shifts(4, 6);
  const __m512i spread[4] = {runs_of(0, 8), runs_of(4, 8), runs_of(8, 8), runs_of(12, 8)};
  __m512 acc[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps();
  for (int sb = 0; sb < superblocks; sb++) {
    const BlockQ6_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    __m512i sum[N];
    for (int h = 0; h < 2; h++) {
      const __m512i low = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m512i high = _mm512_broadcast_i64x4(avx512::load256(blk.qh + 32 * h));
      // Elements 128h + 0..63 and 128h + 64..127 as unsigned six-bit values.
      const __m512i q[2] = {
          _mm512_or_si512(_mm512_and_si512(low, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, shifts01), m3), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, shifts23), m3), 4))};
      for (int r = 0; r < 2; r++) {
        const __m512i scale = _mm512_permutexvar_epi16(spread[2 * h + r], _mm512_castsi256_si512(sc16));
#pragma GCC unroll 4
        for (int i = 0; i < N; i++) {
          const __m512i p = _mm512_maddubs_epi16(q[r], _mm512_load_si512(a0[i * stride + sb].q + 128 * h + 64 * r));
          sum[i] = h == 0 && r == 0 ? _mm512_madd_epi16(p, scale) : _mm512_dpwssd_epi32(sum[i], p, scale);
        }
      }
    }
    const float d = _cvtsh_ss(blk.d);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      const ActSuperBlock& a = a0[i * stride + sb];
      // The −32 of every value: 32·Σ_j scale_j·Σ q over group j, taken off in int32.
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(a.sum16)), sc16), 5);
      const __m512i total = _mm512_sub_epi32(sum[i], _mm512_zextsi256_si512(offset));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(d * a.d), acc[i]);
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

// Q2_K and Q3_K: register r (0..3) holds elements 64r..64r + 63, two-bit fields of qs[32h..32h + 32)
// (h = r / 2) at bits 2j, 2j + 2 (j = 2·(r % 2)), in 16-element groups 4r..4r + 3. Q3_K's third
// bit is hmask[l] bit 4h + j (+1); its values are q − 4, the 4 taken off through the sums.
template <int N, bool kQ3>
CTXR_AVX512 void q23_k_superacts(const void* wv, const ActSuperBlock* a0, int superblocks, size_t stride, float* out) {
  const __m512i m2 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), m4x16 = _mm512_set1_epi16(15);
  const __m512i spread[4] = {runs_of(0, 8), runs_of(4, 8), runs_of(8, 8), runs_of(12, 8)};
  const size_t block_bytes = kQ3 ? sizeof(BlockQ3_K) : sizeof(BlockQ2_K);
  __m512 acc[N];
  __m256 mins[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps(), mins[i] = _mm256_setzero_ps();
  for (int sb = 0; sb < superblocks; sb++) {
    const uint8_t* at = static_cast<const uint8_t*>(wv) + sb * block_bytes;
    prefetch_ahead(at, block_bytes);
    const uint8_t* qs;
    __m256i sc16, m16 = _mm256_setzero_si256();
    __m512i high = _mm512_setzero_si512();
    float d, dmin = 0.f;
    if constexpr (kQ3) {
      const auto& blk = *reinterpret_cast<const BlockQ3_K*>(at);
      sc16 = q3k_scales16(blk.scales);
      high = _mm512_broadcast_i64x4(avx512::load256(blk.hmask));
      qs = blk.qs;
      d = _cvtsh_ss(blk.d);
    } else {
      const auto& blk = *reinterpret_cast<const BlockQ2_K*>(at);
      const __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
      sc16 = _mm256_and_si256(packed, _mm512_castsi512_si256(m4x16));
      m16 = _mm256_srli_epi16(packed, 4);
      qs = blk.qs;
      d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    }
    __m512i sum[N];
    for (int r = 0; r < 4; r++) {
      const int h = r / 2, j = 2 * (r % 2);
      __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(avx512::load256(qs + 32 * h)), lane_shifts(2 * j, 2 * j + 2)), m2);
      if constexpr (kQ3) q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, lane_shifts(4 * h + j, 4 * h + j + 1)), one), 2));
      const __m512i scale = _mm512_permutexvar_epi16(spread[r], _mm512_castsi256_si512(sc16));
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const __m512i p = _mm512_maddubs_epi16(q, _mm512_load_si512(a0[i * stride + sb].q + 64 * r));
        sum[i] = r == 0 ? _mm512_madd_epi16(p, scale) : _mm512_dpwssd_epi32(sum[i], p, scale);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      const ActSuperBlock& a = a0[i * stride + sb];
      const __m256i sums = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.sum16));
      __m512i total = sum[i];
      // Q3_K: −4·Σ_g scale_g·Σ q over group g, in int32.
      if constexpr (kQ3) total = _mm512_sub_epi32(total, _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(sums, sc16), 2)));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(d * a.d), acc[i]);
      if constexpr (!kQ3) mins[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sums, m16)), _mm256_set1_ps(dmin * a.d), mins[i]);
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - (kQ3 ? 0.f : hsum256(mins[i]));
}

template <int N>
CTXR_AVX512 void q2_k_superacts(const void* w, const ActSuperBlock* a, int superblocks, size_t stride, float* out) {
  q23_k_superacts<N, false>(w, a, superblocks, stride, out);
}
template <int N>
CTXR_AVX512 void q3_k_superacts(const void* w, const ActSuperBlock* a, int superblocks, size_t stride, float* out) {
  q23_k_superacts<N, true>(w, a, superblocks, stride, out);
}

// IQ4_XS: chunk k (elements 64k..64k + 63) is qs[32k..32k + 32): the low nibbles of its first 16
// bytes, their high nibbles, then the same of the next 16; each nibble a signed level. maddubs
// takes |level| (≤ 127, so a pair stays within int16) against the activation with the level's sign.
template <int N>
CTXR_AVX512 void iq4_xs_superacts(const void* wv, const ActSuperBlock* a0, int superblocks, size_t stride, float* out) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const __m512i m4 = _mm512_set1_epi8(15), nibble_shift = lane_shifts(0, 4);
  const __m512i levels = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const __m512i spread[4] = {runs_of(0, 16), runs_of(2, 16), runs_of(4, 16), runs_of(6, 16)};
  __m512 acc[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps();
  for (int sb = 0; sb < superblocks; sb++) {
    const BlockIQ4_XS& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    const __m512i sc16 = _mm512_castsi128_si512(iq4xs_scales16(blk));
    __m512i sum[N];
    for (int k = 0; k < 4; k++) {
      // 128-bit lanes [low of bytes 0..15, low of 16..31, high of 0..15, high of 16..31] → element order.
      const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(avx512::load256(blk.qs + 32 * k)), nibble_shift), m4);
      const __m512i level = _mm512_shuffle_epi8(levels, _mm512_shuffle_i64x2(nib, nib, _MM_SHUFFLE(3, 1, 2, 0)));
      const __mmask64 negative = _mm512_movepi8_mask(level);
      const __m512i magnitude = _mm512_abs_epi8(level);
      const __m512i scale = _mm512_permutexvar_epi16(spread[k], sc16);
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const __m512i x = _mm512_load_si512(a0[i * stride + sb].q + 64 * k);
        const __m512i p = _mm512_maddubs_epi16(magnitude, _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x));
        sum[i] = k == 0 ? _mm512_madd_epi16(p, scale) : _mm512_dpwssd_epi32(sum[i], p, scale);
      }
    }
    const float d = _cvtsh_ss(blk.d);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i]), _mm512_set1_ps(d * a0[i * stride + sb].d), acc[i]);
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

}  // namespace

QuantDotSuperActsFn quant_dot_superacts_avx512(DType t, int n) {
  static constexpr QuantDotSuperActsFn q2_k[] = {q2_k_superacts<1>, q2_k_superacts<2>, q2_k_superacts<3>, q2_k_superacts<4>};
  static constexpr QuantDotSuperActsFn q3_k[] = {q3_k_superacts<1>, q3_k_superacts<2>, q3_k_superacts<3>, q3_k_superacts<4>};
  static constexpr QuantDotSuperActsFn iq4_xs[] = {iq4_xs_superacts<1>, iq4_xs_superacts<2>, iq4_xs_superacts<3>, iq4_xs_superacts<4>};
  static constexpr QuantDotSuperActsFn q4_k[] = {q4_k_superacts<1>, q4_k_superacts<2>, q4_k_superacts<3>, q4_k_superacts<4>};
  static constexpr QuantDotSuperActsFn q5_k[] = {q5_k_superacts<1>, q5_k_superacts<2>, q5_k_superacts<3>, q5_k_superacts<4>};
  static constexpr QuantDotSuperActsFn q6_k[] = {q6_k_superacts<1>, q6_k_superacts<2>, q6_k_superacts<3>, q6_k_superacts<4>};
  static_assert(quant_dot_max_acts() == 4, "the activation-group kernels are instantiated for 1..4 rows");
  if (n < 1 || n > quant_dot_max_acts()) return nullptr;
  switch (t) {
    case DType::Q2_K: return q2_k[n - 1];
    case DType::Q3_K: return q3_k[n - 1];
    case DType::IQ4_XS: return iq4_xs[n - 1];
    case DType::Q4_K: return q4_k[n - 1];
    case DType::Q5_K: return q5_k[n - 1];
    case DType::Q6_K: return q6_k[n - 1];
    default: return nullptr;
  }
}

}  // namespace ctxr
