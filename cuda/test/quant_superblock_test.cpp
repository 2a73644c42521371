// Q2_K, Q3_K, Q5_K and IQ4_XS (quant_superblock.h): the reference dequantization against
// llama.cpp's gguf-py (test/fixtures/superblock_dequant.bin, written by
// scripts/oracle/dequant_fixture.py), and the int8 GEMM against the row dot products on these
// types. The SIMD dot products against the reference are in quant_test.cpp (kFormats).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/quant_gemm.h"
#include "cpu/quant_linear.h"
#include "cpu_test_inputs.h"
#include "gguf.h"
#include "quant.h"
#include "quant_superblock.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;
using ctxr_test::isas;
using ctxr_test::random_vector;

namespace {

std::vector<uint8_t> read_fixture(const char* name) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("CTXR_TEST_FIXTURES")) dirs.push_back(env);
  dirs.insert(dirs.end(), {"cuda/test/fixtures", "test/fixtures"});
  for (const std::string& dir : dirs) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "rb");
    if (!f) continue;
    std::vector<uint8_t> bytes;
    uint8_t buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + got);
    std::fclose(f);
    return bytes;
  }
  ctxr_test::fail(__FILE__, __LINE__, std::string("fixture ") + name + " not found (run from the repository root or cuda/, or set CTXR_TEST_FIXTURES)");
}

DType dtype_of_ggml(uint32_t t) {
  switch (t) {
    case static_cast<uint32_t>(GgmlType::Q2_K): return DType::Q2_K;
    case static_cast<uint32_t>(GgmlType::Q3_K): return DType::Q3_K;
    case static_cast<uint32_t>(GgmlType::Q5_K): return DType::Q5_K;
    case static_cast<uint32_t>(GgmlType::IQ4_XS): return DType::IQ4_XS;
  }
  ctxr_test::fail(__FILE__, __LINE__, "fixture holds ggml type " + std::to_string(t));
}

}  // namespace

// gguf-py computes the same products in f32; only the rounding of d·sc·q − dmin·m may differ
// (contraction into one fma): a few ulps of the block's largest term.
RUNNER_TEST(quant_superblock, dequantize_matches_gguf_py) {
  const std::vector<uint8_t> file = read_fixture("superblock_dequant.bin");
  std::vector<DType> seen;
  for (size_t at = 0; at < file.size();) {
    CHECK(at + 12 <= file.size());
    uint32_t head[3];
    std::memcpy(head, &file[at], 12);
    const DType t = dtype_of_ggml(head[0]);
    const int blocks = static_cast<int>(head[1]);
    CHECK_EQ(head[2], blocks * dtype_block_bytes(t));
    const uint8_t* raw = &file[at + 12];
    std::vector<float> expected(static_cast<size_t>(blocks) * 256), got(expected.size());
    std::memcpy(expected.data(), raw + head[2], expected.size() * 4);
    at += 12 + head[2] + expected.size() * 4;
    dequantize_row(t, raw, blocks * 256, got.data());
    for (int b = 0; b < blocks; b++) {
      float largest = 0;
      for (int e = 0; e < 256; e++) largest = std::max(largest, std::fabs(expected[256 * b + e]));
      for (int e = 0; e < 256; e++) {
        const size_t i = static_cast<size_t>(256) * b + e;
        CHECK_MSG(std::fabs(got[i] - expected[i]) <= 4 * std::ldexp(largest, -23) + 1e-30,
                  dtype_name(t) << " block " << b << " element " << e << ": " << got[i] << ", gguf-py " << expected[i]);
      }
    }
    seen.push_back(t);
  }
  CHECK_EQ(seen.size(), 4u);
}

// The GEMM's unpacked w = s·(u − z) + o per 16- or 32-group and the row dots' per-block integer
// sums agree up to float summation order (tiles, panel tails, both ISAs), with the super-block
// formats in one matrix beside the 32-element ones (parts of equal group, z and offset share the
// activation sums: Q5_K with Q4_1/Q5_1, IQ4_XS with IQ4_NL and Q8_0, which AVX2 takes signed).
RUNNER_TEST(quant_superblock, gemm_matches_row_dots) {
  std::mt19937 rng(13);
  const int cols = 512;
  for (CpuIsa isa : isas()) {
    const std::vector<DType> layout = {DType::Q5_K, DType::Q3_K, DType::Q2_K, DType::IQ4_XS, DType::Q4_1,
                                       DType::IQ4_NL, DType::Q5_0, DType::Q8_0, DType::Q5_1, DType::MXFP4};
    const int per[] = {70, 33, 30, 17, 20, 18, 9, 40, 5, 16};
    QuantMatrix m;
    m.cols = cols;
    std::vector<std::vector<uint8_t>> storage;
    for (size_t p = 0; p < layout.size(); p++) {
      const DType t = layout[p];
      std::vector<uint8_t> bytes(static_cast<size_t>(per[p]) * dtype_row_bytes(t, cols));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      // Scales: finite f16s of modest size at each block's d (and dmin or m) position.
      const size_t block = dtype_block_bytes(t);
      const int d_at = t == DType::Q2_K ? 80 : t == DType::Q3_K ? 108 : 0;
      for (size_t at = 0; at < bytes.size(); at += block) {
        if (t == DType::MXFP4) {
          bytes[at] = static_cast<uint8_t>(120 + rng() % 4);  // E8M0 2^-8..2^-5
          continue;
        }
        const uint16_t d = f32_to_f16_bits(0.01f + 0.001f * (rng() % 16)), dmin = f32_to_f16_bits(0.004f);
        std::memcpy(&bytes[at + d_at], &d, 2);
        if (t == DType::Q2_K || t == DType::Q5_K || t == DType::Q4_1 || t == DType::Q5_1) std::memcpy(&bytes[at + d_at + 2], &dmin, 2);
      }
      storage.push_back(std::move(bytes));
      m.parts.push_back({t, m.rows, per[p], storage.back().data(), dtype_row_bytes(t, cols)});
      m.rows += per[p];
    }
    CHECK(quant_gemm_supports(m, isa));
    std::vector<float> wf(static_cast<size_t>(m.rows) * cols);
    m.dequantize(0, m.rows, wf.data());
    for (int n : {17, 64, 129}) {
      const std::vector<float> x = random_vector(static_cast<size_t>(n) * cols, rng);
      std::vector<float> rows_y(static_cast<size_t>(n) * m.rows), gemm_y(rows_y.size());
      ctxr_test::per32_row_dots(m, x.data(), n, isa, rows_y.data());
      quant_linear(x.data(), n, m, nullptr, gemm_y.data(), 2, isa, 3);
      for (int i = 0; i < n; i++)
        for (int r = 0; r < m.rows; r++) {
          double mag = 0;
          for (int k = 0; k < cols; k++) mag += std::fabs(static_cast<double>(wf[static_cast<size_t>(r) * cols + k]) * x[static_cast<size_t>(i) * cols + k]);
          const float a = rows_y[static_cast<size_t>(i) * m.rows + r], b = gemm_y[static_cast<size_t>(i) * m.rows + r];
          CHECK_MSG(std::fabs(a - b) <= 4 * (cols / 16 + 8) * std::ldexp(1.0, -23) * mag,
                    cpu_isa_name(isa) << " n=" << n << " y[" << i << "][" << r << "] rows " << a << " gemm " << b << " (Σ|w·x| " << mag << ")");
        }
    }
  }
}
