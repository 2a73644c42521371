// linear() for F16 and BF16 weight matrices on the CPU, read where they are (the file mapping),
// never widened whole: y[i][:] = x[i][:] · Wᵀ (+ bias).
//   n ≤ half_linear_rows_max(): row dot products (HalfRowsFn), the weights widened in
//     registers, several weight rows and activation rows per pass, OpenMP over weight rows;
//   larger n: the f32 GEMM with each B micro-panel widened just before use (gemm.h sgemm_half).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend.h"
#include "cpu/quant_dot.h"

namespace ctxr {

struct HalfRows {
  DType dtype;  // F16 or BF16
  int first_row, rows;
  const uint16_t* data;  // rows × cols, row-major
};

struct HalfMatrix {
  int rows = 0, cols = 0;
  std::vector<HalfRows> parts;
  const HalfRows& part_of(int row) const;
  void widen_row(int row, float* out) const;  // row `row` to f32
};

// y[i][r] = Σ_c w[r][c]·x[i][c] (+ bias[r]) for rows r < rows of one dtype (w row-major, cols
// wide) and i < n (x rows contiguous, cols wide; y rows of stride ldy).
using HalfRowsFn = void (*)(const uint16_t* w, bool bf16, int rows, int cols, const float* x, int n, float* y, size_t ldy, const float* bias);
HalfRowsFn half_rows_avx2();    // AVX2 + F16C
HalfRowsFn half_rows_avx512();  // AVX-512 (F, BW, VL); call only where cpu_has_avx512_vnni()

// Which path: 0 = choose by n, 1 = row dot products, 2 = GEMM.
void half_linear(const float* x, int n, const HalfMatrix& w, const float* bias, float* y, int threads, CpuIsa isa, int path = 0);
int half_linear_rows_max();

// n halves (f16, or bf16 where bf16) to f32.
void half_to_f32(const uint16_t* h, bool bf16, size_t n, float* out);

}  // namespace ctxr
