// Placeholder-free simple implementation; the optimized packed kernel replaces this body.
#include "gemm.h"

#include <cstring>
#include <vector>

namespace ctxr {

struct PackedB {
  int n, k;
  std::vector<float> data;
};

PackedB* pack_b(const float* b, int n, int k) {
  auto* p = new PackedB{n, k, std::vector<float>(b, b + static_cast<size_t>(n) * k)};
  return p;
}
void free_packed_b(PackedB* p) { delete p; }
int packed_b_rows(const PackedB* p) { return p->n; }
int packed_b_cols(const PackedB* p) { return p->k; }

void sgemm_packed(const float* a, int m, const PackedB* b, const float* bias, float* c, int threads) {
  const int n = b->n, k = b->k;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      const float* ar = a + static_cast<size_t>(i) * k;
      const float* br = b->data.data() + static_cast<size_t>(j) * k;
      float s = 0;
      for (int x = 0; x < k; x++) s += ar[x] * br[x];
      c[static_cast<size_t>(i) * n + j] = s + (bias ? bias[j] : 0.f);
    }
  }
}

}  // namespace ctxr
