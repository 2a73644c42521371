// The CPU backend's GeGLU with tanh-GELU (Gemma 3's MLP): the vectorized rows against the formula in
// double precision, over the gate's whole range (tails included) and widths with a scalar remainder.
#include <cmath>
#include <random>
#include <vector>

#include "cpu/gemma3_ops_cpu.h"
#include "runner_test.h"

using namespace ctxr;

namespace {

double gelu_tanh_reference(double g) { return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))); }

}  // namespace

RUNNER_TEST(gemma3_ops, gelu_tanh_mul_matches_the_formula) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int ff : {8, 13, 64, 1000}) {
    const int n = 5;
    std::vector<float> x(static_cast<size_t>(n) * 2 * ff), out(static_cast<size_t>(n) * ff);
    for (float& v : x) v = normal(rng);
    // Tails and exact values: far negative (output → -0), far positive (output → g), zero.
    const float edges[] = {-100.0f, -12.0f, -5.0f, 0.0f, 1e-30f, 5.0f, 12.0f, 100.0f};
    for (int e = 0; e < 8 && e < ff; e++) x[e] = edges[e];
    cpu_gelu_tanh_mul(x.data(), n, ff, out.data(), 2);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < ff; j++) {
        const double g = x[static_cast<size_t>(i) * 2 * ff + j], up = x[static_cast<size_t>(i) * 2 * ff + ff + j];
        const double want = gelu_tanh_reference(g) * up;
        CHECK_NEAR(out[static_cast<size_t>(i) * ff + j], want, 1e-6 * std::fabs(up) + 2e-6 * std::fabs(want));
      }
  }
}
