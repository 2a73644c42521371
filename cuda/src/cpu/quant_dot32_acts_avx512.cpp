// AVX-512 VNNI decode kernels of the 32-element block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, MXFP4): one weight row against N activation rows (quant_act_rows.h, quant_dot.h), two
// blocks per 512-bit register. Each pair of weight blocks is unpacked once — for the signed
// formats into |v| and a sign mask — and dotted with every activation row (dpbusd: |v| unsigned
// × a negated where v < 0; Q4_1/Q5_1: unsigned q × a plus m·d_a·Σa). Every row runs exactly what
// N = 1 runs, so a stream's result does not depend on its batch. An odd trailing block goes to
// the AVX2 one-row kernel.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_act_rows.h"
#include "cpu/quant_blocks32_simd.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

using namespace avx512;
using namespace simd32;


// Two blocks' unsigned 4-bit values (element i of block j in byte 32j + i); Q5's fifth bits (bit
// i of each block's qh) added as 16 through a 64-bit byte mask.
template <typename Block>
CTXR_AVX512 inline __m512i unsigned4_2(const Block& b0, const Block& b1) { return join(nibbles(b0.qs), nibbles(b1.qs)); }
template <typename Block>
CTXR_AVX512 inline __m512i unsigned5_2(const Block& b0, const Block& b1) {
  uint32_t h0, h1;
  std::memcpy(&h0, b0.qh, 4);
  std::memcpy(&h1, b1.qh, 4);
  const __m512i q = unsigned4_2(b0, b1);
  return _mm512_mask_add_epi8(q, static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32, q, _mm512_set1_epi8(16));
}

// The signed formats: two blocks' values as signed bytes, and each block's scale.
CTXR_AVX512 inline __m512i signed_values2(const BlockQ8_0& b0, const BlockQ8_0& b1) { return load2(b0.qs, b1.qs); }
CTXR_AVX512 inline __m512i signed_values2(const BlockQ4_0& b0, const BlockQ4_0& b1) { return _mm512_sub_epi8(unsigned4_2(b0, b1), _mm512_set1_epi8(8)); }
CTXR_AVX512 inline __m512i signed_values2(const BlockQ5_0& b0, const BlockQ5_0& b1) { return _mm512_sub_epi8(unsigned5_2(b0, b1), _mm512_set1_epi8(16)); }
CTXR_AVX512 inline __m512i signed_values2(const BlockIQ4_NL& b0, const BlockIQ4_NL& b1) {
  const __m256i values = table(kIq4nlValues);
  return join(table_lookup(values, b0.qs), table_lookup(values, b1.qs));
}
CTXR_AVX512 inline __m512i signed_values2(const BlockMXFP4& b0, const BlockMXFP4& b1) {
  const __m256i values = table(kMxfp4Values);
  return join(table_lookup(values, b0.qs), table_lookup(values, b1.qs));
}
template <typename Block>
CTXR_AVX512 inline float scale_of(const Block& b) { return _cvtsh_ss(b.d); }
template <>
CTXR_AVX512 inline float scale_of(const BlockMXFP4& b) { return e8m0_to_f32_half(b.e); }

template <int N, typename Block, DType kType>
CTXR_AVX512 void signed_acts(const void* wv, const ActBlock* a0, const float* ad, const float* adsum16, int nb, size_t stride, float* out) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const Block*>(wv);
  __m512 acc[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps();
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i v = signed_values2(w[b], w[b + 1]);
    // |v| unsigned (|−128| = 128) × a negated where v < 0 (a is never −128).
    const __m512i magnitude = _mm512_abs_epi8(v);
    const __mmask64 negative = _mm512_movepi8_mask(v);
    const float s0 = scale_of(w[b]), s1 = scale_of(w[b + 1]);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      const ActBlock* a = x.blocks(i);
      const __m512i aq = load2(a[b].q, a[b + 1].q);
      acc[i] = _mm512_fmadd_ps(dot4(magnitude, _mm512_mask_sub_epi8(aq, negative, _mm512_setzero_si512(), aq)), scales2(s0 * a[b].d, s1 * a[b + 1].d), acc[i]);
    }
  }
  for (int i = 0; i < N; i++) {
    out[i] = _mm512_reduce_add_ps(acc[i]);
    if (b < nb) out[i] += quant_dot(kType, CpuIsa::Avx2)(w + b, x.blocks(i) + b, 1);
  }
}

inline float act_sum(const ActBlock& a) { return static_cast<float>(a.sum[0] + a.sum[1]); }

// Q4_1, Q5_1: x = d·q + m, so d·d_a·Σ q·a (unsigned q) + m·d_a·Σa.
template <int N, typename Block, DType kType>
CTXR_AVX512 void min_acts(const void* wv, const ActBlock* a0, const float* ad, const float* adsum16, int nb, size_t stride, float* out) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const Block*>(wv);
  __m512 acc[N];
  float mins[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps(), mins[i] = 0.f;
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    __m512i q;
    if constexpr (kType == DType::Q5_1) q = unsigned5_2(w[b], w[b + 1]);
    else q = unsigned4_2(w[b], w[b + 1]);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d), m0 = _cvtsh_ss(w[b].m), m1 = _cvtsh_ss(w[b + 1].m);
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      const ActBlock* a = x.blocks(i);
      acc[i] = _mm512_fmadd_ps(dot4(q, load2(a[b].q, a[b + 1].q)), scales2(d0 * a[b].d, d1 * a[b + 1].d), acc[i]);
      mins[i] += m0 * a[b].d * act_sum(a[b]) + m1 * a[b + 1].d * act_sum(a[b + 1]);
    }
  }
  for (int i = 0; i < N; i++) {
    out[i] = _mm512_reduce_add_ps(acc[i]) + mins[i];
    if (b < nb) out[i] += quant_dot(kType, CpuIsa::Avx2)(w + b, x.blocks(i) + b, 1);
  }
}

}  // namespace

QuantDotActsFn quant_dot32_acts_avx512(DType t, int n) {
  static_assert(quant_dot_max_acts() == 4, "the activation-group kernels are instantiated for 1..4 rows");
  if (n < 1 || n > quant_dot_max_acts()) return nullptr;
#define CTXR_ACTS(kernel, Block, type) \
  case type: {                         \
    static constexpr QuantDotActsFn fns[] = {kernel<1, Block, type>, kernel<2, Block, type>, kernel<3, Block, type>, kernel<4, Block, type>}; \
    return fns[n - 1];                 \
  }
  switch (t) {
    CTXR_ACTS(signed_acts, BlockQ8_0, DType::Q8_0)
    CTXR_ACTS(signed_acts, BlockQ4_0, DType::Q4_0)
    CTXR_ACTS(signed_acts, BlockQ5_0, DType::Q5_0)
    CTXR_ACTS(signed_acts, BlockIQ4_NL, DType::IQ4_NL)
    CTXR_ACTS(signed_acts, BlockMXFP4, DType::MXFP4)
    CTXR_ACTS(min_acts, BlockQ4_1, DType::Q4_1)
    CTXR_ACTS(min_acts, BlockQ5_1, DType::Q5_1)
    default: return nullptr;
  }
#undef CTXR_ACTS
}

}  // namespace ctxr
