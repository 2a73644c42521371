// AVX2 dot products of Q2_K, Q3_K, Q5_K and IQ4_XS rows (quant_superblock.h) with quantized
// activations (quant.h), as the Q4_K/Q6_K kernels in quant_dot_avx2.cpp: unsigned weight bytes
// × signed activation bytes by maddubs (Q5_K: 31·127·2, Q3_K: 7·127·2 per pair, no saturation),
// IQ4_XS's signed levels by the sign trick of Q8_0 (|level| ≤ 127). Per-16 scales (Q2_K, Q3_K)
// are int16 multipliers in the madd; mins and offsets go through the activations' 16-sums.
#include <immintrin.h>

#include "cpu/avx2_reduce.h"
#include "cpu/quant_dot.h"
#include "quant_superblock.h"

namespace ctxr {

namespace {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i ones16() { return _mm256_set1_epi16(1); }

// Σ u·a of one 32-element block, int32 lanes: lanes 0..3 elements 0..15, lanes 4..7 elements 16..31.
inline __m256i block_dot(__m256i u, __m256i a) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), ones16()); }
// The same with the 16-element halves weighted by int16 s0 and s1.
inline __m256i block_dot_scaled(__m256i u, __m256i a, int s0, int s1) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)), _mm_set1_epi16(static_cast<int16_t>(s0))));
}

float dot_q2_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ2_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    for (int h = 0; h < 2; h++) {
      const __m256i raw = load(blk.qs + 32 * h);
      for (int j = 0; j < 4; j++) {
        const int g = 4 * h + j;  // the 32-element block within the super-block
        const ActBlock& ab = a[8 * sb + g];
        const int s0 = blk.scales[2 * g], s1 = blk.scales[2 * g + 1];
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot_scaled(u, load(ab.q), s0 & 15, s1 & 15)), _mm256_set1_ps(d * ab.d), acc);
        mins += dmin * ab.d * static_cast<float>((s0 >> 4) * ab.sum[0] + (s1 >> 4) * ab.sum[1]);
      }
    }
  }
  return hsum8(acc) - mins;
}

float dot_q3_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const __m256i m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.f;
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ3_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    int8_t sc[16];
    q3k_scales(blk.scales, sc);
    const __m256i hm = load(blk.hmask);
    for (int h = 0; h < 2; h++) {
      const __m256i raw = load(blk.qs + 32 * h);
      for (int j = 0; j < 4; j++) {
        const int g = 4 * h + j;
        const ActBlock& ab = a[8 * sb + g];
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2);
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, g), m1), 2);
        const __m256i u = _mm256_or_si256(low, high);
        const float s = d * ab.d;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot_scaled(u, load(ab.q), sc[2 * g], sc[2 * g + 1])), _mm256_set1_ps(s), acc);
        offset -= 4.f * s * static_cast<float>(sc[2 * g] * ab.sum[0] + sc[2 * g + 1] * ab.sum[1]);
      }
    }
  }
  return hsum8(acc) + offset;
}

float dot_q5_k(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15), m1 = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.f;
  for (int sb = 0; sb < nb / 8; sb++, a += 8) {
    const BlockQ5_K& blk = w[sb];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const __m256i hb = load(blk.qh);
    for (int c = 0; c < 4; c++) {
      int sc0, m0, sc1, m1v;
      q4k_scale_min(blk.scales, 2 * c, sc0, m0);
      q4k_scale_min(blk.scales, 2 * c + 1, sc1, m1v);
      const __m256i raw = load(blk.qs + 32 * c);
      const __m256i u0 = _mm256_or_si256(_mm256_and_si256(raw, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), m1), 4));
      const __m256i u1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), m1), 4));
      const ActBlock& a0 = a[2 * c];
      const ActBlock& a1 = a[2 * c + 1];
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(u0, load(a0.q))), _mm256_set1_ps(d * sc0 * a0.d), acc);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(u1, load(a1.q))), _mm256_set1_ps(d * sc1 * a1.d), acc);
      mins += dmin * (m0 * a0.d * static_cast<float>(a0.sum[0] + a0.sum[1]) + m1v * a1.d * static_cast<float>(a1.sum[0] + a1.sum[1]));
    }
  }
  return hsum8(acc) - mins;
}

float dot_iq4_xs(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  const __m128i m4 = _mm_set1_epi8(15);
  const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockIQ4_XS& blk = w[sb];
    const float d = _cvtsh_ss(blk.d);
    int8_t sc[8];
    iq4xs_scales(blk, sc);
    for (int k = 0; k < 8; k++) {
      const ActBlock& ab = a[8 * sb + k];
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs + 16 * k));
      const __m256i v = _mm256_set_m128i(_mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(raw, 4), m4)), _mm_shuffle_epi8(levels, _mm_and_si128(raw, m4)));
      const __m256i aq = load(ab.q);
      const __m256i p = block_dot(_mm256_sign_epi8(v, v), _mm256_sign_epi8(aq, v));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * sc[k] * ab.d), acc);
    }
  }
  return hsum8(acc);
}

}  // namespace

QuantDotFn quant_dot_superblock_avx2(DType t) {
  switch (t) {
    case DType::Q2_K: return dot_q2_k;
    case DType::Q3_K: return dot_q3_k;
    case DType::Q5_K: return dot_q5_k;
    case DType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace ctxr
