// AVX-512 VNNI quantized dot products (see quant_dot.h): two 32-element blocks per 512-bit
// register, unsigned weight bytes × signed activation bytes summed four at a time into int32
// by _mm512_dpbusd_epi32, one f32 multiply-add per pair of blocks. Every function carries its
// target attribute (no file-wide flags), so nothing compiled here runs on a CPU without
// AVX-512 unless the dispatch (cpu_isa.cpp) chose it; an odd trailing block uses AVX2.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_dot.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

using namespace avx512;

// Half h (128 values) of a Q6_K super-block as unsigned 6-bit values in bytes: q0..q3 each hold 32.
inline void q6k_half_values(const BlockQ6_K& blk, int h, __m256i m4, __m256i m3, __m256i& q0, __m256i& q1, __m256i& q2, __m256i& q3) {
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
  q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
  q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
  q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
  q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
}


CTXR_AVX512 float dot_q8_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  __m512 acc = _mm512_setzero_ps();
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i wq = load2(w[b].qs, w[b + 1].qs), aq = load2(a[b].q, a[b + 1].q);
    // |w| unsigned (|−128| = 128) × a negated where w < 0 (a is never −128).
    const __m512i as = _mm512_mask_sub_epi8(aq, _mm512_movepi8_mask(wq), _mm512_setzero_si512(), aq);
    acc = _mm512_fmadd_ps(dot4(_mm512_abs_epi8(wq), as), scales2(_cvtsh_ss(w[b].d) * a[b].d, _cvtsh_ss(w[b + 1].d) * a[b + 1].d), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (b < nb) sum += quant_dot_avx2(DType::Q8_0)(w + b, a + b, 1);
  return sum;
}

CTXR_AVX512 float dot_q4_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const __m128i m4 = _mm_set1_epi8(15);
  const __m512i eight = _mm512_set1_epi8(8);
  __m512 acc = _mm512_setzero_ps();
  int b = 0;
  auto unpack = [&](const BlockQ4_0& blk) CTXR_AVX512 {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
  };
  for (; b + 1 < nb; b += 2) {
    // q − 8 in [−8, 7] as signed bytes, then as Q8_0: |q − 8| × a with the sign of q − 8 (no
    // offset term through the activation sums).
    const __m512i q = _mm512_sub_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(unpack(w[b])), unpack(w[b + 1]), 1), eight);
    const __m512i aq = load2(a[b].q, a[b + 1].q);
    const __m512i as = _mm512_mask_sub_epi8(aq, _mm512_movepi8_mask(q), _mm512_setzero_si512(), aq);
    acc = _mm512_fmadd_ps(dot4(_mm512_abs_epi8(q), as), scales2(_cvtsh_ss(w[b].d) * a[b].d, _cvtsh_ss(w[b + 1].d) * a[b + 1].d), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (b < nb) sum += quant_dot_avx2(DType::Q4_0)(w + b, a + b, 1);
  return sum;
}

CTXR_AVX512 float dot_q4_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ4_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    for (int c = 0; c < 4; c++) {
      int sc0, m0, sc1, m1;
      q4k_scale_min(blk.scales, 2 * c, sc0, m0);
      q4k_scale_min(blk.scales, 2 * c + 1, sc1, m1);
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      // Low nibbles: sub-block 2c; high nibbles: sub-block 2c+1.
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(raw, m4)), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), 1);
      const ActBlock& a0 = a[2 * c];
      const ActBlock& a1 = a[2 * c + 1];
      acc = _mm512_fmadd_ps(dot4(q, load2(a0.q, a1.q)), scales2(d * sc0 * a0.d, d * sc1 * a1.d), acc);
      mins += dmin * (m0 * a0.d * static_cast<float>(a0.sum[0] + a0.sum[1]) + m1 * a1.d * static_cast<float>(a1.sum[0] + a1.sum[1]));
    }
  }
  return _mm512_reduce_add_ps(acc) - mins;
}

CTXR_AVX512 float dot_q6_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  __m512 acc = _mm512_setzero_ps();
  float offset = 0.f;
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ6_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    for (int h = 0; h < 2; h++) {
      __m256i q0, q1, q2, q3;
      q6k_half_values(blk, h, m4, m3, q0, q1, q2, q3);
      const int8_t* sc = blk.scales + 8 * h;
      const ActBlock* ab = a + 8 * sb + 4 * h;
      // Groups (0,1) and (2,3) per register; int32 lanes 4j..4j+3 of a group hold elements
      // 16j..16j+15 (j = 0, 1), so the per-16 scales go on in float.
      for (int g = 0; g < 4; g += 2) {
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(g == 0 ? q0 : q2), g == 0 ? q1 : q3, 1);
        const float s0 = d * ab[g].d, s1 = d * ab[g + 1].d;
        const __m512 scale = _mm512_set_ps(s1 * sc[2 * g + 3], s1 * sc[2 * g + 3], s1 * sc[2 * g + 3], s1 * sc[2 * g + 3],
                                           s1 * sc[2 * g + 2], s1 * sc[2 * g + 2], s1 * sc[2 * g + 2], s1 * sc[2 * g + 2],
                                           s0 * sc[2 * g + 1], s0 * sc[2 * g + 1], s0 * sc[2 * g + 1], s0 * sc[2 * g + 1],
                                           s0 * sc[2 * g], s0 * sc[2 * g], s0 * sc[2 * g], s0 * sc[2 * g]);
        acc = _mm512_fmadd_ps(dot4(q, load2(ab[g].q, ab[g + 1].q)), scale, acc);
        offset -= 32.f * (s0 * static_cast<float>(sc[2 * g] * ab[g].sum[0] + sc[2 * g + 1] * ab[g].sum[1]) +
                          s1 * static_cast<float>(sc[2 * g + 2] * ab[g + 1].sum[0] + sc[2 * g + 3] * ab[g + 1].sum[1]));
      }
    }
  }
  return _mm512_reduce_add_ps(acc) + offset;
}

}  // namespace

QuantDotFn quant_dot_avx512(DType t) {
  switch (t) {
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_K: return dot_q4_k;
    case DType::Q6_K: return dot_q6_k;
    default: {
      if (QuantDotFn f = quant_dot_superblock_avx512(t)) return f;
      return quant_dot32_avx512(t);
    }
  }
}

QuantDotActsFn quant_dot_acts_avx512(DType t, int n) {
  // The 256-element types decode against per-256 activations (quant_dot_superacts_avx512.cpp).
  return quant_dot32_acts_avx512(t, n);
}

}  // namespace ctxr
