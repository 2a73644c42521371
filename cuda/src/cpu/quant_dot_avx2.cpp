// AVX2 quantized dot products (see quant_dot.h): unsigned weight bytes × signed activation
// bytes by _mm256_maddubs_epi16 (no pair can saturate: 2·63·127 < 2¹⁵), pairs summed to int32
// by _mm256_madd_epi16, then one f32 multiply-add per block with the product of the scales.
// Offsets (Q4_0's 8, Q6_K's 32, Q4_K's mins) are applied through the activation sums.
#include <immintrin.h>

#include "cpu/avx2_reduce.h"
#include "cpu/quant_dot.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256 products(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))); }

float dot_q8_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const __m256i wq = load(w[b].qs), aq = load(a[b].q);
    // |w| as unsigned × a with w's sign: |−128| is 128 unsigned; a is never −128.
    const __m256 p = products(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(aq, wq));
    acc = _mm256_fmadd_ps(p, _mm256_set1_ps(_cvtsh_ss(w[b].d) * a[b].d), acc);
  }
  return hsum8(acc);
}

float dot_q4_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const __m128i m4 = _mm_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.f;
  for (int b = 0; b < nb; b++) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    const float s = _cvtsh_ss(w[b].d) * a[b].d;
    acc = _mm256_fmadd_ps(products(q, load(a[b].q)), _mm256_set1_ps(s), acc);
    offset -= 8.f * s * static_cast<float>(a[b].sum[0] + a[b].sum[1]);
  }
  return hsum8(acc) + offset;
}

float dot_q4_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ4_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    for (int c = 0; c < 4; c++) {
      int sc0, m0, sc1, m1;
      q4k_scale_min(blk.scales, 2 * c, sc0, m0);
      q4k_scale_min(blk.scales, 2 * c + 1, sc1, m1);
      const __m256i raw = load(blk.qs + 32 * c);
      const ActBlock& a0 = a[2 * c];
      const ActBlock& a1 = a[2 * c + 1];
      acc = _mm256_fmadd_ps(products(_mm256_and_si256(raw, m4), load(a0.q)), _mm256_set1_ps(d * sc0 * a0.d), acc);
      acc = _mm256_fmadd_ps(products(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), load(a1.q)), _mm256_set1_ps(d * sc1 * a1.d), acc);
      mins += dmin * (m0 * a0.d * static_cast<float>(a0.sum[0] + a0.sum[1]) + m1 * a1.d * static_cast<float>(a1.sum[0] + a1.sum[1]));
    }
  }
  return hsum8(acc) - mins;
}

float dot_q6_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.f;
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ6_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    for (int h = 0; h < 2; h++) {
      const __m256i l0 = load(blk.ql + 64 * h), l1 = load(blk.ql + 64 * h + 32), hb = load(blk.qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4)),
      };
      const int8_t* sc = blk.scales + 8 * h;
      for (int g = 0; g < 4; g++) {
        const ActBlock& ab = a[8 * sb + 4 * h + g];
        // Elements 0..15 (the low 128 bits) take scale sc[2g], 16..31 sc[2g+1].
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], load(ab.q)), scales);
        const float s = d * ab.d;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(s), acc);
        offset -= 32.f * s * static_cast<float>(sc[2 * g] * ab.sum[0] + sc[2 * g + 1] * ab.sum[1]);
      }
    }
  }
  return hsum8(acc) + offset;
}

}  // namespace

QuantDotFn quant_dot_avx2(DType t) {
  switch (t) {
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_K: return dot_q4_k;
    case DType::Q6_K: return dot_q6_k;
    default: {
      if (QuantDotFn f = quant_dot_superblock_avx2(t)) return f;
      return quant_dot32_avx2(t);
    }
  }
}

}  // namespace ctxr
