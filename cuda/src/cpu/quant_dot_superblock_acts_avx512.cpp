// AVX-512 VNNI decode kernels of Q2_K, Q3_K and IQ4_XS: one weight row against N activation
// rows with their side data contiguous (quant_act_rows.h): the weight bytes unpacked once, every activation row running exactly what N = 1 runs (bitwise).
// Per super-block the scales become one float vector (scale·d·d_a per 16- or 32-group), spread
// onto the int32 lanes of each dpbusd result by a permute; mins and offsets stay vectors
// (scale·d_a·Σa) summed once at the end.
#include <immintrin.h>

#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_act_rows.h"
#include "cpu/quant_dot.h"
#include "quant_superblock.h"

namespace ctxr {

namespace {

using namespace avx512;


// [x0, x0, x1, x1, ..., x7, x7]: a per-32-block value for each of its two 16-groups.
CTXR_AVX512 inline __m512i dup_pairs() { return _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0); }
// The dpbusd lanes of blocks 2c, 2c + 1 (8 lanes each) from eight per-block factors.
CTXR_AVX512 inline __m512i spread32(int c) {
  return _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c,
                          2 * c, 2 * c, 2 * c);
}
// The dpbusd lanes of blocks 2c, 2c + 1 (4 lanes a 16-group) from sixteen per-16-group factors.
CTXR_AVX512 inline __m512i spread16(int c) {
  return _mm512_set_epi32(4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                          4 * c + 1, 4 * c, 4 * c, 4 * c, 4 * c);
}

#define CTXR_ACTS_SIGNATURE(name) \
  template <int N>                  \
  CTXR_AVX512 void name(const void* wv, const ActBlock* a0, const float* ad, const float* adsum16, int nb, size_t stride, float* out)

// IQ4_XS's levels shifted to unsigned bytes (level + 128, 1..241) for dpbusd; the 128·Σa this
// adds is taken off once at the end through the activations' sums (as Q6_K's 32).
CTXR_ACTS_SIGNATURE(iq4_xs_acts) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const BlockIQ4_XS*>(wv);
  __m512 acc[N], offset[N];
  for (int i = 0; i < N; i++) acc[i] = offset[i] = _mm512_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m512i levels = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))), _mm512_set1_epi8(-128));
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockIQ4_XS& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    // The eight six-bit ls (quant_superblock.h) as bytes: low nibbles and high bit pairs deposited.
    uint32_t low;
    std::memcpy(&low, blk.scales_l, 4);
    const uint64_t ls = _pdep_u64(low, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(blk.scales_h, 0x3030303030303030ull);
    const __m256 scf = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(ls)))), _mm256_set1_ps(32.f));
    const __m256 sd = _mm256_mul_ps(scf, _mm256_set1_ps(_cvtsh_ss(blk.d)));
    const __m512 sd_pairs = _mm512_permutexvar_ps(dup_pairs(), _mm512_castps256_ps512(sd));
    __m512 f[N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      f[i] = _mm512_castps256_ps512(_mm256_mul_ps(sd, _mm256_loadu_ps(x.d(i) + 8 * sb)));
      offset[i] = _mm512_fmadd_ps(sd_pairs, _mm512_loadu_ps(x.sums(i) + 16 * sb), offset[i]);
    }
    for (int k = 0; k < 4; k++) {
      // 128-bit lanes [low nibbles of 2k, of 2k+1, high of 2k, high of 2k+1] → [low, high of 2k, low, high of 2k+1].
      const __m256i raw = load256(blk.qs + 32 * k);
      const __m512i nib = join(_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      const __m512i u = _mm512_shuffle_epi8(levels, _mm512_shuffle_i64x2(nib, nib, _MM_SHUFFLE(3, 1, 2, 0)));
#pragma GCC unroll 4
      for (int i = 0; i < N; i++) {
        const ActBlock* a = x.blocks(i) + 8 * sb;
        acc[i] = _mm512_fmadd_ps(dot4(u, load2(a[2 * k].q, a[2 * k + 1].q)), _mm512_permutexvar_ps(spread32(k), f[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - 128.f * _mm512_reduce_add_ps(offset[i]);
}

CTXR_ACTS_SIGNATURE(q3_k_acts) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  __m512 acc[N], offset[N];
  for (int i = 0; i < N; i++) acc[i] = offset[i] = _mm512_setzero_ps();
  const __m256i m2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ3_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    alignas(16) int8_t s8[16];
    q3k_scales(blk.scales, s8);
    const __m512 sd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s8)))), _mm512_set1_ps(_cvtsh_ss(blk.d)));
    __m512 f[N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      f[i] = _mm512_mul_ps(sd, _mm512_permutexvar_ps(dup_pairs(), _mm512_castps256_ps512(_mm256_loadu_ps(x.d(i) + 8 * sb))));
      offset[i] = _mm512_fmadd_ps(sd, _mm512_loadu_ps(x.sums(i) + 16 * sb), offset[i]);
    }
    const __m256i hm = load256(blk.hmask);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j += 2) {
        const int g = 4 * h + j;
        const __m256i bit0 = _mm256_set1_epi8(static_cast<char>(1 << g)), bit1 = _mm256_set1_epi8(static_cast<char>(2 << g));
        const __m256i raw = load256(blk.qs + 32 * h);
        // The third bit: + 4 where hmask's bit g (g + 1) is set.
        const __m256i low0 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2), low1 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j + 2), m2);
        const __m512i q = join(_mm256_mask_add_epi8(low0, _mm256_test_epi8_mask(hm, bit0), low0, four), _mm256_mask_add_epi8(low1, _mm256_test_epi8_mask(hm, bit1), low1, four));
#pragma GCC unroll 4
        for (int i = 0; i < N; i++) {
          const ActBlock* a = x.blocks(i) + 8 * sb;
          acc[i] = _mm512_fmadd_ps(dot4(q, load2(a[g].q, a[g + 1].q)), _mm512_permutexvar_ps(spread16(g / 2), f[i]), acc[i]);
        }
      }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - 4.f * _mm512_reduce_add_ps(offset[i]);
}

CTXR_ACTS_SIGNATURE(q2_k_acts) {
  const ActRows x{a0, ad, adsum16, stride};
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  __m512 acc[N], mins[N];
  for (int i = 0; i < N; i++) acc[i] = mins[i] = _mm512_setzero_ps();
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m512i m4x32 = _mm512_set1_epi32(15);
  for (int sb = 0; sb < nb / 8; sb++) {
    const BlockQ2_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(blk));
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m512 scd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(sc, m4x32)), _mm512_set1_ps(_cvtsh_ss(blk.d)));
    const __m512 mnd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)), _mm512_set1_ps(_cvtsh_ss(blk.dmin)));
    __m512 f[N];
#pragma GCC unroll 4
    for (int i = 0; i < N; i++) {
      f[i] = _mm512_mul_ps(scd, _mm512_permutexvar_ps(dup_pairs(), _mm512_castps256_ps512(_mm256_loadu_ps(x.d(i) + 8 * sb))));
      mins[i] = _mm512_fmadd_ps(mnd, _mm512_loadu_ps(x.sums(i) + 16 * sb), mins[i]);
    }
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j += 2) {
        const int g = 4 * h + j;
        const __m256i raw = load256(blk.qs + 32 * h);
        const __m512i u = join(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m2), _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j + 2), m2));
#pragma GCC unroll 4
        for (int i = 0; i < N; i++) {
          const ActBlock* a = x.blocks(i) + 8 * sb;
          acc[i] = _mm512_fmadd_ps(dot4(u, load2(a[g].q, a[g + 1].q)), _mm512_permutexvar_ps(spread16(g / 2), f[i]), acc[i]);
        }
      }
  }
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(mins[i]);
}

#undef CTXR_ACTS_SIGNATURE

}  // namespace

QuantDotActsFn quant_dot_superblock_acts_avx512(DType t, int n) {
  static constexpr QuantDotActsFn q2_k[] = {q2_k_acts<1>, q2_k_acts<2>, q2_k_acts<3>, q2_k_acts<4>};
  static constexpr QuantDotActsFn q3_k[] = {q3_k_acts<1>, q3_k_acts<2>, q3_k_acts<3>, q3_k_acts<4>};
  static constexpr QuantDotActsFn iq4_xs[] = {iq4_xs_acts<1>, iq4_xs_acts<2>, iq4_xs_acts<3>, iq4_xs_acts<4>};
  static_assert(quant_dot_max_acts() == 4, "the activation-group kernels are instantiated for 1..4 rows");
  if (n < 1 || n > quant_dot_max_acts()) return nullptr;
  switch (t) {
    case DType::Q2_K: return q2_k[n - 1];
    case DType::Q3_K: return q3_k[n - 1];
    case DType::IQ4_XS: return iq4_xs[n - 1];
    default: return nullptr;
  }
}

}  // namespace ctxr
