// F16 / BF16 weights read in place (cpu/half_linear.h): the row dot products (AVX2 + F16C and,
// where the CPU has it, AVX-512) and the half GEMM against a double reference on the widened
// weights, for n = 1, 3, 16, 17, 100, column counts that are not multiples of 8 or 16, fused
// matrices of several parts (f16 and bf16 mixed) with biases; the widening itself; and the CPU
// backend's matrix(), matrix_parts(), linear() and embed() on half weights.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend.h"
#include "cpu/half_linear.h"
#include "cpu/quant_dot.h"
#include "halfs.h"
#include "quant.h"
#include "cpu_test_inputs.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;
using ctxr_test::isas;
using ctxr_test::random_vector;

namespace {

uint16_t to_half(float f, DType t) {
  if (t == DType::F16) return f32_to_f16_bits(f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x8000) >> 16);  // bf16, rounded (ties away: fine for a test)
}

float from_half(uint16_t h, DType t) { return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h); }

std::vector<uint16_t> random_halves(size_t n, DType t, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = to_half(normal(rng), t);
  return v;
}

// A matrix of `layout.size()` parts splitting `rows` rows, each part's halves in its own buffer.
struct TestMatrix {
  HalfMatrix m;
  std::vector<std::vector<uint16_t>> storage;
  std::vector<float> wide;  // [rows][cols] widened
};

TestMatrix make_matrix(const std::vector<DType>& layout, int rows, int cols, std::mt19937& rng) {
  TestMatrix t;
  t.m.rows = rows;
  t.m.cols = cols;
  t.storage.reserve(layout.size());
  const int per = rows / static_cast<int>(layout.size());
  for (size_t p = 0; p < layout.size(); p++) {
    const int first = static_cast<int>(p) * per, count = p + 1 == layout.size() ? rows - first : per;
    t.storage.push_back(random_halves(static_cast<size_t>(count) * cols, layout[p], rng));
    t.m.parts.push_back({layout[p], first, count, t.storage.back().data()});
    for (uint16_t h : t.storage.back()) t.wide.push_back(from_half(h, layout[p]));
  }
  return t;
}

// y (n × rows) against Σ in double over the widened weights; f32 accumulation error is at most
// about cols·2⁻²⁴·Σ|w·x| (a misplaced element is an error of order Σ|w·x|/√cols).
void check_against_reference(const TestMatrix& t, const std::vector<float>& x, int n, const float* bias, const std::vector<float>& y,
                             const std::string& what) {
  const int rows = t.m.rows, cols = t.m.cols;
  for (int i = 0; i < n; i++)
    for (int r = 0; r < rows; r++) {
      double ref = bias ? bias[r] : 0, mag = bias ? std::fabs(bias[r]) : 0;
      for (int c = 0; c < cols; c++) {
        const double p = static_cast<double>(t.wide[static_cast<size_t>(r) * cols + c]) * x[static_cast<size_t>(i) * cols + c];
        ref += p;
        mag += std::fabs(p);
      }
      const double got = y[static_cast<size_t>(i) * rows + r];
      const double tol = (cols + 8) * std::ldexp(1.0, -23) * mag + 1e-30;
      CHECK_MSG(std::fabs(got - ref) <= tol, what << " y[" << i << "][" << r << "] = " << got << " vs " << ref << ", tolerance " << tol);
    }
}

}  // namespace

RUNNER_TEST(half, widen_matches_scalar) {
  std::vector<uint16_t> all(1 << 16);
  for (int i = 0; i < 1 << 16; i++) all[i] = static_cast<uint16_t>(i);
  for (DType t : {DType::F16, DType::BF16}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{13}, all.size()}) {
      std::vector<float> out(n);
      half_to_f32(all.data() + (all.size() - n), t == DType::BF16, n, out.data());
      for (size_t i = 0; i < n; i++) {
        const uint16_t h = all[all.size() - n + i];
        const float ref = from_half(h, t);
        CHECK_MSG(std::memcmp(&ref, &out[i], 4) == 0 || (std::isnan(ref) && std::isnan(out[i])),
                  dtype_name(t) << " bits " << h << ": " << out[i] << " vs " << ref);
      }
    }
  }
}

RUNNER_TEST(half, linear_matches_reference) {
  std::mt19937 rng(31);
  const std::vector<std::vector<DType>> layouts = {{DType::F16}, {DType::BF16}, {DType::F16, DType::F16, DType::F16}, {DType::BF16, DType::F16}};
  for (const auto& layout : layouts)
    for (int cols : {1, 9, 16, 31, 300})
      for (int rows : {3, 37}) {
        if (rows < static_cast<int>(layout.size())) continue;
        const TestMatrix t = make_matrix(layout, rows, cols, rng);
        const std::vector<float> bias = random_vector(rows, rng);
        for (int n : {1, 3, 16, 17, 100}) {
          const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
          for (int path : {1, 2})
            for (CpuIsa isa : isas())
              for (int threads : {1, 2}) {
                if (path == 2 && isa != CpuIsa::Avx2) continue;  // the GEMM has no ISA choice
                const bool with_bias = (n + cols) % 2 == 0;
                std::vector<float> y(static_cast<size_t>(n) * rows, NAN);
                half_linear(x.data(), n, t.m, with_bias ? bias.data() : nullptr, y.data(), threads, isa, path);
                std::ostringstream what;
                what << dtype_name(layout[0]) << " parts=" << layout.size() << " rows=" << rows << " cols=" << cols << " n=" << n << " path=" << path
                     << " " << cpu_isa_name(isa) << " threads=" << threads;
                check_against_reference(t, x, n, with_bias ? bias.data() : nullptr, y, what.str());
              }
        }
      }
}

// Model-sized shapes (a 1B Llama's q|k|v with hidden 2048; a down projection's 8192 columns),
// both paths and the automatic choice, every n a decode or prefill batch may have around the
// switch.
RUNNER_TEST(half, llama_shapes) {
  std::mt19937 rng(32);
  struct Shape {
    std::vector<DType> layout;
    int rows, cols;
  };
  const Shape shapes[] = {{{DType::F16, DType::F16, DType::F16}, 384, 2048}, {{DType::BF16}, 64, 8192}};
  for (const Shape& s : shapes) {
    const TestMatrix t = make_matrix(s.layout, s.rows, s.cols, rng);
    for (int n : {1, 2, 15, 16, 17, 40}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * s.cols, rng);
      for (int path : {0, 1, 2})
        for (CpuIsa isa : isas()) {
          std::vector<float> y(static_cast<size_t>(n) * s.rows, NAN);
          half_linear(x.data(), n, t.m, nullptr, y.data(), 2, isa, path);
          std::ostringstream what;
          what << dtype_name(s.layout[0]) << " " << s.rows << "x" << s.cols << " n=" << n << " path=" << path << " " << cpu_isa_name(isa);
          check_against_reference(t, x, n, nullptr, y, what.str());
        }
    }
  }
}

// The backend keeps half matrices in place (also the parts of a fused one, from their own
// pointers), and embed() widens the table's rows exactly.
RUNNER_TEST(half, backend_in_place) {
  std::mt19937 rng(33);
  std::unique_ptr<Backend> backend(make_cpu_backend(2));
  CHECK(backend->reads_weights_in_place(DType::F16));
  CHECK(backend->reads_weights_in_place(DType::BF16));
  CHECK(!backend->reads_weights_in_place(DType::F32));
  const int cols = 72;
  for (DType dt : {DType::F16, DType::BF16}) {
    const TestMatrix table = make_matrix({dt}, 50, cols, rng);
    Matrix* m = backend->matrix(table.storage[0].data(), dt, 50, cols);
    backend->prepare_linear(m);
    const int32_t tokens[] = {0, 49, 7, 7};
    std::vector<float> out(4 * cols);
    backend->embed(m, tokens, 4, out.data());
    for (int i = 0; i < 4; i++)
      for (int c = 0; c < cols; c++) CHECK_EQ(out[i * cols + c], table.wide[static_cast<size_t>(tokens[i]) * cols + c]);
    for (int n : {1, 17}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
      std::vector<float> y(static_cast<size_t>(n) * 50);
      backend->linear(x.data(), n, m, nullptr, y.data());
      check_against_reference(table, x, n, nullptr, y, std::string("backend ") + dtype_name(dt));
    }
    backend->free_matrix(m);
  }
  // q|k|v parts from three separate buffers (as from a file mapping), f16 and bf16 mixed.
  const TestMatrix fused = make_matrix({DType::F16, DType::BF16, DType::F16}, 24, cols, rng);
  std::vector<MatrixPart> parts;
  for (const HalfRows& p : fused.m.parts) parts.push_back({p.dtype, p.rows, p.data});
  Matrix* m = backend->matrix_parts(nullptr, parts, cols);
  backend->prepare_linear(m);
  const std::vector<float> bias = random_vector(24, rng);
  for (int n : {1, 3, 100}) {
    const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
    std::vector<float> y(static_cast<size_t>(n) * 24);
    backend->linear(x.data(), n, m, bias.data(), y.data());
    check_against_reference(fused, x, n, bias.data(), y, "backend fused");
  }
  backend->free_matrix(m);
}
