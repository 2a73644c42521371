#include "cpu/moe_ops_cpu.h"

#include <omp.h>

#include <cstddef>

#include "moe_activation.h"

namespace ctxr {

void cpu_expert_activation(const float* x, int n, int ff, const MoeConfig& c, float* out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (static_cast<size_t>(n) * ff > 65536)
  for (int i = 0; i < n; i++) {
    const float* gate = x + static_cast<size_t>(i) * 2 * ff;
    expert_activation_row(gate, gate + ff, ff, c, out + static_cast<size_t>(i) * ff);
  }
}

void cpu_scatter_add_weighted(const float* src, const int32_t* rows, const float* weights, int n, int d, float* dst, int threads) {
  // Rows may repeat (one token's k experts), so the threads split the columns, not the rows.
  const int pieces = static_cast<size_t>(n) * d > 65536 ? threads : 1;
#pragma omp parallel for num_threads(pieces) schedule(static)
  for (int p = 0; p < pieces; p++) {
    const int j0 = static_cast<int>(static_cast<int64_t>(d) * p / pieces), j1 = static_cast<int>(static_cast<int64_t>(d) * (p + 1) / pieces);
    for (int i = 0; i < n; i++) {
      const float w = weights[i];
      const float* s = src + static_cast<size_t>(i) * d;
      float* o = dst + static_cast<size_t>(rows[i]) * d;
      for (int j = j0; j < j1; j++) o[j] += w * s[j];
    }
  }
}

}  // namespace ctxr
