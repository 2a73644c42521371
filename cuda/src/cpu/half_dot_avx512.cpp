// AVX-512 row dot products for F16 / BF16 weights (half_linear.h): 16 halves per load widened
// in registers (vcvtph2ps; bf16: zero-extend and shift left 16), masked loads for the last
// columns. Every function carries its target attribute, as in quant_dot_avx512.cpp, so nothing
// here runs unless the dispatch chose AVX-512.
#include <immintrin.h>

#include "cpu/half_linear.h"

// GCC 12 flags the undefined upper half of its own _mm512_reduce_add_ps helpers (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define CTXR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace ctxr {

namespace {

template <bool BF16>
CTXR_AVX512 inline __m512 widen16(__m256i h) {
  if constexpr (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else return _mm512_cvtph_ps(h);
}

// R weight rows × M activation rows, R·M accumulators of 16 lanes.
template <int R, int M, bool BF16>
CTXR_AVX512 void block_avx512(const uint16_t* w, int cols, const float* x, float* y, size_t ldy, const float* bias) {
  __m512 acc[M][R];
  for (int i = 0; i < M; i++)
    for (int r = 0; r < R; r++) acc[i][r] = _mm512_setzero_ps();
  auto step = [&](int c) CTXR_AVX512 {
    __m512 wv[R];
    for (int r = 0; r < R; r++) wv[r] = widen16<BF16>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + static_cast<size_t>(r) * cols + c)));
    for (int i = 0; i < M; i++) {
      const __m512 xv = _mm512_loadu_ps(x + static_cast<size_t>(i) * cols + c);
      for (int r = 0; r < R; r++) acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  };
  // The hardware prefetcher starts late on each new row (a row of a 2048-wide matrix is one
  // 4 KB page): the lines of the rows two blocks on are asked for while these are summed
  // (measured on Zen 4, one thread, 32000 × 2048: 24 → 33 GB/s, q8_0's row dots 34). Into L2
  // (T1), not L1: T0 prefetches held L1's miss buffers and stalled (a third of this loop's
  // samples); gpt-oss-20b's decode step went from 121–139 to 97–125 ms with T1, same runs
  // interleaved, and --bench-linear f16 1 201088 2880 from 30–34 to 33.5–34 GB/s.
  const uint16_t* next = w + static_cast<size_t>(2 * R) * cols;
  int c = 0;
  for (; c + 32 <= cols; c += 32) {
    for (int r = 0; r < R; r++) _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<size_t>(r) * cols + c), _MM_HINT_T1);
    step(c);
    step(c + 16);
  }
  for (; c + 16 <= cols; c += 16) step(c);
  if (c < cols) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (cols - c)) - 1);
    __m512 wv[R];
    for (int r = 0; r < R; r++) wv[r] = widen16<BF16>(_mm256_maskz_loadu_epi16(mask, w + static_cast<size_t>(r) * cols + c));
    for (int i = 0; i < M; i++) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + static_cast<size_t>(i) * cols + c);
      for (int r = 0; r < R; r++) acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  }
  for (int i = 0; i < M; i++)
    for (int r = 0; r < R; r++) y[static_cast<size_t>(i) * ldy + r] = _mm512_reduce_add_ps(acc[i][r]) + (bias ? bias[r] : 0.f);
}

template <int R, bool BF16>
CTXR_AVX512 void rows_pass_avx512(const uint16_t* w, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  constexpr int M = 4;
  int i = 0;
  for (; i + M <= n; i += M) block_avx512<R, M, BF16>(w, cols, x + static_cast<size_t>(i) * cols, y + i * ldy, ldy, bias);
  const float* xi = x + static_cast<size_t>(i) * cols;
  switch (n - i) {
    case 3: block_avx512<R, 3, BF16>(w, cols, xi, y + i * ldy, ldy, bias); break;
    case 2: block_avx512<R, 2, BF16>(w, cols, xi, y + i * ldy, ldy, bias); break;
    case 1: block_avx512<R, 1, BF16>(w, cols, xi, y + i * ldy, ldy, bias); break;
    default: break;
  }
}

template <bool BF16>
CTXR_AVX512 void rows_avx512(const uint16_t* w, int rows, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  constexpr int R = 4;
  int r = 0;
  for (; r + R <= rows; r += R) rows_pass_avx512<R, BF16>(w + static_cast<size_t>(r) * cols, cols, x, n, y + r, ldy, bias ? bias + r : nullptr);
  for (; r < rows; r++) rows_pass_avx512<1, BF16>(w + static_cast<size_t>(r) * cols, cols, x, n, y + r, ldy, bias ? bias + r : nullptr);
}

CTXR_AVX512 void half_rows_avx512_fn(const uint16_t* w, bool bf16, int rows, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  if (bf16) rows_avx512<true>(w, rows, cols, x, n, y, ldy, bias);
  else rows_avx512<false>(w, rows, cols, x, n, y, ldy, bias);
}

}  // namespace

HalfRowsFn half_rows_avx512() { return half_rows_avx512_fn; }

}  // namespace ctxr
