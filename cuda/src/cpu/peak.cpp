#include "peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "gemm.h"

namespace ctxr {

namespace {

volatile float g_sink;  // keeps the chains' results observable

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

constexpr int kChains = 12;  // FMA latency 4 × 2 FMA ports = 8 in flight; 12 leaves slack

// 12 independent dependency chains of x = x·a + b per iteration: 12·8 FMAs = 192 flops.
// a < 1 keeps the values converging to b/(1-a), far from overflow and denormals.
__attribute__((noinline)) float fma_chains(long iters, float seed) {
  const __m256 a = _mm256_set1_ps(0.9999f);
  const __m256 b = _mm256_set1_ps(1e-4f);
  // Named variables rather than an array so that all chains live in registers.
  __m256 x0 = _mm256_set1_ps(seed), x1 = _mm256_set1_ps(seed + 1), x2 = _mm256_set1_ps(seed + 2),
         x3 = _mm256_set1_ps(seed + 3), x4 = _mm256_set1_ps(seed + 4), x5 = _mm256_set1_ps(seed + 5),
         x6 = _mm256_set1_ps(seed + 6), x7 = _mm256_set1_ps(seed + 7), x8 = _mm256_set1_ps(seed + 8),
         x9 = _mm256_set1_ps(seed + 9), x10 = _mm256_set1_ps(seed + 10), x11 = _mm256_set1_ps(seed + 11);
  for (long it = 0; it < iters; it++) {
    x0 = _mm256_fmadd_ps(x0, a, b);
    x1 = _mm256_fmadd_ps(x1, a, b);
    x2 = _mm256_fmadd_ps(x2, a, b);
    x3 = _mm256_fmadd_ps(x3, a, b);
    x4 = _mm256_fmadd_ps(x4, a, b);
    x5 = _mm256_fmadd_ps(x5, a, b);
    x6 = _mm256_fmadd_ps(x6, a, b);
    x7 = _mm256_fmadd_ps(x7, a, b);
    x8 = _mm256_fmadd_ps(x8, a, b);
    x9 = _mm256_fmadd_ps(x9, a, b);
    x10 = _mm256_fmadd_ps(x10, a, b);
    x11 = _mm256_fmadd_ps(x11, a, b);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                           _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

constexpr double kFlopsPerIter = kChains * 8 * 2;

// Wall time of `iters` iterations on every thread of a team of `threads`.
double timed_run(int threads, long iters, int* team, float* sink) {
  double t0 = 0, t1 = 0;
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
#pragma omp barrier
#pragma omp master
    t0 = now_s();
    total += fma_chains(iters, static_cast<float>(omp_get_thread_num()));
#pragma omp barrier
#pragma omp master
    {
      t1 = now_s();
      *team = omp_get_num_threads();
    }
  }
  *sink += total;
  return t1 - t0;
}

}  // namespace

std::string peak_gflops_json(int threads, double seconds) {
  if (threads <= 0) threads = omp_get_max_threads();
  seconds = std::max(seconds, 0.05);
  int team = threads;
  float sink = 0;
  // Calibrate the per-run iteration count, growing until a run takes long enough to time.
  long iters = 1 << 16;
  double t = timed_run(threads, iters, &team, &sink);
  while (t < 0.02) {
    iters *= 4;
    t = timed_run(threads, iters, &team, &sink);
  }
  const int runs = seconds >= 0.5 ? 7 : 3;
  iters = std::max<long>(1, static_cast<long>(iters * (seconds / runs) / t));
  std::vector<double> gflops;
  for (int r = 0; r < runs; r++) {
    double s = timed_run(threads, iters, &team, &sink);
    gflops.push_back(kFlopsPerIter * iters * team / s * 1e-9);
  }
  double g = median(gflops);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"threads\":%d,\"gflops\":%.2f,\"per_thread_gflops\":%.2f,\"isa\":\"avx2-fma\",\"runs\":%d}",
                team, g, g / team, runs);
  g_sink = sink;
  return buf;
}

std::string bench_gemm_json(int m, int n, int k, int threads, int repeat) {
  m = std::max(m, 1);
  n = std::max(n, 1);
  k = std::max(k, 1);
  if (threads <= 0) threads = omp_get_max_threads();
  repeat = std::max(repeat, 1);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k), bias(n);
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  for (auto& x : bias) x = dist(rng);
  PackedB* pb = pack_b(b.data(), n, k);
  sgemm_packed(a.data(), m, pb, bias.data(), c.data(), threads);
  std::vector<double> ms;
  for (int r = 0; r < repeat; r++) {
    double t0 = now_s();
    sgemm_packed(a.data(), m, pb, bias.data(), c.data(), threads);
    ms.push_back((now_s() - t0) * 1e3);
  }
  free_packed_b(pb);
  double med = median(ms);
  double flops = 2.0 * m * n * k;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"m\":%d,\"n\":%d,\"k\":%d,\"threads\":%d,\"repeat\":%d,\"median_ms\":%.4f,\"min_ms\":%.4f,\"gflops\":%.2f}",
                m, n, k, threads, repeat, med, *std::min_element(ms.begin(), ms.end()), flops / (med * 1e-3) * 1e-9);
  return buf;
}

}  // namespace ctxr
