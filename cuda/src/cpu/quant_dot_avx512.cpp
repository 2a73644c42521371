// AVX-512 VNNI quantized dot products (see quant_dot.h): two 32-element blocks per 512-bit
// register, unsigned weight bytes × signed activation bytes summed four at a time into int32
// by _mm512_dpbusd_epi32, one f32 multiply-add per pair of blocks. Every function carries its
// target attribute (no file-wide flags), so nothing compiled here runs on a CPU without
// AVX-512 unless the dispatch (cpu_isa.cpp) chose it; an odd trailing block uses AVX2.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_act_rows.h"
#include "cpu/quant_dot.h"
#include "cpu/quant_dot32.h"

namespace ctxr {

namespace {

using namespace avx512;

// A Q4_K super-block's eight 6-bit sub-block scales and mins, widened to floats.
inline void q4k_scales_and_mins(const BlockQ4_K& blk, __m256& sc, __m256& mn) {
  uint32_t u[3];
  std::memcpy(u, blk.scales, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo))));
  mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo))));
}

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

// One weight row against N activation rows (N = 1: decode; N ≤ 4: that many streams decoded in
// one step), with the activations' side data contiguous (quant_dot.h). The weight bytes are
// unpacked once and dotted with each activation row; each row runs exactly the operations that
// N = 1 runs, so a stream's result does not depend on the others in its batch (bitwise).
// A weight row is read once, front to back: on a matrix far larger than the caches, one thread's
// sequential stream is what the hardware prefetcher keeps up with (interleaving four rows ran at
// half the memory bandwidth; BENCHMARKS.md, issue 29 item 6).

// Q4_K: per super-block the eight six-bit scales and mins are decoded as bytes of three 32-bit
// words, the eight products d·sc·d_a made in one vector and spread over the four 64-element
// chunks by permutes, and the mins term kept as a vector (dmin·m·d_a·Σa), summed once at the end.
template <int N>
CTXR_AVX512 void q4_k_acts(const void* wv, const ActBlock* a0, const float* ad, const float* adsum16, int nb, size_t stride, float* out) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  // Chunk c's register: lanes 0..7 take scale 2c, lanes 8..15 scale 2c + 1.
  const __m512i spread[4] = {_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
                             _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4), _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
  __m512 acc[N], mins[N];
  for (int i = 0; i < N; i++) acc[i] = mins[i] = _mm512_setzero_ps();
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ4_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    __m256 sc, mn;
    q4k_scales_and_mins(blk, sc, mn);
    const __m256 scd = _mm256_mul_ps(sc, _mm256_set1_ps(_cvtsh_ss(blk.d)));
    // Sub-block j's min against both 16-element sums of activation block j.
    const __m512 mnd = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_mul_ps(mn, _mm256_set1_ps(_cvtsh_ss(blk.dmin)))));
    __m512 f[N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      f[i] = _mm512_castps256_ps512(_mm256_mul_ps(scd, _mm256_loadu_ps(x.d(i) + 8 * sb)));
      mins[i] = _mm512_fmadd_ps(mnd, _mm512_loadu_ps(x.sums(i) + 16 * sb), mins[i]);
    }
    for (int c = 0; c < 4; c++) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(raw, m4)), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), 1);
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const ActBlock* a = x.blocks(i) + 8 * sb;
        acc[i] = _mm512_fmadd_ps(dot4(q, load2(a[2 * c].q, a[2 * c + 1].q)), _mm512_permutexvar_ps(spread[c], f[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(mins[i]);
}

// Q6_K: per super-block the sixteen int8 scales times d in one vector, times each 16-element
// group's activation scale (ad duplicated by a permute) for the products, times the 16-element
// sums for the −32 offset (one vector, summed once at the end); the products reach their int32
// lanes by permutes.
template <int N>
CTXR_AVX512 void q6_k_acts(const void* wv, const ActBlock* a0, const float* ad, const float* adsum16, int nb, size_t stride, float* out) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  // Register r (0..3) of a super-block holds 16-element groups 4r .. 4r + 3, four int32 lanes each.
  const __m512i spread[4] = {_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
                             _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
                             _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12)};
  __m512 acc[N], offset[N];
  for (int i = 0; i < N; i++) acc[i] = offset[i] = _mm512_setzero_ps();
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ6_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    const __m512 sd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)))),
                                    _mm512_set1_ps(_cvtsh_ss(blk.d)));
    __m512 f[N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      f[i] = _mm512_mul_ps(sd, _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(x.d(i) + 8 * sb))));
      offset[i] = _mm512_fmadd_ps(sd, _mm512_loadu_ps(x.sums(i) + 16 * sb), offset[i]);
    }
    for (int h = 0; h < 2; h++) {
      __m256i q0, q1, q2, q3;
      q6k_half_values(blk, h, m4, m3, q0, q1, q2, q3);
      const __m512i q01 = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1), q23 = _mm512_inserti64x4(_mm512_castsi256_si512(q2), q3, 1);
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const ActBlock* ab = x.blocks(i) + 8 * sb + 4 * h;
        acc[i] = _mm512_fmadd_ps(dot4(q01, load2(ab[0].q, ab[1].q)), _mm512_permutexvar_ps(spread[2 * h], f[i]), acc[i]);
        acc[i] = _mm512_fmadd_ps(dot4(q23, load2(ab[2].q, ab[3].q)), _mm512_permutexvar_ps(spread[2 * h + 1], f[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - 32.f * _mm512_reduce_add_ps(offset[i]);
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
  static constexpr QuantDotActsFn q4_k[] = {q4_k_acts<1>, q4_k_acts<2>, q4_k_acts<3>, q4_k_acts<4>};
  static constexpr QuantDotActsFn q6_k[] = {q6_k_acts<1>, q6_k_acts<2>, q6_k_acts<3>, q6_k_acts<4>};
  static_assert(quant_dot_max_acts() == 4, "the activation-group kernels are instantiated for 1..4 rows");
  if (n < 1 || n > quant_dot_max_acts()) return nullptr;
  switch (t) {
    case DType::Q4_K: return q4_k[n - 1];
    case DType::Q6_K: return q6_k[n - 1];
    default: {
      if (QuantDotActsFn f = quant_dot_superblock_acts_avx512(t, n)) return f;
      return quant_dot32_acts_avx512(t, n);
    }
  }
}

}  // namespace ctxr
