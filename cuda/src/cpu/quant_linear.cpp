#include "cpu/quant_linear.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm.h"
#include "cpu/quant_gemm.h"
#include "quant.h"

namespace ctxr {

namespace {

// Measured (--bench-linear 512 4096 4096, 2 threads, AVX-512 VNNI, quiet samples of a noisy
// machine): int8 GEMM Q8_0 18–22 ms, Q4_0 22–25, Q4_K 18–47, Q6_K 28; row dots Q8_0 90, Q4_0 145;
// f32 tiles Q4_K 87, Q6_K 91; the f32 GEMM on f32 weights 76. Up to 16 rows the row dots stay.
constexpr int kInt8MaxRows = 16;
constexpr int kTileRows = 256;  // weight rows dequantized per f32 GEMM tile (4 MB at k = 4096)

void linear_int8(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa) {
  const int nb = w.cols / 32;
  std::vector<ActBlock> act(static_cast<size_t>(n) * nb);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 1)
  for (int i = 0; i < n; i++) quantize_activations(x + static_cast<size_t>(i) * w.cols, w.cols, act.data() + static_cast<size_t>(i) * nb);
  // The activation-group kernels read the activations' scales and scaled sums as contiguous f32
  // (quant_dot.h).
  const auto grouped = [&](DType t) { return isa == CpuIsa::Avx512Vnni && quant_dot_acts_avx512(t, 1) != nullptr; };
  bool any_grouped = false;
  for (const QuantRows& p : w.parts) any_grouped = any_grouped || grouped(p.dtype);
  std::vector<float> ad, adsum16;
  if (any_grouped) {
    ad.resize(act.size());
    adsum16.resize(2 * act.size());
    for (size_t b = 0; b < act.size(); b++) {
      ad[b] = act[b].d;
      adsum16[2 * b] = act[b].d * static_cast<float>(act[b].sum[0]);
      adsum16[2 * b + 1] = act[b].d * static_cast<float>(act[b].sum[1]);
    }
  }
  constexpr int kChunk = 16;
  constexpr int kActs = quant_dot_max_acts();
  // Each thread reads its rows in one front-to-back stream, a row at a time, dotting the row with
  // up to kActs activation rows per kernel call while it is in L1. Interleaving several weight
  // rows (and prefetching ahead by hand) measured at half the memory bandwidth on matrices far
  // larger than the caches: decode's case (BENCHMARKS.md, issue 29 item 6).
  const int chunks = (w.rows + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int c = 0; c < chunks; c++) {
    const int r0 = c * kChunk, r1 = std::min(w.rows, r0 + kChunk);
    for (int r = r0; r < r1; r++) {
      const QuantRows& part = w.part_of(r);
      const uint8_t* row = part.data + static_cast<size_t>(r - part.first_row) * part.row_bytes;
      const float b = bias ? bias[r] : 0.f;
      if (grouped(part.dtype)) {
        for (int i0 = 0; i0 < n; i0 += kActs) {
          const int m = std::min(kActs, n - i0);
          const size_t at = static_cast<size_t>(i0) * nb;
          float out[kActs];
          quant_dot_acts_avx512(part.dtype, m)(row, act.data() + at, ad.data() + at, adsum16.data() + 2 * at, nb, nb, out);
          for (int k = 0; k < m; k++) y[static_cast<size_t>(i0 + k) * w.rows + r] = out[k] + b;
        }
        continue;
      }
      const QuantDotFn dot = quant_dot(part.dtype, isa);
      for (int i = 0; i < n; i++) y[static_cast<size_t>(i) * w.rows + r] = dot(row, act.data() + static_cast<size_t>(i) * nb, nb) + b;
    }
  }
}

void linear_f32_tiles(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads) {
  std::vector<float> tile(static_cast<size_t>(kTileRows) * w.cols), out(static_cast<size_t>(n) * kTileRows);
  for (int r0 = 0; r0 < w.rows; r0 += kTileRows) {
    const int rows = std::min(kTileRows, w.rows - r0);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) w.dequantize(r0 + r, 1, tile.data() + static_cast<size_t>(r) * w.cols);
    PackedB* packed = pack_b(tile.data(), rows, w.cols);
    sgemm_packed(x, n, packed, bias ? bias + r0 : nullptr, out.data(), threads);
    free_packed_b(packed);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 64)
    for (int i = 0; i < n; i++)
      std::memcpy(y + static_cast<size_t>(i) * w.rows + r0, out.data() + static_cast<size_t>(i) * rows, static_cast<size_t>(rows) * 4);
  }
}

}  // namespace

const QuantRows& QuantMatrix::part_of(int row) const {
  for (const QuantRows& p : parts)
    if (row < p.first_row + p.rows) return p;
  throw std::out_of_range("QuantMatrix row");
}

void QuantMatrix::dequantize(int first_row, int count, float* out) const {
  for (int r = first_row; r < first_row + count; r++) {
    const QuantRows& p = part_of(r);
    dequantize_row(p.dtype, p.data + static_cast<size_t>(r - p.first_row) * p.row_bytes, cols, out + static_cast<size_t>(r - first_row) * cols);
  }
}

int quant_linear_int8_max_rows() { return kInt8MaxRows; }

void quant_linear(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa, int path) {
  if (n <= 0) return;
  if (threads <= 0) threads = omp_get_max_threads();
  if (path == 0) {
    static const char* forced = std::getenv("CTXR_QUANT_PATH");  // int8 | f32 | gemm, for measurements
    if (forced && std::strcmp(forced, "int8") == 0) path = 1;
    if (forced && std::strcmp(forced, "f32") == 0) path = 2;
    if (forced && std::strcmp(forced, "gemm") == 0) path = 3;
  }
  if (path == 1) return linear_int8(x, n, w, bias, y, threads, isa);
  if (path == 2) return linear_f32_tiles(x, n, w, bias, y, threads);
  if (path == 3 && quant_gemm_supports(w, isa)) return quant_gemm(x, n, w, bias, y, threads, isa);
  // Decode-sized n: one weight row × one activation row per dot product. Prefill: the blocked
  // int8 GEMM (quant_gemm.h); where it does not take the matrix, the row dots.
  if (n <= kInt8MaxRows || !quant_gemm_supports(w, isa)) linear_int8(x, n, w, bias, y, threads, isa);
  else quant_gemm(x, n, w, bias, y, threads, isa);
}

}  // namespace ctxr
