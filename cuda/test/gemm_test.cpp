// sgemm_packed against a double-precision reference: edges of every blocking dimension, the
// unpacked small-m (decode) path, model-sized prefill shapes, 1 and 2 threads, with and without bias.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/gemm.h"
#include "runner_test.h"

namespace {

using ctxr::PackedB;

constexpr float kGuard = -12345.5f;
constexpr int kGuardLen = 37;

struct Problem {
  int m, n, k;
  std::vector<float> a, b, bias;  // bias empty: none
};

Problem make_problem(int m, int n, int k, bool with_bias, uint32_t seed, bool integers = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  std::uniform_int_distribution<int> small(-3, 3);
  auto draw = [&] { return integers ? static_cast<float>(small(rng)) : real(rng); };
  Problem p{m, n, k, {}, {}, {}};
  p.a.resize(static_cast<size_t>(m) * k);
  p.b.resize(static_cast<size_t>(n) * k);
  for (auto& x : p.a) x = draw();
  for (auto& x : p.b) x = draw();
  if (with_bias) {
    p.bias.resize(n);
    for (auto& x : p.bias) x = draw();
  }
  return p;
}

// Runs sgemm_packed into a NaN-filled C (so reading C before writing it shows) surrounded by
// guard values; checks the guards and returns C.
std::vector<float> run(const Problem& p, const PackedB* pb, int threads) {
  const size_t size = static_cast<size_t>(p.m) * p.n;
  std::vector<float> buf(size + 2 * kGuardLen, kGuard);
  std::fill(buf.begin() + kGuardLen, buf.begin() + kGuardLen + size, std::numeric_limits<float>::quiet_NaN());
  ctxr::sgemm_packed(p.a.data(), p.m, pb, p.bias.empty() ? nullptr : p.bias.data(), buf.data() + kGuardLen, threads);
  for (int i = 0; i < kGuardLen; i++) {
    CHECK_MSG(buf[i] == kGuard && buf[kGuardLen + size + i] == kGuard,
              "wrote outside C, m=" << p.m << " n=" << p.n << " k=" << p.k << " threads=" << threads);
  }
  return std::vector<float>(buf.begin() + kGuardLen, buf.begin() + kGuardLen + size);
}

// Compares rows of C (all, or every `row_step`-th plus the last) with a double reference.
// The bound is the worst case for a float sum of k products, (k + 4)·2⁻²⁴·(Σ|a·b| + |bias|),
// far below the error of a dropped or misplaced term.
void check_against_reference(const Problem& p, const std::vector<float>& c, int threads, int row_step = 1) {
  const double u = std::ldexp(1.0, -24);
  for (int i = 0; i < p.m; i = (i + row_step < p.m || i == p.m - 1) ? i + row_step : p.m - 1) {
    const float* ar = p.a.data() + static_cast<size_t>(i) * p.k;
    for (int j = 0; j < p.n; j++) {
      const float* br = p.b.data() + static_cast<size_t>(j) * p.k;
      double ref = p.bias.empty() ? 0.0 : p.bias[j];
      double mag = std::fabs(ref);
      for (int t = 0; t < p.k; t++) {
        ref += static_cast<double>(ar[t]) * br[t];
        mag += std::fabs(static_cast<double>(ar[t]) * br[t]);
      }
      const double got = c[static_cast<size_t>(i) * p.n + j];
      const double tol = (p.k + 4) * u * mag + 1e-30;
      CHECK_MSG(std::fabs(got - ref) <= tol, "m=" << p.m << " n=" << p.n << " k=" << p.k << " bias=" << !p.bias.empty()
                                                  << " threads=" << threads << ": C[" << i << "][" << j << "] = " << got
                                                  << ", reference " << ref << ", tolerance " << tol);
    }
    if (i == p.m - 1) break;
  }
}

void check_shape(int m, int n, int k, bool with_bias, int threads, uint32_t seed, int row_step = 1) {
  Problem p = make_problem(m, n, k, with_bias, seed);
  PackedB* pb = ctxr::pack_b(p.b.data(), n, k);
  std::vector<float> c = run(p, pb, threads);
  ctxr::free_packed_b(pb);
  check_against_reference(p, c, threads, row_step);
}

}  // namespace

RUNNER_TEST(gemm, packed_dims) {
  std::vector<float> b(37 * 300, 1.f);
  PackedB* pb = ctxr::pack_b(b.data(), 37, 300);
  CHECK_EQ(ctxr::packed_b_rows(pb), 37);
  CHECK_EQ(ctxr::packed_b_cols(pb), 300);
  ctxr::free_packed_b(pb);
}

// Small integers: every product and partial sum is exact in float, so any layout or edge
// mistake shows as an inexact result.
RUNNER_TEST(gemm, exact_integers) {
  uint32_t seed = 1;
  for (int m : {1, 2, 3, 4, 5, 6, 7, 12, 13, 19, 150})
    for (int n : {1, 5, 16, 17, 40})
      for (int k : {1, 3, 64, 255, 256, 257, 700})
        for (int threads : {1, 2}) {
          Problem p = make_problem(m, n, k, (seed & 1) != 0, seed, true);
          seed++;
          PackedB* pb = ctxr::pack_b(p.b.data(), n, k);
          std::vector<float> c = run(p, pb, threads);
          ctxr::free_packed_b(pb);
          for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
              double ref = p.bias.empty() ? 0.0 : p.bias[j];
              for (int t = 0; t < k; t++) ref += static_cast<double>(p.a[static_cast<size_t>(i) * k + t]) * p.b[static_cast<size_t>(j) * k + t];
              CHECK_MSG(c[static_cast<size_t>(i) * n + j] == ref, "m=" << m << " n=" << n << " k=" << k << " threads=" << threads
                                                                     << ": C[" << i << "][" << j << "] = " << c[static_cast<size_t>(i) * n + j]
                                                                     << ", expected " << ref);
            }
        }
}

RUNNER_TEST(gemm, edge_shapes) {
  uint32_t seed = 100;
  for (int m : {1, 2, 3, 5, 6, 7, 11, 12, 13, 17, 25, 145, 151})
    for (int n : {1, 3, 15, 16, 17, 33})
      for (int k : {1, 2, 5, 16, 255, 256, 257, 300, 513})
        for (int threads : {1, 2}) {
          const uint32_t s = seed++;
          check_shape(m, n, k, (s & 1) != 0, threads, s);
        }
}

RUNNER_TEST(gemm, random_shapes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 150; i++) {
    const int m = 1 + static_cast<int>(rng() % 300), n = 1 + static_cast<int>(rng() % 300);
    const int k = 1 + static_cast<int>(rng() % 900), threads = 1 + static_cast<int>(rng() % 3);
    check_shape(m, n, k, rng() & 1, threads, 1000 + i);
  }
}

// Decode-sized batches at model size: the unpacked path (m ≤ 2) and the packed one with every
// row remainder.
RUNNER_TEST(gemm, decode_rows) {
  for (int m = 1; m <= 20; m++)
    for (int threads : {1, 2}) check_shape(m, m % 3 == 0 ? 2304 : 777, 768, m % 2 == 0, threads, 2000 + m);
}

// Prefill of the tiny test model (hidden 64, intermediate 128, 4 heads, 2 kv heads, vocab 261).
RUNNER_TEST(gemm, tiny_model_prefill) {
  const int shapes[][2] = {{128, 64}, {256, 64}, {64, 128}, {64, 64}, {261, 64}};
  uint32_t seed = 3000;
  for (const auto& s : shapes)
    for (int threads : {1, 2}) {
      const uint32_t r = seed++;
      check_shape(512, s[0], s[1], r % 2 == 0, threads, r);
    }
}

// Prefill shapes of a ~100M-parameter Llama (hidden 768, intermediate 2048), rows sampled.
RUNNER_TEST(gemm, llama_prefill_shapes) {
  const int shapes[][3] = {{512, 2304, 768}, {512, 4096, 768}, {512, 768, 2048}, {512, 768, 768}, {4096, 768, 768}};
  uint32_t seed = 4000;
  for (const auto& s : shapes)
    for (int threads : {1, 2}) {
      const uint32_t r = seed++;
      check_shape(s[0], s[1], s[2], r % 2 == 0, threads, r, 37);
    }
}

// Each element is accumulated in the same order whatever the thread count.
RUNNER_TEST(gemm, threads_bitwise_equal) {
  const int shapes[][3] = {{1, 100, 300}, {5, 33, 700}, {200, 150, 600}, {97, 1000, 257}, {600, 64, 64}};
  uint32_t seed = 5000;
  for (const auto& s : shapes) {
    Problem p = make_problem(s[0], s[1], s[2], true, seed++);
    PackedB* pb = ctxr::pack_b(p.b.data(), s[1], s[2]);
    std::vector<float> one = run(p, pb, 1);
    for (int threads : {2, 3, 4}) {
      std::vector<float> c = run(p, pb, threads);
      CHECK_MSG(c == one, "m=" << s[0] << " n=" << s[1] << " k=" << s[2] << ": threads=" << threads << " differs from threads=1");
    }
    ctxr::free_packed_b(pb);
  }
}
