#include "cpu/half_linear.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/avx2_reduce.h"
#include "cpu/gemm.h"
#include "halfs.h"

namespace ctxr {

namespace {

// Up to this many activation rows the row dot products (each weight row read once for all of
// them); above, the GEMM. Measured (--bench-linear f16 M 8192 2048, one thread, AVX-512, best
// of 3): M = 16 rows 6.4 ms, GEMM 10.6; M = 24 12.2 / 12.0; M = 32 14.7 / 15.1.
constexpr int kRowsMax = 16;
constexpr int kChunk = 16;  // weight rows per OpenMP work item

template <bool BF16>
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}

template <bool BF16>
inline float widen1(uint16_t h) {
  return BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// R weight rows × M activation rows: R·M accumulators of 8 lanes; each weight vector is widened
// once and meets the M activation rows.
template <int R, int M, bool BF16>
void block_avx2(const uint16_t* w, int cols, const float* x, float* y, size_t ldy, const float* bias) {
  __m256 acc[M][R];
  for (int i = 0; i < M; i++)
    for (int r = 0; r < R; r++) acc[i][r] = _mm256_setzero_ps();
  auto step = [&](int c) {
    __m256 wv[R];
    for (int r = 0; r < R; r++) wv[r] = load8<BF16>(w + static_cast<size_t>(r) * cols + c);
    for (int i = 0; i < M; i++) {
      const __m256 xv = _mm256_loadu_ps(x + static_cast<size_t>(i) * cols + c);
      for (int r = 0; r < R; r++) acc[i][r] = _mm256_fmadd_ps(wv[r], xv, acc[i][r]);
    }
  };
  // The hardware prefetcher starts late on each new row (a row of a 2048-wide matrix is one
  // 4 KB page): the lines of the rows two blocks on are asked for while these are summed, into L2
  // (half_dot_avx512.cpp says why).
  const uint16_t* next = w + static_cast<size_t>(2 * R) * cols;
  int c = 0;
  for (; c + 32 <= cols; c += 32) {
    for (int r = 0; r < R; r++) _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<size_t>(r) * cols + c), _MM_HINT_T1);
    step(c);
    step(c + 8);
    step(c + 16);
    step(c + 24);
  }
  for (; c + 8 <= cols; c += 8) step(c);
  for (int i = 0; i < M; i++)
    for (int r = 0; r < R; r++) {
      float s = hsum8(acc[i][r]);
      for (int t = c; t < cols; t++) s += widen1<BF16>(w[static_cast<size_t>(r) * cols + t]) * x[static_cast<size_t>(i) * cols + t];
      y[static_cast<size_t>(i) * ldy + r] = s + (bias ? bias[r] : 0.f);
    }
}

template <int R, bool BF16>
void rows_pass_avx2(const uint16_t* w, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  constexpr int M = 2;
  int i = 0;
  for (; i + M <= n; i += M) block_avx2<R, M, BF16>(w, cols, x + static_cast<size_t>(i) * cols, y + i * ldy, ldy, bias);
  if (i < n) block_avx2<R, 1, BF16>(w, cols, x + static_cast<size_t>(i) * cols, y + i * ldy, ldy, bias);
}

template <bool BF16>
void rows_avx2(const uint16_t* w, int rows, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  constexpr int R = 4;
  int r = 0;
  for (; r + R <= rows; r += R) rows_pass_avx2<R, BF16>(w + static_cast<size_t>(r) * cols, cols, x, n, y + r, ldy, bias ? bias + r : nullptr);
  for (; r < rows; r++) rows_pass_avx2<1, BF16>(w + static_cast<size_t>(r) * cols, cols, x, n, y + r, ldy, bias ? bias + r : nullptr);
}

void half_rows_avx2_fn(const uint16_t* w, bool bf16, int rows, int cols, const float* x, int n, float* y, size_t ldy, const float* bias) {
  if (bf16) rows_avx2<true>(w, rows, cols, x, n, y, ldy, bias);
  else rows_avx2<false>(w, rows, cols, x, n, y, ldy, bias);
}

void linear_rows(const float* x, int n, const HalfMatrix& w, const float* bias, float* y, int threads, CpuIsa isa) {
  const HalfRowsFn fn = isa == CpuIsa::Avx512Vnni ? half_rows_avx512() : half_rows_avx2();
  // Work items of kChunk rows, none straddling two parts.
  std::vector<int> first_chunk{0};
  for (const HalfRows& p : w.parts) first_chunk.push_back(first_chunk.back() + (p.rows + kChunk - 1) / kChunk);
  const int chunks = first_chunk.back();
  const bool parallel = static_cast<double>(w.rows) * w.cols * n >= 1 << 16;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int c = 0; c < chunks; c++) {
    size_t p = 0;
    while (c >= first_chunk[p + 1]) p++;
    const HalfRows& part = w.parts[p];
    const int r0 = (c - first_chunk[p]) * kChunk, r1 = std::min(part.rows, r0 + kChunk);
    const int row = part.first_row + r0;
    fn(part.data + static_cast<size_t>(r0) * w.cols, part.dtype == DType::BF16, r1 - r0, w.cols, x, n, y + row, w.rows, bias ? bias + row : nullptr);
  }
}

}  // namespace

HalfRowsFn half_rows_avx2() { return half_rows_avx2_fn; }

const HalfRows& HalfMatrix::part_of(int row) const {
  for (const HalfRows& p : parts)
    if (row < p.first_row + p.rows) return p;
  throw std::out_of_range("HalfMatrix row");
}

void HalfMatrix::widen_row(int row, float* out) const {
  const HalfRows& p = part_of(row);
  half_to_f32(p.data + static_cast<size_t>(row - p.first_row) * cols, p.dtype == DType::BF16, cols, out);
}

void half_to_f32(const uint16_t* h, bool bf16, size_t n, float* out) {
  size_t i = 0;
  if (bf16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<true>(h + i));
    for (; i < n; i++) out[i] = bf16_to_f32(h[i]);
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<false>(h + i));
    for (; i < n; i++) out[i] = f16_to_f32(h[i]);
  }
}

int half_linear_rows_max() { return kRowsMax; }

void half_linear(const float* x, int n, const HalfMatrix& w, const float* bias, float* y, int threads, CpuIsa isa, int path) {
  if (n <= 0) return;
  if (threads <= 0) threads = omp_get_max_threads();
  if (path == 0) {
    static const char* forced = std::getenv("CTXR_HALF_PATH");  // rows | gemm, for measurements
    if (forced && std::strcmp(forced, "rows") == 0) path = 1;
    if (forced && std::strcmp(forced, "gemm") == 0) path = 2;
  }
  if (path == 0) path = n <= kRowsMax ? 1 : 2;
  if (path == 1) return linear_rows(x, n, w, bias, y, threads, isa);
  for (const HalfRows& p : w.parts)
    sgemm_half(x, n, p.data, p.dtype == DType::BF16, p.rows, w.cols, bias ? bias + p.first_row : nullptr, y + p.first_row, w.rows, threads);
}

}  // namespace ctxr
