#include "cpu/quant_linear.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "cpu/gemm.h"
#include "cpu/quant_act_groups.h"
#include "cpu/quant_gemm.h"
#include "cpu/quantize_activations.h"
#include "quant.h"

namespace ctxr {

namespace {

// Measured (--bench-linear 512 4096 4096, 2 threads, AVX-512 VNNI, quiet samples of a noisy
// machine): int8 GEMM Q8_0 18–22 ms, Q4_0 22–25, Q4_K 18–47, Q6_K 28; row dots Q8_0 90, Q4_0 145;
// f32 tiles Q4_K 87, Q6_K 91; the f32 GEMM on f32 weights 76. Up to 16 rows the row dots stay.
constexpr int kInt8MaxRows = 16;
constexpr int kTileRows = 256;  // weight rows dequantized per f32 GEMM tile (4 MB at k = 4096)
// quant_linear_jobs: row dots in one parallel region up to this many rows a job, the int8 GEMM
// above. Measured on a qwen3moe file (64 experts, top-8, 1024 x 512 experts in Q4_K, 2 threads, a
// quiet machine): a 512-token prefill (~32 tokens an expert) at 1,290 tok/s with 16, 1,250 with
// 32, 1,150 with 64, 950 with 128: the GEMM pays from a few dozen rows on.
constexpr int kJobsMaxRows = kInt8MaxRows;

// Decode's kernel families on AVX-512 VNNI: per-256 activations (Q4_K, Q6_K), per-32 activations
// with contiguous side data (the other quantized types), or neither (AVX2: quant_dot).
// Groups4: per-32 activations also grouped four blocks at a time (quant_act_groups.h; MXFP4).
enum class DecodeKernel { PerRowDot, Acts32, Acts256, Groups4 };

DecodeKernel decode_kernel(DType t, CpuIsa isa) {
  if (isa != CpuIsa::Avx512Vnni) return DecodeKernel::PerRowDot;
  if (quant_dot_superacts_avx512(t, 1) != nullptr) return DecodeKernel::Acts256;
  static const bool ungrouped = std::getenv("CTXR_DECODE_UNGROUPED") != nullptr;  // for measurements
  if (!ungrouped && quant_dot_groups_avx512(t, 1) != nullptr) return DecodeKernel::Groups4;
  if (quant_dot_acts_avx512(t, 1) != nullptr) return DecodeKernel::Acts32;
  return DecodeKernel::PerRowDot;
}

// The activation rows in each form some part of the matrix takes.
struct DecodeActivations {
  int nb = 0, nsb = 0, ng = 0;
  std::vector<ActBlock> blocks;
  std::vector<ActGroup4> groups;
  std::vector<float> ad, adsum16;  // contiguous side data of `blocks` (quant_dot.h)
  std::vector<ActSuperBlock> superblocks;

  DecodeActivations(const float* x, int n, const QuantMatrix& w, int threads, CpuIsa isa) : nb(w.cols / 32), nsb(w.cols / 256), ng((w.cols / 32 + 3) / 4) {
    bool per32 = false, acts32 = false, per256 = false, grouped = false;
    DType grouped_type = DType::F32;
    for (const QuantRows& p : w.parts) {
      const DecodeKernel k = decode_kernel(p.dtype, isa);
      per32 = per32 || k != DecodeKernel::Acts256;
      acts32 = acts32 || k == DecodeKernel::Acts32;
      per256 = per256 || k == DecodeKernel::Acts256;
      if (k == DecodeKernel::Groups4) grouped = true, grouped_type = p.dtype;
    }
    if (per32) blocks.resize(static_cast<size_t>(n) * nb);
    if (per256) superblocks.resize(static_cast<size_t>(n) * nsb);
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 1)
    for (int i = 0; i < n; i++) {
      const float* xi = x + static_cast<size_t>(i) * w.cols;
      if (per32) quantize_activations(xi, w.cols, blocks.data() + static_cast<size_t>(i) * nb, isa);
      if (per256) quantize_activations_256(xi, w.cols, superblocks.data() + static_cast<size_t>(i) * nsb, isa);
    }
    if (grouped) {
      groups.resize(static_cast<size_t>(n) * ng);
      for (int i = 0; i < n; i++) group_activations4(blocks.data() + static_cast<size_t>(i) * nb, nb, quant_dot_groups_offset(grouped_type), groups.data() + static_cast<size_t>(i) * ng);
    }
    if (!acts32) return;
    ad.resize(blocks.size());
    adsum16.resize(2 * blocks.size());
    for (size_t b = 0; b < blocks.size(); b++) {
      ad[b] = blocks[b].d;
      adsum16[2 * b] = blocks[b].d * static_cast<float>(blocks[b].sum[0]);
      adsum16[2 * b + 1] = blocks[b].d * static_cast<float>(blocks[b].sum[1]);
    }
  }
};

constexpr int kChunk = 16;  // weight rows a thread takes at a time

// Rows [r0, r1) of y = x · Wᵀ (+ bias) by int8 dot products over the quantized activations.
// Each thread reads its rows in one front-to-back stream, a row at a time, dotting the row with
// up to kActs activation rows per kernel call while it is in L1. Interleaving several weight
// rows (and prefetching ahead by hand) measured at half the memory bandwidth on matrices far
// larger than the caches: decode's case (BENCHMARKS.md, issue 29 item 6).
void int8_rows(const DecodeActivations& act, int n, const QuantMatrix& w, const float* bias, float* y, int r0, int r1, CpuIsa isa) {
  const int nb = act.nb, nsb = act.nsb, ng = act.ng;
  constexpr int kActs = quant_dot_max_acts();
  for (const QuantRows& part : w.parts) {
    const int lo = std::max(r0, part.first_row), hi = std::min(r1, part.first_row + part.rows);
    if (lo >= hi) continue;
    // The part's kernel, resolved once for its rows: for n activation rows, full groups of
    // kActs and then the rest.
    const DecodeKernel kernel = decode_kernel(part.dtype, isa);
    const int tail = n % kActs;
    const QuantDotFn dot = kernel == DecodeKernel::PerRowDot ? quant_dot(part.dtype, isa) : nullptr;
    QuantDotSuperActsFn super[2] = {}; QuantDotGroupsFn grouped[2] = {}; QuantDotActsFn acts[2] = {};
    for (int k = 0; k < 2; k++) {
      const int m = k == 0 ? kActs : std::max(tail, 1);
      if (kernel == DecodeKernel::Acts256) super[k] = quant_dot_superacts_avx512(part.dtype, m);
      if (kernel == DecodeKernel::Groups4) grouped[k] = quant_dot_groups_avx512(part.dtype, m);
      if (kernel == DecodeKernel::Acts32) acts[k] = quant_dot_acts_avx512(part.dtype, m);
    }
    for (int r = lo; r < hi; r++) {
      const uint8_t* row = part.data + static_cast<size_t>(r - part.first_row) * part.row_bytes;
      const float b = bias ? bias[r] : 0.f;
      if (dot) {
        for (int i = 0; i < n; i++) y[static_cast<size_t>(i) * w.rows + r] = dot(row, act.blocks.data() + static_cast<size_t>(i) * nb, nb) + b;
        continue;
      }
      for (int i0 = 0; i0 < n; i0 += kActs) {
        const int m = std::min(kActs, n - i0), k = m == kActs ? 0 : 1;
        float out[kActs];
        const size_t at = static_cast<size_t>(i0) * nb;
        if (super[k]) super[k](row, act.superblocks.data() + static_cast<size_t>(i0) * nsb, nsb, nsb, out);
        else if (grouped[k]) grouped[k](row, act.groups.data() + static_cast<size_t>(i0) * ng, ng, nb, out);
        else acts[k](row, act.blocks.data() + at, act.ad.data() + at, act.adsum16.data() + 2 * at, nb, nb, out);
        for (int j = 0; j < m; j++) y[static_cast<size_t>(i0 + j) * w.rows + r] = out[j] + b;
      }
    }
  }
}

void linear_int8(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa) {
  const DecodeActivations act(x, n, w, threads, isa);
  const int chunks = (w.rows + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int c = 0; c < chunks; c++) int8_rows(act, n, w, bias, y, c * kChunk, std::min(w.rows, (c + 1) * kChunk), isa);
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

void quant_linear_jobs(const QuantLinearJob* jobs, int count, int threads, CpuIsa isa) {
  if (threads <= 0) threads = omp_get_max_threads();
  static const char* forced = std::getenv("CTXR_QUANT_PATH");
  // Jobs of many rows take the int8 GEMM one at a time; the rest share one parallel region of
  // row dots over all their row chunks (a decode step's experts: a few small matrices whose own
  // regions would cost more than their rows; a prefill's: a few dozen tokens each).
  std::vector<const QuantLinearJob*> small;
  for (int j = 0; j < count; j++) {
    if (jobs[j].n <= 0) continue;
    if (jobs[j].n <= kJobsMaxRows && !forced) small.push_back(&jobs[j]);
    else quant_linear(jobs[j].x, jobs[j].n, *jobs[j].w, jobs[j].bias, jobs[j].y, threads, isa);
  }
  const int jobs_small = static_cast<int>(small.size());
  std::vector<std::optional<DecodeActivations>> acts(jobs_small);
  std::vector<int> first_chunk(jobs_small + 1, 0);
  for (int j = 0; j < jobs_small; j++) first_chunk[j + 1] = first_chunk[j] + (small[j]->w->rows + kChunk - 1) / kChunk;
  // One region: the jobs' activations quantized in parallel (a decode step's dozen experts would
  // otherwise quantize on one thread while the other waits), then every job's row chunks.
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int j = 0; j < jobs_small; j++) acts[j].emplace(small[j]->x, small[j]->n, *small[j]->w, 1, isa);
#pragma omp for schedule(static)
    for (int c = 0; c < first_chunk[jobs_small]; c++) {
      const int j = static_cast<int>(std::upper_bound(first_chunk.begin(), first_chunk.end(), c) - first_chunk.begin()) - 1;
      const QuantLinearJob& job = *small[j];
      const int r0 = (c - first_chunk[j]) * kChunk;
      int8_rows(*acts[j], job.n, *job.w, job.bias, job.y, r0, std::min(job.w->rows, r0 + kChunk), isa);
    }
  }
}

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
