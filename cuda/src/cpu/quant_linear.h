// linear() for quantized weight matrices on the CPU: y[i][:] = x[i][:] · Wᵀ (+ bias) where W's
// rows are ggml blocks kept as in the file (row ranges may differ in format: QuantRows).
//   n ≤ int8_max_rows: activation rows quantized per 32 (quant.h), integer dot products
//     (quant_dot.h), OpenMP over output rows;
//   larger n: the register-blocked int8 GEMM (quant_gemm.h), weights unpacked once per tile;
//   the older f32-tile path (weight rows dequantized to f32, the f32 GEMM) stays for measurements.
#pragma once
#include <vector>

#include "backend.h"
#include "cpu/quant_dot.h"

namespace ctxr {

struct QuantRows {
  DType dtype;
  int first_row, rows;
  const uint8_t* data;
  size_t row_bytes;
};

struct QuantMatrix {
  int rows = 0, cols = 0;
  std::vector<QuantRows> parts;
  const QuantRows& part_of(int row) const;
  void dequantize(int first_row, int rows, float* out) const;  // rows [first_row, +rows) to f32
};

// Which path: 0 = choose by n (quant_linear_int8_max_rows), 1 = int8 dot products, 2 = f32 tiles,
// 3 = the int8 GEMM (int8 dot products where quant_gemm_supports() says no).
void quant_linear(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa, int path = 0);
int quant_linear_int8_max_rows();

// Several quant_linear() calls (y_j = x_j · W_jᵀ + bias_j): the decode-sized ones (n ≤
// quant_linear_int8_max_rows()) by int8 row dots in one parallel region over all their weight
// rows (a decode step's routed experts: small matrices whose own regions would cost more than
// their rows), larger ones by quant_linear() one at a time (the int8 GEMM).
struct QuantLinearJob {
  const float* x;
  int n;
  const QuantMatrix* w;
  const float* bias;
  float* y;
};
void quant_linear_jobs(const QuantLinearJob* jobs, int count, int threads, CpuIsa isa);

}  // namespace ctxr
