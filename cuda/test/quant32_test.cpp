// The 32-element block formats Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 (quant_blocks32.h):
// dequantization bit for bit against llama.cpp's gguf-py; every instruction set's dot product
// against the scalar reference; quantized linear() (int8 row dots, f32 tiles, int8 GEMM) against
// the f32 product with the dequantized weights, on rows of 17 blocks (not a 256-multiple) and in
// a matrix mixing the formats; the GEMM against the row dots.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/quant_act_groups.h"
#include "cpu/quant_dot.h"
#include "cpu/quant_dot32.h"
#include "cpu/quant_gemm.h"
#include "cpu/quant_linear.h"
#include "cpu_test_inputs.h"
#include "halfs.h"
#include "quant.h"
#include "quant32_gguf_py_fixture.h"
#include "quant_blocks32.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;
using ctxr_test::isas;
using ctxr_test::random_vector;

namespace {

const DType kFormats[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::MXFP4};

DType format_named(const std::string& name) {
  for (DType t : kFormats) {
    std::string upper = dtype_name(t);
    for (char& c : upper) c = static_cast<char>(std::toupper(c));
    if (upper == name) return t;
  }
  throw std::invalid_argument("no format " + name);
}

// A random row: random quant bytes, scales (and mins) of modest size.
std::vector<uint8_t> random_row(DType t, int cols, std::mt19937& rng) {
  std::vector<uint8_t> row(dtype_row_bytes(t, cols));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const size_t bytes = dtype_block_bytes(t);
  for (size_t at = 0; at < row.size(); at += bytes) {
    if (t == DType::MXFP4) {
      row[at] = static_cast<uint8_t>(118 + rng() % 8);  // 2^-10 .. 2^-3
      continue;
    }
    const uint16_t d = f32_to_f16_bits(scale(rng) * ((rng() & 1) ? 1 : -1)), m = f32_to_f16_bits(scale(rng) * ((rng() & 1) ? 1 : -1));
    std::memcpy(&row[at], &d, 2);
    if (t == DType::Q4_1 || t == DType::Q5_1) std::memcpy(&row[at + 2], &m, 2);
  }
  return row;
}

// Σ (|x| + |what the integer kernels add through the activation sums|)·|a|: the magnitude that
// bounds float rounding (Q5_0's 16·d on AVX2, Q4_1/Q5_1's m).
double magnitude(DType t, const uint8_t* w, const float* x, int cols) {
  double mag = 0;
  if (!dtype_block32_family(t)) {  // Q8_0: no offsets
    std::vector<float> wf(cols);
    dequantize_row(t, w, cols, wf.data());
    for (int i = 0; i < cols; i++) mag += std::fabs(wf[i] * x[i]);
    return mag;
  }
  Block32Values v;
  for (int b = 0; b < cols / 32; b++) {
    block32_values(t, w + b * dtype_block_bytes(t), v);
    const double extra = std::fabs(v.offset) + (t == DType::Q5_0 ? 16 * std::fabs(v.scale) : 0);
    for (int i = 0; i < 32; i++) mag += (std::fabs(v.scale * v.v[i] + v.offset) + extra) * std::fabs(x[32 * b + i]);
  }
  return mag;
}
double dot_magnitude(DType t, const uint8_t* w, const ActBlock* a, int nb) {
  std::vector<float> x(static_cast<size_t>(nb) * 32);
  for (int i = 0; i < nb * 32; i++) x[i] = a[i / 32].q[i % 32] * a[i / 32].d;
  return magnitude(t, w, x.data(), nb * 32);
}

QuantMatrix matrix_of(const std::vector<DType>& layout, const std::vector<int>& rows_per, int cols, std::mt19937& rng,
                      std::vector<std::vector<uint8_t>>& storage) {
  QuantMatrix m;
  m.cols = cols;
  storage.reserve(layout.size());
  for (size_t p = 0; p < layout.size(); p++) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < rows_per[p]; r++) {
      const std::vector<uint8_t> row = random_row(layout[p], cols, rng);
      bytes.insert(bytes.end(), row.begin(), row.end());
    }
    storage.push_back(std::move(bytes));
    m.parts.push_back({layout[p], m.rows, rows_per[p], storage.back().data(), dtype_row_bytes(layout[p], cols)});
    m.rows += rows_per[p];
  }
  return m;
}

}  // namespace

RUNNER_TEST(quant32, dequantize_matches_gguf_py) {
  for (const auto& c : quant32_fixture::cases) {
    const DType t = format_named(c.type);
    std::vector<float> got(static_cast<size_t>(c.blocks) * 32);
    dequantize_row(t, c.bytes, c.blocks * 32, got.data());
    for (size_t i = 0; i < got.size(); i++)
      CHECK_MSG(got[i] == c.values[i] || (std::isnan(got[i]) && std::isnan(c.values[i])),
                c.type << " block " << i / 32 << " element " << i % 32 << ": " << got[i] << " vs gguf-py " << c.values[i]);
  }
}

RUNNER_TEST(quant32, e8m0_half_scale) {
  CHECK(e8m0_to_f32_half(128) == 1.f);
  CHECK(e8m0_to_f32_half(127) == 0.5f);
  CHECK(e8m0_to_f32_half(2) == std::ldexp(1.f, -126));
  CHECK(e8m0_to_f32_half(1) == std::ldexp(1.f, -127));  // subnormal
  CHECK(e8m0_to_f32_half(0) == std::ldexp(1.f, -128));
  CHECK(e8m0_to_f32_half(254) == std::ldexp(1.f, 126));
}

// The reference itself against the dequantized row: the same sum up to double rounding.
RUNNER_TEST(quant32, reference_dot_is_the_dequantized_dot) {
  std::mt19937 rng(3);
  for (DType t : kFormats) {
    const int cols = 544;
    const std::vector<uint8_t> w = random_row(t, cols, rng);
    std::vector<float> wf(cols);
    dequantize_row(t, w.data(), cols, wf.data());
    const std::vector<float> x = random_vector(cols, rng);
    std::vector<ActBlock> a(cols / 32);
    quantize_activations(x.data(), cols, a.data());
    double ref = 0, mag = 0;
    for (int i = 0; i < cols; i++) {
      const double ai = static_cast<double>(a[i / 32].q[i % 32]) * a[i / 32].d;
      ref += wf[i] * ai, mag += std::fabs(wf[i] * ai);
    }
    CHECK_NEAR(quant_dot32_reference(t, w.data(), a.data(), cols / 32), ref, 1e-6 * mag + 1e-6);
  }
}

// Exact integer sums per block; the scales' products and the f32 accumulation round. Tolerance
// (blocks + 8)·2⁻²⁰·S (dot_magnitude); a wrong element order or bit is of order S/√cols.
RUNNER_TEST(quant32, simd_dot_matches_reference) {
  std::mt19937 rng(11);
  for (DType t : kFormats)
    for (int cols : {32, 96, 544, 4096})
      for (int trial = 0; trial < 20; trial++) {
        const std::vector<uint8_t> w = random_row(t, cols, rng);
        const std::vector<float> x = random_vector(cols, rng, trial % 3 == 0 ? 100.f : 1.f);
        std::vector<ActBlock> a(cols / 32);
        quantize_activations(x.data(), cols, a.data());
        const double ref = quant_dot32_reference(t, w.data(), a.data(), cols / 32);
        const double tol = (cols / 32 + 8) * std::ldexp(1.0, -20) * dot_magnitude(t, w.data(), a.data(), cols / 32);
        for (CpuIsa isa : isas()) {
          const float got = quant_dot(t, isa)(w.data(), a.data(), cols / 32);
          CHECK_MSG(std::fabs(got - ref) <= tol, dtype_name(t) << " " << cpu_isa_name(isa) << " cols=" << cols << " trial=" << trial << ": " << got
                                                                << " vs " << ref << ", tolerance " << tol);
        }
      }
}

// Decode's activation-group kernels (one weight row against 1..4 activation rows): each row
// within the same tolerance of the reference, and bitwise what the row gives alone.
RUNNER_TEST(quant32, activation_group_kernels_match_reference) {
  if (!cpu_has_avx512_vnni()) return;
  std::mt19937 rng(12);
  constexpr int kActs = quant_dot_max_acts();
  for (DType t : kFormats)
    for (int cols : {32, 96, 544, 4096}) {
      const int nb = cols / 32;
      const std::vector<uint8_t> w = random_row(t, cols, rng);
      std::vector<ActBlock> a(static_cast<size_t>(kActs) * nb);
      for (int i = 0; i < kActs; i++) quantize_activations(random_vector(cols, rng, i == 0 ? 100.f : 1.f).data(), cols, a.data() + static_cast<size_t>(i) * nb);
      std::vector<float> ad(a.size()), adsum16(2 * a.size());
      for (size_t b = 0; b < a.size(); b++) ad[b] = a[b].d, adsum16[2 * b] = a[b].d * a[b].sum[0], adsum16[2 * b + 1] = a[b].d * a[b].sum[1];
      for (int n = 1; n <= kActs; n++) {
        float out[kActs];
        quant_dot_acts_avx512(t, n)(w.data(), a.data(), ad.data(), adsum16.data(), nb, nb, out);
        for (int i = 0; i < n; i++) {
          const ActBlock* ai = a.data() + static_cast<size_t>(i) * nb;
          const double ref = quant_dot32_reference(t, w.data(), ai, nb);
          const double tol = (nb + 8) * std::ldexp(1.0, -20) * dot_magnitude(t, w.data(), ai, nb);
          CHECK_MSG(std::fabs(out[i] - ref) <= tol, dtype_name(t) << " cols=" << cols << " n=" << n << " row " << i << ": " << out[i] << " vs " << ref);
          float one;
          quant_dot_acts_avx512(t, 1)(w.data(), ai, ad.data() + static_cast<size_t>(i) * nb, adsum16.data() + 2 * static_cast<size_t>(i) * nb, nb, 0, &one);
          CHECK_MSG(std::memcmp(&one, &out[i], 4) == 0, dtype_name(t) << " cols=" << cols << " n=" << n << " row " << i << ": " << out[i] << " vs alone " << one);
        }
      }
    }
}

// MXFP4's grouped kernels (four blocks a step, quant_act_groups.h): each row within the same
// tolerance of the reference, bitwise what the row gives alone, on rows whose last blocks do not
// fill a group, and on the exponents the scale's arithmetic treats apart: E8M0 0 and 1 (subnormal
// halves), 2 (the smallest normal), and exponents far above 127 (200, 201: sums that stay finite).
RUNNER_TEST(quant32, grouped_kernels_match_reference) {
  if (!quant_dot_groups_avx512(DType::MXFP4, 1)) return;
  std::mt19937 rng(13);
  constexpr int kActs = quant_dot_max_acts();
  const DType t = DType::MXFP4;
  for (int cols : {32, 96, 128, 544, 4096})
    for (int exponents : {0, 1, 2}) {
      const int nb = cols / 32, ng = activation_groups4(nb);
      std::vector<uint8_t> w = random_row(t, cols, rng);
      const uint8_t tiny[] = {0, 1, 2}, huge[] = {200, 201};
      for (int b = 0; b < nb && exponents == 1; b++) w[17 * b] = tiny[b % 3];
      for (int b = 0; b < nb && exponents == 2; b++) w[17 * b] = huge[b % 2];
      std::vector<ActBlock> a(static_cast<size_t>(kActs) * nb);
      for (int i = 0; i < kActs; i++) quantize_activations(random_vector(cols, rng, i == 0 ? 100.f : 1.f).data(), cols, a.data() + static_cast<size_t>(i) * nb);
      std::vector<ActGroup4> groups(static_cast<size_t>(kActs) * ng);
      for (int i = 0; i < kActs; i++) group_activations4(a.data() + static_cast<size_t>(i) * nb, nb, quant_dot_groups_offset(t), groups.data() + static_cast<size_t>(i) * ng);
      for (int n = 1; n <= kActs; n++) {
        float out[kActs];
        quant_dot_groups_avx512(t, n)(w.data(), groups.data(), ng, nb, out);
        for (int i = 0; i < n; i++) {
          const ActBlock* ai = a.data() + static_cast<size_t>(i) * nb;
          const double ref = quant_dot32_reference(t, w.data(), ai, nb);
          const double tol = (nb + 8) * std::ldexp(1.0, -20) * dot_magnitude(t, w.data(), ai, nb);
          CHECK_MSG(std::isfinite(ref) && std::fabs(out[i] - ref) <= tol, "cols=" << cols << " exponents=" << exponents << " n=" << n << " row " << i << ": " << out[i] << " vs " << ref);
          float one;
          quant_dot_groups_avx512(t, 1)(w.data(), groups.data() + static_cast<size_t>(i) * ng, 0, nb, &one);
          CHECK_MSG(std::memcmp(&one, &out[i], 4) == 0, "cols=" << cols << " n=" << n << " row " << i << ": " << out[i] << " vs alone " << one);
        }
      }
    }
}

// As quant.linear_matches_f32_on_dequantized: the int8 paths' error is the activations'
// rounding, Σ|w|·d_a/2 per block, plus float rounding; the f32-tile path float rounding only.
RUNNER_TEST(quant32, linear_matches_f32_on_dequantized) {
  std::mt19937 rng(21);
  const int cols = 544;
  std::vector<std::vector<DType>> layouts;
  for (DType t : kFormats) layouts.push_back({t});
  layouts.push_back({DType::Q5_0, DType::Q4_1, DType::IQ4_NL, DType::MXFP4, DType::Q5_1, DType::Q8_0});
  for (const auto& layout : layouts) {
    std::vector<int> per(layout.size(), 70 / static_cast<int>(layout.size()));
    per.back() += 70 % static_cast<int>(layout.size());
    std::vector<std::vector<uint8_t>> storage;
    const QuantMatrix m = matrix_of(layout, per, cols, rng, storage);
    const int rows = m.rows;
    std::vector<float> wf(static_cast<size_t>(rows) * cols);
    m.dequantize(0, rows, wf.data());
    const std::vector<float> bias = random_vector(rows, rng);
    for (int n : {1, 7, 64, 300}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
      for (int path : {1, 2, 3})
        for (CpuIsa isa : isas())
          for (int threads : {1, 2}) {
            if (path == 2 && isa != CpuIsa::Avx2) continue;
            std::vector<float> y(static_cast<size_t>(n) * rows, NAN);
            quant_linear(x.data(), n, m, bias.data(), y.data(), threads, isa, path);
            for (int i = 0; i < n; i++) {
              const float* xi = x.data() + static_cast<size_t>(i) * cols;
              std::vector<float> dmax(cols / 32, 0.f);
              for (int k = 0; k < cols; k++) dmax[k / 32] = std::max(dmax[k / 32], std::fabs(xi[k]) / 127.f);
              for (int r = 0; r < rows; r++) {
                const float* wr = wf.data() + static_cast<size_t>(r) * cols;
                double ref = bias[r], mag = std::fabs(bias[r]), act = 0;
                for (int k = 0; k < cols; k++) {
                  ref += static_cast<double>(wr[k]) * xi[k];
                  mag += std::fabs(static_cast<double>(wr[k]) * xi[k]);
                  act += std::fabs(wr[k]) * dmax[k / 32] * 0.5;
                }
                const double tol = (path != 2 ? act * 1.001 + 4 * mag * std::ldexp(1.0, -16) : 0) + (cols + 8) * std::ldexp(1.0, -23) * mag;
                const double got = y[static_cast<size_t>(i) * rows + r];
                CHECK_MSG(std::fabs(got - ref) <= tol, "layout " << dtype_name(layout[0]) << (layout.size() > 1 ? "+…" : "") << " n=" << n << " path=" << path
                                                                 << " " << cpu_isa_name(isa) << " threads=" << threads << " y[" << i << "][" << r
                                                                 << "] = " << got << " vs " << ref << ", tolerance " << tol);
              }
            }
          }
    }
  }
}

// The GEMM takes these formats on both instruction sets (IQ4_NL and Q8_0 as signed values on
// AVX2) and agrees with the row dots up to float summation order.
RUNNER_TEST(quant32, gemm_matches_row_dots) {
  std::mt19937 rng(5);
  const int cols = 544;
  std::vector<std::vector<uint8_t>> storage;
  const QuantMatrix sub = matrix_of({DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::MXFP4, DType::IQ4_NL, DType::Q8_0}, {40, 33, 30, 17, 30, 20}, cols, rng, storage);
  for (CpuIsa isa : isas()) {
    CHECK(quant_gemm_supports(sub, isa));
    for (int n : {17, 64, 129}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
      std::vector<float> rows_y(static_cast<size_t>(n) * sub.rows), gemm_y(rows_y.size());
      quant_linear(x.data(), n, sub, nullptr, rows_y.data(), 2, isa, 1);
      quant_gemm(x.data(), n, sub, nullptr, gemm_y.data(), 2, isa);
      for (int i = 0; i < n; i++)
        for (int r = 0; r < sub.rows; r++) {
          // Σ|w·x| with the offsets applied in float (m, Q5_0's 16·d on AVX2) counted in.
          const QuantRows& part = sub.part_of(r);
          const double mag = magnitude(part.dtype, part.data + static_cast<size_t>(r - part.first_row) * part.row_bytes, x.data() + static_cast<size_t>(i) * cols, cols);
          const float a = rows_y[static_cast<size_t>(i) * sub.rows + r], b = gemm_y[static_cast<size_t>(i) * sub.rows + r];
          CHECK_MSG(std::fabs(a - b) <= 4 * (cols / 16 + 8) * std::ldexp(1.0, -23) * mag,
                    cpu_isa_name(isa) << " n=" << n << " y[" << i << "][" << r << "] rows " << a << " gemm " << b << " (Σ|w·x| " << mag << ")");
        }
    }
  }
}
