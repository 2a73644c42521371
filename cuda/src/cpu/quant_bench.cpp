#include "cpu/quant_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <cstdlib>
#include <sys/mman.h>
#include <stdexcept>
#include <vector>

#include "backend.h"
#include "cpu/half_linear.h"
#include "cpu/quant_dot.h"
#include "cpu/quant_gemm.h"
#include "cpu/quant_linear.h"
#include "quant.h"

namespace ctxr {

std::string bench_linear_json(const std::string& type, int m, int n, int k, int threads, int repeat) {
  static const std::pair<const char*, DType> types[] = {{"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
                                                        {"q4_0", DType::Q4_0}, {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K},
                                                        {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1}, {"iq4_nl", DType::IQ4_NL},
                                                        {"mxfp4", DType::MXFP4},   {"q2_k", DType::Q2_K}, {"q3_k", DType::Q3_K}, {"q5_k", DType::Q5_K},
                                                        {"iq4_xs", DType::IQ4_XS}};
  DType t = DType::F32;
  bool known = false;
  for (const auto& [name, d] : types)
    if (type == name) t = d, known = true;
  if (!known)
    throw std::invalid_argument("--bench-linear type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs");
  if (threads <= 0) threads = omp_get_max_threads();
  std::mt19937 rng(99);
  const size_t bytes = static_cast<size_t>(n) * dtype_row_bytes(t, k);
  // CTXR_BENCH_HUGE_PAGES=1: the weights on transparent huge pages, as a file whose page cache
  // holds 2 MiB folios is mapped (measures the kernel apart from TLB misses).
  const char* huge = std::getenv("CTXR_BENCH_HUGE_PAGES");
  std::unique_ptr<uint8_t, void (*)(void*)> storage(static_cast<uint8_t*>(std::aligned_alloc(1 << 21, (bytes + (1 << 21) - 1) >> 21 << 21)), std::free);
  if (!storage) throw std::runtime_error("cannot allocate the benchmark's weights");
  if (huge && std::strcmp(huge, "1") == 0) madvise(storage.get(), (bytes + (1 << 21) - 1) >> 21 << 21, MADV_HUGEPAGE);
  uint8_t* w = storage.get();
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (size_t i = 0; i < static_cast<size_t>(n) * k; i++) {
      const float v = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (t == DType::F32) std::memcpy(&w[4 * i], &v, 4);
      else {
        const uint16_t h = t == DType::F16 ? f32_to_f16_bits(v) : static_cast<uint16_t>(bits >> 16);
        std::memcpy(&w[2 * i], &h, 2);
      }
    }
  } else {
    for (size_t i = 0; i < bytes; i++) w[i] = static_cast<uint8_t>(rng());
    const uint16_t d = f32_to_f16_bits(0.01f);
    const size_t block = dtype_block_bytes(t);
    for (size_t at = 0; at < bytes; at += block) {
      if (t == DType::MXFP4) {
        w[at] = 120;  // E8M0 2^-8
        continue;
      }
      // Each format's f16 d (and dmin or m right after it, where the format has one).
      const size_t d_at = t == DType::Q6_K ? 208 : t == DType::Q2_K ? 80 : t == DType::Q3_K ? 108 : 0;
      std::memcpy(&w[at + d_at], &d, 2);
      if (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q2_K || t == DType::Q4_1 || t == DType::Q5_1) std::memcpy(&w[at + d_at + 2], &d, 2);
    }
  }
  std::unique_ptr<Backend> backend(make_cpu_backend(threads));
  Matrix* matrix = backend->matrix(w, t, n, k);
  backend->prepare_linear(matrix);
  std::vector<float> x(static_cast<size_t>(m) * k), y(static_cast<size_t>(m) * n);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : x) v = dist(rng);
  backend->linear(x.data(), m, matrix, nullptr, y.data());
  std::vector<double> ms;
  for (int r = 0; r < std::max(repeat, 1); r++) {
    const auto t0 = std::chrono::steady_clock::now();
    backend->linear(x.data(), m, matrix, nullptr, y.data());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  backend->free_matrix(matrix);
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const char* path_env = std::getenv(t == DType::F16 || t == DType::BF16 ? "CTXR_HALF_PATH" : "CTXR_QUANT_PATH");
  const char* path = t == DType::F32 ? "f32-gemm"
                     : t == DType::F16 || t == DType::BF16 ? (path_env ? path_env : m <= half_linear_rows_max() ? "rows" : "gemm")
                     : path_env ? path_env
                     : (m <= quant_linear_int8_max_rows() ? "int8" : "gemm");
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "{\"type\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"threads\":%d,\"isa\":\"%s\",\"path\":\"%s\",\"median_ms\":%.4f,\"gflops\":%.2f,\"weight_gbps\":%.2f}",
                type.c_str(), m, n, k, threads, cpu_isa_name(detected_cpu_isa()), path, med, 2.0 * m * n * k / (med * 1e-3) * 1e-9,
                bytes / (med * 1e-3) * 1e-9);
  return buf;
}

}  // namespace ctxr
