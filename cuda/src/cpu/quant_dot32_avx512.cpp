// AVX-512 VNNI dot products of the 32-element block formats (quant_dot32.h): two blocks per
// 512-bit register, unsigned weight bytes × signed activation bytes summed four at a time into
// int32 by _mm512_dpbusd_epi32, one f32 multiply-add per pair of blocks. As in
// quant_dot_avx512.cpp, every function carries its target attribute; an odd trailing block
// goes to the AVX2 kernel.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_blocks32_simd.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

using namespace avx512;
using namespace simd32;

// Signed weight bytes v: |v| unsigned × a negated where v < 0 (a is never −128).
CTXR_AVX512 inline __m512 signed_dot4(__m512i v, __m512i aq) {
  return dot4(_mm512_abs_epi8(v), _mm512_mask_sub_epi8(aq, _mm512_movepi8_mask(v), _mm512_setzero_si512(), aq));
}
inline float act_sum(const ActBlock& a) { return static_cast<float>(a.sum[0] + a.sum[1]); }

// Two blocks' unsigned values q, element i of block j in byte 32j + i; Q5's fifth bits (bit i of
// each block's qh) set through a 64-bit byte mask.
template <typename Block, bool kFifthBit>
CTXR_AVX512 inline __m512i unsigned_values2(const Block& b0, const Block& b1) {
  const __m512i q = join(nibbles(b0.qs), nibbles(b1.qs));
  if constexpr (!kFifthBit) {
    return q;
  } else {
    uint32_t h0, h1;
    std::memcpy(&h0, b0.qh, 4);
    std::memcpy(&h1, b1.qh, 4);
    const __mmask64 high = static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32;
    return _mm512_mask_add_epi8(q, high, q, _mm512_set1_epi8(16));
  }
}

// x = d·q + m: d·d_a·Σ q·a (unsigned q, no offset in the products) + m·d_a·Σa.
template <typename Block, bool kFifthBit>
CTXR_AVX512 float dot_with_min(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const Block*>(wv);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.f;
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i q = unsigned_values2<Block, kFifthBit>(w[b], w[b + 1]);
    acc = _mm512_fmadd_ps(dot4(q, load2(a[b].q, a[b + 1].q)), scales2(_cvtsh_ss(w[b].d) * a[b].d, _cvtsh_ss(w[b + 1].d) * a[b + 1].d), acc);
    mins += _cvtsh_ss(w[b].m) * a[b].d * act_sum(a[b]) + _cvtsh_ss(w[b + 1].m) * a[b + 1].d * act_sum(a[b + 1]);
  }
  float sum = _mm512_reduce_add_ps(acc) + mins;
  if (b < nb) sum += quant_dot32_avx2(kFifthBit ? DType::Q5_1 : DType::Q4_1)(w + b, a + b, 1);
  return sum;
}

CTXR_AVX512 float dot_q5_0(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  const __m512i sixteen = _mm512_set1_epi8(16);
  __m512 acc = _mm512_setzero_ps();
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    // q − 16 in [−16, 15] as signed bytes: no offset term through the activation sums.
    const __m512i q = _mm512_sub_epi8(unsigned_values2<BlockQ5_0, true>(w[b], w[b + 1]), sixteen);
    acc = _mm512_fmadd_ps(signed_dot4(q, load2(a[b].q, a[b + 1].q)), scales2(_cvtsh_ss(w[b].d) * a[b].d, _cvtsh_ss(w[b + 1].d) * a[b + 1].d), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (b < nb) sum += quant_dot32_avx2(DType::Q5_0)(w + b, a + b, 1);
  return sum;
}

CTXR_AVX512 inline float scale_of(const BlockIQ4_NL& b) { return _cvtsh_ss(b.d); }
CTXR_AVX512 inline float scale_of(const BlockMXFP4& b) { return e8m0_to_f32_half(b.e); }

// IQ4_NL and MXFP4: the nibbles through the type's table, then |v| × ±a.
template <typename Block>
CTXR_AVX512 float dot_table(const void* wv, const ActBlock* a, int nb) {
  const auto* w = static_cast<const Block*>(wv);
  constexpr bool kIq4nl = sizeof(Block) == sizeof(BlockIQ4_NL);
  const __m256i values = table(kIq4nl ? kIq4nlValues : kMxfp4Values);
  __m512 acc = _mm512_setzero_ps();
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i v = join(table_lookup(values, w[b].qs), table_lookup(values, w[b + 1].qs));
    acc = _mm512_fmadd_ps(signed_dot4(v, load2(a[b].q, a[b + 1].q)), scales2(scale_of(w[b]) * a[b].d, scale_of(w[b + 1]) * a[b + 1].d), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (b < nb) sum += quant_dot32_avx2(kIq4nl ? DType::IQ4_NL : DType::MXFP4)(w + b, a + b, 1);
  return sum;
}

}  // namespace

QuantDotFn quant_dot32_avx512(DType t) {
  switch (t) {
    case DType::Q4_1: return dot_with_min<BlockQ4_1, false>;
    case DType::Q5_0: return dot_q5_0;
    case DType::Q5_1: return dot_with_min<BlockQ5_1, true>;
    case DType::IQ4_NL: return dot_table<BlockIQ4_NL>;
    case DType::MXFP4: return dot_table<BlockMXFP4>;
    default: return nullptr;
  }
}

}  // namespace ctxr
