// Building blocks of the AVX-512 VNNI dot kernels (quant_dot*_avx512.cpp): two 32-element blocks
// in one 512-bit register, unsigned weight bytes × signed activation bytes summed four at a time
// into int32 lanes by dpbusd, and per-block f32 factors on lanes 0..7 and 8..15. Only the
// kernels that cpu_isa.cpp picks on a CPU with AVX-512 VNNI call these.
#pragma once
#include <immintrin.h>

// The target of every AVX-512 kernel function (no file-wide flags: nothing compiled with it runs
// unless the dispatch chose it). Every CPU with AVX-512 VNNI also has FMA, F16C and BMI2.
#define CTXR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,bmi2")))

// GCC 12 flags the undefined upper half of _mm512_cast*256_*512 (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ctxr::avx512 {

CTXR_AVX512 inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
CTXR_AVX512 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
CTXR_AVX512 inline __m512i load2(const void* lo, const void* hi) { return join(load256(lo), load256(hi)); }
// Lanes 0..7 = s0, 8..15 = s1 (AVX512F only: no DQ needed).
CTXR_AVX512 inline __m512 scales2(float s0, float s1) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(s0))), _mm256_castps_pd(_mm256_set1_ps(s1)), 1));
}
// Σ of four u·s byte products per int32 lane.
CTXR_AVX512 inline __m512i dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
// The same as floats.
CTXR_AVX512 inline __m512 dot4(__m512i u, __m512i s) { return _mm512_cvtepi32_ps(dpbusd(u, s)); }

}  // namespace ctxr::avx512
