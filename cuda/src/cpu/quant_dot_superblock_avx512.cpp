// AVX-512 VNNI dot products of Q2_K, Q3_K, Q5_K and IQ4_XS rows (quant_superblock.h) with
// quantized activations: two 32-element blocks per 512-bit register summed by dpbusd (unsigned
// weight bytes × signed activation bytes, four at a time into int32), as quant_dot_avx512.cpp.
// Per-16 scales (Q2_K, Q3_K) multiply the int32 lane sums exactly (each lane holds 4 elements of
// one 16-element group); IQ4_XS's levels come from a byte shuffle and go in as |level| × ±a.
// Every function carries its target attribute: nothing here runs unless cpu_isa.cpp chose it.
#include <immintrin.h>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_dot.h"
#include "quant_superblock.h"

namespace ctxr {

namespace {

using namespace avx512;


// Lane pattern of the int32 sums of two blocks 2r, 2r + 1: lanes 4i..4i+3 belong to 16-group 4r + i.
CTXR_AVX512 inline __m512i group_spread(int r) {
  return _mm512_set_epi32(4 * r + 3, 4 * r + 3, 4 * r + 3, 4 * r + 3, 4 * r + 2, 4 * r + 2, 4 * r + 2, 4 * r + 2, 4 * r + 1, 4 * r + 1, 4 * r + 1,
                          4 * r + 1, 4 * r, 4 * r, 4 * r, 4 * r);
}

CTXR_AVX512 float dot_q2_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const __m256i m2 = _mm256_set1_epi8(3);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ2_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const __m512i sc = _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales))), _mm512_set1_epi32(15));
    for (int h = 0; h < 2; h++) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * h));
      for (int j = 0; j < 4; j += 2) {
        const int g = 4 * h + j;
        const __m512i u = join(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2), _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j + 2), m2));
        const __m512i p = _mm512_mullo_epi32(dpbusd(u, load2(a[g].q, a[g + 1].q)), _mm512_permutexvar_epi32(group_spread(g / 2), sc));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales2(d * a[g].d, d * a[g + 1].d), acc);
      }
    }
    for (int g = 0; g < 8; g++)
      mins += dmin * a[g].d * static_cast<float>((blk.scales[2 * g] >> 4) * a[g].sum[0] + (blk.scales[2 * g + 1] >> 4) * a[g].sum[1]);
  }
  return _mm512_reduce_add_ps(acc) - mins;
}

CTXR_AVX512 float dot_q3_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const __m256i m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  __m512 acc = _mm512_setzero_ps();
  float offset = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ3_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    alignas(16) int8_t s8[16];
    q3k_scales(blk.scales, s8);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s8)));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
    auto values = [&](__m256i raw, int h, int j) CTXR_AVX512 {
      return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), m1), 2));
    };
    for (int h = 0; h < 2; h++) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * h));
      for (int j = 0; j < 4; j += 2) {
        const int g = 4 * h + j;
        const __m512i p = _mm512_mullo_epi32(dpbusd(join(values(raw, h, j), values(raw, h, j + 1)), load2(a[g].q, a[g + 1].q)),
                                             _mm512_permutexvar_epi32(group_spread(g / 2), sc));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales2(d * a[g].d, d * a[g + 1].d), acc);
      }
    }
    for (int g = 0; g < 8; g++) offset += d * a[g].d * static_cast<float>(s8[2 * g] * a[g].sum[0] + s8[2 * g + 1] * a[g].sum[1]);
  }
  return _mm512_reduce_add_ps(acc) - 4.f * offset;
}

CTXR_AVX512 float dot_q5_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15), m1 = _mm256_set1_epi8(1);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ5_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
    for (int c = 0; c < 4; c++) {
      int sc0, m0, sc1, mn1;
      q4k_scale_min(blk.scales, 2 * c, sc0, m0);
      q4k_scale_min(blk.scales, 2 * c + 1, sc1, mn1);
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      const __m256i u0 = _mm256_or_si256(_mm256_and_si256(raw, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), m1), 4));
      const __m256i u1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), m1), 4));
      const ActBlock& a0 = a[2 * c];
      const ActBlock& a1 = a[2 * c + 1];
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpbusd(join(u0, u1), load2(a0.q, a1.q))), scales2(d * sc0 * a0.d, d * sc1 * a1.d), acc);
      mins += dmin * (m0 * a0.d * static_cast<float>(a0.sum[0] + a0.sum[1]) + mn1 * a1.d * static_cast<float>(a1.sum[0] + a1.sum[1]));
    }
  }
  return _mm512_reduce_add_ps(acc) - mins;
}

CTXR_AVX512 float dot_iq4_xs(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m512i levels = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  __m512 acc = _mm512_setzero_ps();
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockIQ4_XS& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    int8_t sc[8];
    iq4xs_scales(blk, sc);
    for (int k = 0; k < 8; k += 2) {
      // 128-bit lanes [low nibbles of k, of k+1, high of k, high of k+1] → [low k, high k, low k+1, high k+1].
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 16 * k));
      const __m512i nib = join(_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      const __m512i v = _mm512_shuffle_epi8(levels, _mm512_shuffle_i64x2(nib, nib, _MM_SHUFFLE(3, 1, 2, 0)));
      const __m512i aq = load2(a[k].q, a[k + 1].q);
      const __m512i as = _mm512_mask_sub_epi8(aq, _mm512_movepi8_mask(v), _mm512_setzero_si512(), aq);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpbusd(_mm512_abs_epi8(v), as)), scales2(d * sc[k] * a[k].d, d * sc[k + 1] * a[k + 1].d), acc);
    }
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

QuantDotFn quant_dot_superblock_avx512(DType t) {
  switch (t) {
    case DType::Q2_K: return dot_q2_k;
    case DType::Q3_K: return dot_q3_k;
    case DType::Q5_K: return dot_q5_k;
    case DType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace ctxr
