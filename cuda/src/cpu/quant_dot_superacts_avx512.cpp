// AVX-512 VNNI decode kernels of Q4_K, Q5_K and Q6_K against activations quantized per 256 elements
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
  for (int i = 0; i < N; i++) {
    const __m256 m = mins[i];
    const __m128 m4f = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    const __m128 m2f = _mm_add_ps(m4f, _mm_movehl_ps(m4f, m4f));
    out[i] = _mm512_reduce_add_ps(acc[i]) - _mm_cvtss_f32(_mm_add_ss(m2f, _mm_movehdup_ps(m2f)));
  }
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

}  // namespace

QuantDotSuperActsFn quant_dot_superacts_avx512(DType t, int n) {
  static constexpr QuantDotSuperActsFn q4_k[] = {q4_k_superacts<1>, q4_k_superacts<2>, q4_k_superacts<3>, q4_k_superacts<4>};
  static constexpr QuantDotSuperActsFn q5_k[] = {q5_k_superacts<1>, q5_k_superacts<2>, q5_k_superacts<3>, q5_k_superacts<4>};
  static constexpr QuantDotSuperActsFn q6_k[] = {q6_k_superacts<1>, q6_k_superacts<2>, q6_k_superacts<3>, q6_k_superacts<4>};
  static_assert(quant_dot_max_acts() == 4, "the activation-group kernels are instantiated for 1..4 rows");
  if (n < 1 || n > quant_dot_max_acts()) return nullptr;
  switch (t) {
    case DType::Q4_K: return q4_k[n - 1];
    case DType::Q5_K: return q5_k[n - 1];
    case DType::Q6_K: return q6_k[n - 1];
    default: return nullptr;
  }
}

}  // namespace ctxr
