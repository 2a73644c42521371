// Quantized formats: every format's SIMD dot product (AVX2 and, where the CPU has it, AVX-512
// VNNI) against the scalar reference (dequantize, then a double dot with the dequantized
// activations) on random blocks; the quantized linear() against the f32 product with the
// dequantized weights, every path (int8 dot products, f32 tiles, int8 GEMM), n = 1, 7, 64, 300.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/quant_dot.h"
#include "cpu/quant_linear.h"
#include "cpu/quantize_activations.h"
#include "halfs.h"
#include "quant.h"
#include "cpu_test_inputs.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;
using ctxr_test::isas;
using ctxr_test::random_vector;

namespace {

const DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::IQ4_XS};

// Byte offsets of a block's f16 scale d and (where it has one) its f16 dmin.
int d_offset(DType t) { return t == DType::Q6_K ? 208 : t == DType::Q2_K ? 80 : t == DType::Q3_K ? 108 : 0; }
int dmin_offset(DType t) { return t == DType::Q4_K || t == DType::Q5_K ? 2 : t == DType::Q2_K ? 82 : -1; }

// A random row of `cols` elements of format t: random quant bytes, scales of modest size.
std::vector<uint8_t> random_row(DType t, int cols, std::mt19937& rng) {
  std::vector<uint8_t> row(dtype_row_bytes(t, cols));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const size_t bytes = dtype_block_bytes(t);
  for (size_t at = 0; at < row.size(); at += bytes) {
    const uint16_t d = f32_to_f16_bits(scale(rng) * ((rng() & 1) ? 1 : -1)), dmin = f32_to_f16_bits(scale(rng));
    std::memcpy(&row[at + d_offset(t)], &d, 2);
    if (dmin_offset(t) >= 0) std::memcpy(&row[at + dmin_offset(t)], &dmin, 2);
  }
  return row;
}

// The same row with every quant bit zeroed (scales kept): dequantizes to each element's offset
// (IQ4_XS has none: its row is kept, which only doubles the tolerance's magnitude term).
std::vector<uint8_t> offsets_row(DType t, std::vector<uint8_t> row) {
  const size_t bytes = dtype_block_bytes(t);
  for (size_t at = 0; at < row.size(); at += bytes) {
    if (t == DType::Q8_0) std::memset(&row[at + 2], 0, 32);
    if (t == DType::Q4_0) std::memset(&row[at + 2], 0, 16);
    if (t == DType::Q4_K) std::memset(&row[at + 16], 0, 128);
    if (t == DType::Q6_K) std::memset(&row[at], 0, 192);
    if (t == DType::Q2_K) std::memset(&row[at + 16], 0, 64);
    if (t == DType::Q3_K) std::memset(&row[at], 0, 96);  // q = 0: the −4 offset
    if (t == DType::Q5_K) std::memset(&row[at + 16], 0, 160);
  }
  return row;
}

}  // namespace

RUNNER_TEST(quant, f16_bits_round_trip) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, 1e-3f}) {
    const uint16_t h = f32_to_f16_bits(f);
    CHECK_MSG(std::fabs(f16_to_f32(h) - f) <= std::fabs(f) * 0.0005f, f << " -> " << h);
  }
}

// Exact up to float rounding: per block the integer sum is exact; the scales' products and the
// f32 accumulation round. Tolerance (blocks + 8)·2⁻²⁰·S, with S = Σ (|w_i| + |offset_i|)·|a_i|
// (offset: Q4_0's 8d, Q4_K's min, Q6_K's 32·d·sc, applied through the activation sums). An
// element-order mistake is an error of order S/√cols, far above it.
RUNNER_TEST(quant, simd_dot_matches_reference) {
  std::mt19937 rng(11);
  for (DType t : kFormats)
    for (int cols : {256, 512, 768, 4096})
      for (int trial = 0; trial < 20; trial++) {
        if (cols % dtype_block_elements(t)) continue;
        const std::vector<uint8_t> w = random_row(t, cols, rng);
        std::vector<float> wf(cols), of(cols), af(cols);
        dequantize_row(t, w.data(), cols, wf.data());
        const std::vector<uint8_t> zero = offsets_row(t, w);
        dequantize_row(t, zero.data(), cols, of.data());
        const std::vector<float> x = random_vector(cols, rng, trial % 3 == 0 ? 100.f : 1.f);
        std::vector<ActBlock> a(cols / 32);
        quantize_activations(x.data(), cols, a.data());
        double ref = 0, mag = 0;
        for (int i = 0; i < cols; i++) {
          const double ai = static_cast<double>(a[i / 32].q[i % 32]) * a[i / 32].d;
          ref += static_cast<double>(wf[i]) * ai;
          mag += (std::fabs(wf[i]) + std::fabs(of[i])) * std::fabs(ai);
        }
        const double tol = (cols / 32 + 8) * std::ldexp(1.0, -20) * mag;
        for (CpuIsa isa : isas()) {
          const float got = quant_dot(t, isa)(w.data(), a.data(), cols / 32);
          CHECK_MSG(std::fabs(got - ref) <= tol, dtype_name(t) << " " << cpu_isa_name(isa) << " cols=" << cols << " trial=" << trial
                                                                       << ": " << got << " vs " << ref << ", tolerance " << tol);
        }
      }
}

// Activations: q·d within d/2 of x, never −128, sums right.
RUNNER_TEST(quant, activation_blocks) {
  std::mt19937 rng(5);
  std::vector<float> x = random_vector(256, rng, 3.f);
  x[7] = -1e3f;
  std::vector<ActBlock> a(8);
  quantize_activations(x.data(), 256, a.data());
  for (int b = 0; b < 8; b++) {
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; i++) {
      CHECK(a[b].q[i] >= -127);
      CHECK_NEAR(a[b].q[i] * a[b].d, x[32 * b + i], a[b].d * 0.5001);
      (i < 16 ? s0 : s1) += a[b].q[i];
    }
    CHECK_EQ(a[b].sum[0], s0);
    CHECK_EQ(a[b].sum[1], s1);
  }
}

// The quantized linear against the f32 product with the dequantized weights (double). The int8
// path's error is the activations' rounding: |Σ w·(x − q·d)| ≤ Σ |w|·d/2 per block, plus float
// rounding; the f32-tile path is float rounding only: (k + 8)·2⁻²³·Σ|w·x|.
RUNNER_TEST(quant, linear_matches_f32_on_dequantized) {
  std::mt19937 rng(21);
  const int cols = 512, rows = 70;
  // One matrix per format, plus a fused one mixing Q4_K rows and Q6_K rows.
  std::vector<std::vector<DType>> layouts = {{DType::Q8_0}, {DType::Q4_0}, {DType::Q4_K}, {DType::Q6_K}, {DType::Q4_K, DType::Q6_K},
                                             {DType::Q2_K}, {DType::Q3_K}, {DType::Q5_K}, {DType::IQ4_XS},
                                             {DType::Q5_K, DType::Q3_K, DType::Q2_K, DType::IQ4_XS, DType::Q6_K}};
  for (const auto& layout : layouts) {
    QuantMatrix m;
    m.rows = rows;
    m.cols = cols;
    std::vector<std::vector<uint8_t>> storage;
    const int per = rows / static_cast<int>(layout.size());
    for (size_t p = 0; p < layout.size(); p++) {
      const int first = static_cast<int>(p) * per, count = p + 1 == layout.size() ? rows - first : per;
      std::vector<uint8_t> bytes;
      for (int r = 0; r < count; r++) {
        std::vector<uint8_t> row = random_row(layout[p], cols, rng);
        bytes.insert(bytes.end(), row.begin(), row.end());
      }
      storage.push_back(std::move(bytes));
      m.parts.push_back({layout[p], first, count, storage.back().data(), dtype_row_bytes(layout[p], cols)});
    }
    std::vector<float> wf(static_cast<size_t>(rows) * cols);
    m.dequantize(0, rows, wf.data());
    const std::vector<float> bias = random_vector(rows, rng);
    for (int n : {1, 7, 64, 300}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
      for (int path : {1, 2, 3})
        for (CpuIsa isa : isas())
          for (int threads : {1, 2}) {
            if (path == 2 && isa != CpuIsa::Avx2) continue;  // the f32 path has no ISA choice
            std::vector<float> y(static_cast<size_t>(n) * rows, NAN);
            quant_linear(x.data(), n, m, bias.data(), y.data(), threads, isa, path);
            for (int i = 0; i < n; i++) {
              const float* xi = x.data() + static_cast<size_t>(i) * cols;
              // The activations' scales: per 32, or per 256 where decode's kernel takes them so.
              float dmax32[16] = {}, dmax256[2] = {};
              for (int k = 0; k < cols; k++) {
                dmax32[k / 32] = std::max(dmax32[k / 32], std::fabs(xi[k]) / 127.f);
                dmax256[k / 256] = std::max(dmax256[k / 256], std::fabs(xi[k]) / 127.f);
              }
              for (int r = 0; r < rows; r++) {
                const float* wr = wf.data() + static_cast<size_t>(r) * cols;
                const bool per256 = path == 1 && isa == CpuIsa::Avx512Vnni && quant_dot_superacts_avx512(m.part_of(r).dtype, 1) != nullptr;
                double ref = bias[r], mag = std::fabs(bias[r]), act = 0;
                for (int k = 0; k < cols; k++) {
                  ref += static_cast<double>(wr[k]) * xi[k];
                  mag += std::fabs(static_cast<double>(wr[k]) * xi[k]);
                  act += std::fabs(wr[k]) * (per256 ? dmax256[k / 256] : dmax32[k / 32]) * 0.5;
                }
                const double tol = (path != 2 ? act * 1.001 + 4 * mag * std::ldexp(1.0, -16) : 0) + (cols + 8) * std::ldexp(1.0, -23) * mag;
                const double got = y[static_cast<size_t>(i) * rows + r];
                CHECK_MSG(std::fabs(got - ref) <= tol, "layout " << dtype_name(layout[0]) << (layout.size() > 1 ? "+" : "") << " n=" << n
                                                                 << " path=" << path << " " << cpu_isa_name(isa) << " threads=" << threads << " y[" << i
                                                                 << "][" << r << "] = " << got << " vs " << ref << ", tolerance " << tol);
              }
            }
          }
    }
  }
}

// The two instruction sets give the same results up to float summation order.
RUNNER_TEST(quant, isa_paths_agree) {
  if (!cpu_has_avx512_vnni()) return;
  std::mt19937 rng(8);
  for (DType t : kFormats) {
    const int cols = 4096;
    const std::vector<uint8_t> w = random_row(t, cols, rng);
    const std::vector<float> x = random_vector(cols, rng);
    std::vector<ActBlock> a(cols / 32);
    quantize_activations(x.data(), cols, a.data());
    const float avx2 = quant_dot(t, CpuIsa::Avx2)(w.data(), a.data(), cols / 32);
    const float avx512 = quant_dot(t, CpuIsa::Avx512Vnni)(w.data(), a.data(), cols / 32);
    CHECK_NEAR(avx512, avx2, 1e-4 * (std::fabs(avx2) + 1));
    if (QuantDotActsFn one = quant_dot_acts_avx512(t, 1)) {
      std::vector<float> ad(a.size()), adsum16(2 * a.size());
      for (size_t b = 0; b < a.size(); b++) ad[b] = a[b].d, adsum16[2 * b] = a[b].d * a[b].sum[0], adsum16[2 * b + 1] = a[b].d * a[b].sum[1];
      float got;
      one(w.data(), a.data(), ad.data(), adsum16.data(), cols / 32, 0, &got);
      CHECK_NEAR(got, avx2, 1e-4 * (std::fabs(avx2) + 1));
    }
  }
}

// A weight row against n activation rows at once gives bitwise what each row gives alone (a
// stream's tokens do not depend on the others decoded in its step).
RUNNER_TEST(quant, activation_group_kernels_match_one_row) {
  if (!cpu_has_avx512_vnni()) return;
  std::mt19937 rng(9);
  for (DType t : kFormats) {
    if (!quant_dot_acts_avx512(t, 1)) continue;
    for (int cols : {256, 768, 4096}) {
      const std::vector<uint8_t> w = random_row(t, cols, rng);
      const int nb = cols / 32;
      std::vector<ActBlock> a(static_cast<size_t>(quant_dot_max_acts()) * nb);
      for (int i = 0; i < quant_dot_max_acts(); i++) quantize_activations(random_vector(cols, rng).data(), cols, a.data() + static_cast<size_t>(i) * nb);
      std::vector<float> ad(a.size()), adsum16(2 * a.size());
      for (size_t b = 0; b < a.size(); b++) ad[b] = a[b].d, adsum16[2 * b] = a[b].d * a[b].sum[0], adsum16[2 * b + 1] = a[b].d * a[b].sum[1];
      for (int n = 2; n <= quant_dot_max_acts(); n++) {
        float out[quant_dot_max_acts()];
        quant_dot_acts_avx512(t, n)(w.data(), a.data(), ad.data(), adsum16.data(), nb, nb, out);
        for (int i = 0; i < n; i++) {
          const size_t at = static_cast<size_t>(i) * nb;
          float one;
          quant_dot_acts_avx512(t, 1)(w.data(), a.data() + at, ad.data() + at, adsum16.data() + 2 * at, nb, 0, &one);
          CHECK_MSG(std::memcmp(&one, &out[i], 4) == 0, "dtype " << static_cast<int>(t) << " cols " << cols << " n " << n << " row " << i << ": " << out[i] << " vs " << one);
        }
      }
    }
  }
}

// Activations per 256: q·d within d/2 of x, never −128, the 16-element sums right, one scale
// for the whole super-block.
RUNNER_TEST(quant, activation_superblocks) {
  std::mt19937 rng(6);
  std::vector<float> x = random_vector(512, rng, 3.f);
  x[300] = -1e3f;
  std::vector<ActSuperBlock> a(2);
  quantize_activations_256(x.data(), 512, a.data());
  CHECK_NEAR(a[1].d, 1e3f / 127.f, 1e-6);
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < 16; j++) {
      int sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; i++) {
        CHECK(a[b].q[i] >= -127);
        CHECK_NEAR(a[b].q[i] * a[b].d, x[256 * b + i], a[b].d * 0.5001);
        sum += a[b].q[i];
      }
      CHECK_EQ(a[b].sum16[j], sum);
    }
}

// The AVX-512 quantizers give bitwise what the scalar ones give (outliers, a zero block, ties).
RUNNER_TEST(quant, activation_quantizers_agree) {
  if (!cpu_has_avx512_vnni()) return;
  std::mt19937 rng(12);
  std::vector<float> x = random_vector(1024, rng, 3.f);
  x[5] = 4e3f, x[700] = -9e2f;
  for (int i = 256; i < 512; i++) x[i] = 0.f;
  for (int i = 512; i < 544; i++) x[i] = 0.5f * static_cast<float>(i - 528);  // ties at the rounding
  std::vector<ActBlock> a32(32), b32(32);
  quantize_activations(x.data(), 1024, a32.data());
  quantize_activations(x.data(), 1024, b32.data(), CpuIsa::Avx512Vnni);
  CHECK(std::memcmp(a32.data(), b32.data(), a32.size() * sizeof(ActBlock)) == 0);
  std::vector<ActSuperBlock> a256(4), b256(4);
  quantize_activations_256(x.data(), 1024, a256.data());
  quantize_activations_256(x.data(), 1024, b256.data(), CpuIsa::Avx512Vnni);
  for (int b = 0; b < 4; b++) {
    CHECK(std::memcmp(a256[b].q, b256[b].q, 256) == 0);
    CHECK(std::memcmp(a256[b].sum16, b256[b].sum16, 32) == 0);
    CHECK(std::memcmp(&a256[b].d, &b256[b].d, 4) == 0);
  }
}

// Decode's per-256 kernels against the dequantized row dotted (in double) with the dequantized
// activations: float rounding only. A row against n activation rows gives bitwise what each row
// gives alone.
RUNNER_TEST(quant, superblock_activation_kernels) {
  if (!cpu_has_avx512_vnni()) return;
  std::mt19937 rng(10);
  int kernels = 0;
  for (DType t : kFormats) {
    if (!quant_dot_superacts_avx512(t, 1)) continue;
    kernels++;
    for (int cols : {256, 768, 4096}) {
      const std::vector<uint8_t> w = random_row(t, cols, rng);
      std::vector<float> wf(cols);
      dequantize_row(t, w.data(), cols, wf.data());
      const int nsb = cols / 256;
      std::vector<ActSuperBlock> a(static_cast<size_t>(quant_dot_max_acts()) * nsb);
      for (int i = 0; i < quant_dot_max_acts(); i++) quantize_activations_256(random_vector(cols, rng, 2.f).data(), cols, a.data() + static_cast<size_t>(i) * nsb);
      float one[quant_dot_max_acts()];
      for (int i = 0; i < quant_dot_max_acts(); i++) {
        const ActSuperBlock* ai = a.data() + static_cast<size_t>(i) * nsb;
        quant_dot_superacts_avx512(t, 1)(w.data(), ai, nsb, 0, &one[i]);
        double ref = 0, mag = 0;
        for (int k = 0; k < cols; k++) {
          const double p = static_cast<double>(wf[k]) * ai[k / 256].q[k % 256] * ai[k / 256].d;
          ref += p;
          mag += std::fabs(p);
        }
        CHECK_MSG(std::fabs(one[i] - ref) <= (cols / 16 + 8) * std::ldexp(1.0, -22) * mag,
                  dtype_name(t) << " cols " << cols << ": " << one[i] << " vs " << ref << " (Σ|w·a| " << mag << ")");
      }
      for (int n = 2; n <= quant_dot_max_acts(); n++) {
        float out[quant_dot_max_acts()];
        quant_dot_superacts_avx512(t, n)(w.data(), a.data(), nsb, nsb, out);
        for (int i = 0; i < n; i++) CHECK_MSG(std::memcmp(&one[i], &out[i], 4) == 0, dtype_name(t) << " cols " << cols << " n " << n << " row " << i);
      }
    }
  }
  CHECK(kernels == 6);  // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS
}

// The int8 GEMM and the per-32 row dot products quantize the activations the same way: they agree
// up to float summation order, far closer than either agrees with f32 (tiles from 64 rows, tails of
// 16-row panels and 8-row activation blocks, a fused Q4_K|Q6_K|Q8_0 matrix).
RUNNER_TEST(quant, gemm_matches_row_dots) {
  std::mt19937 rng(5);
  const int cols = 768, rows = 150;
  const std::vector<DType> layout = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0};
  QuantMatrix m;
  m.rows = rows;
  m.cols = cols;
  std::vector<std::vector<uint8_t>> storage;
  const int per[] = {70, 33, 30, 17};
  int first = 0;
  for (size_t p = 0; p < layout.size(); p++) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < per[p]; r++) {
      std::vector<uint8_t> row = random_row(layout[p], cols, rng);
      bytes.insert(bytes.end(), row.begin(), row.end());
    }
    storage.push_back(std::move(bytes));
    m.parts.push_back({layout[p], first, per[p], storage.back().data(), dtype_row_bytes(layout[p], cols)});
    first += per[p];
  }
  std::vector<float> wf(static_cast<size_t>(rows) * cols);
  m.dequantize(0, rows, wf.data());
  for (int n : {17, 64, 129}) {
    const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
    std::vector<float> rows_y(static_cast<size_t>(n) * rows), gemm_y(rows_y.size());
    for (CpuIsa isa : isas()) {
      QuantMatrix sub = m;
      ctxr_test::per32_row_dots(sub, x.data(), n, isa, rows_y.data());
      quant_linear(x.data(), n, sub, nullptr, gemm_y.data(), 2, isa, 3);
      for (int i = 0; i < n; i++)
        for (int r = 0; r < sub.rows; r++) {
          // Float rounding of the per-block partial sums: a few ulps of Σ|w·x| per block.
          double mag = 0;
          for (int k = 0; k < cols; k++) mag += std::fabs(static_cast<double>(wf[static_cast<size_t>(r) * cols + k]) * x[static_cast<size_t>(i) * cols + k]);
          const float a = rows_y[static_cast<size_t>(i) * sub.rows + r], b = gemm_y[static_cast<size_t>(i) * sub.rows + r];
          CHECK_MSG(std::fabs(a - b) <= 4 * (cols / 16 + 8) * std::ldexp(1.0, -23) * mag,
                    cpu_isa_name(isa) << " n=" << n << " y[" << i << "][" << r << "] rows " << a << " gemm " << b << " (Σ|w·x| " << mag << ")");
        }
    }
  }
}
