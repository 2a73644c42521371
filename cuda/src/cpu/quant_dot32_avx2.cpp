// AVX2 dot products of the 32-element block formats (quant_dot32.h): _mm256_maddubs_epi16 of
// unsigned weight bytes and signed activation bytes (pairs stay below 2¹⁵: 2·127·127), pairs
// to int32 by _mm256_madd_epi16, one f32 multiply-add per block with the scales' product.
#include <immintrin.h>

#include "cpu/avx2_reduce.h"
#include "cpu/quant_blocks32_simd.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

using namespace simd32;

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256 products(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))); }
inline float act_sum(const ActBlock& a) { return static_cast<float>(a.sum[0] + a.sum[1]); }

// x = d·q + m: Σ x·a = d·d_a·Σ q·a + m·d_a·Σa.
template <typename Block, bool kFifthBit>
float dot_with_min(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const Block*>(wv);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.f;
  for (int b = 0; b < nb; b++) {
    __m256i q = nibbles(w[b].qs);
    if constexpr (kFifthBit) q = _mm256_or_si256(q, fifth_bits(w[b].qh));
    acc = _mm256_fmadd_ps(products(q, load(a[b].q)), _mm256_set1_ps(_cvtsh_ss(w[b].d) * a[b].d), acc);
    mins += _cvtsh_ss(w[b].m) * a[b].d * act_sum(a[b]);
  }
  return hsum8(acc) + mins;
}

float dot_q5_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.f;
  for (int b = 0; b < nb; b++) {
    const __m256i q = _mm256_or_si256(nibbles(w[b].qs), fifth_bits(w[b].qh));
    const float s = _cvtsh_ss(w[b].d) * a[b].d;
    acc = _mm256_fmadd_ps(products(q, load(a[b].q)), _mm256_set1_ps(s), acc);
    offset -= 16.f * s * act_sum(a[b]);
  }
  return hsum8(acc) + offset;
}

// Signed table values v: |v| unsigned × a with v's sign (a is never −128).
inline __m256 signed_products(__m256i v, __m256i aq) { return products(_mm256_sign_epi8(v, v), _mm256_sign_epi8(aq, v)); }

float dot_iq4_nl(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockIQ4_NL*>(wv);
  const __m256i values = table(kIq4nlValues);
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++)
    acc = _mm256_fmadd_ps(signed_products(table_lookup(values, w[b].qs), load(a[b].q)), _mm256_set1_ps(_cvtsh_ss(w[b].d) * a[b].d), acc);
  return hsum8(acc);
}

float dot_mxfp4(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockMXFP4*>(wv);
  const __m256i values = table(kMxfp4Values);
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++)
    acc = _mm256_fmadd_ps(signed_products(table_lookup(values, w[b].qs), load(a[b].q)), _mm256_set1_ps(e8m0_to_f32_half(w[b].e) * a[b].d), acc);
  return hsum8(acc);
}

}  // namespace

QuantDotFn quant_dot32_avx2(DType t) {
  switch (t) {
    case DType::Q4_1: return dot_with_min<BlockQ4_1, false>;
    case DType::Q5_0: return dot_q5_0;
    case DType::Q5_1: return dot_with_min<BlockQ5_1, true>;
    case DType::IQ4_NL: return dot_iq4_nl;
    case DType::MXFP4: return dot_mxfp4;
    default: return nullptr;
  }
}

}  // namespace ctxr
