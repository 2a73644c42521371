// Machine f32 FMA peak and a GEMM benchmark, for `ctxr-runner --peak-gflops` and
// `ctxr-runner --bench-gemm M N K` (each prints the returned JSON line).
#pragma once
#include <string>

namespace ctxr {

// threads ≤ 0: omp_get_max_threads() (all cores unless OMP_NUM_THREADS says otherwise).

// Runs independent AVX2 FMA chains on `threads` OpenMP threads for about `seconds` in total
// (several timed runs, median reported):
// {"threads":T,"gflops":G,"per_thread_gflops":P,"isa":"avx2-fma","runs":R}
std::string peak_gflops_json(int threads, double seconds);

// Packs a random B[n][k] once, runs sgemm_packed on a random A[m][k] once to warm up, then
// `repeat` timed times: {"m":..,"n":..,"k":..,"threads":..,"repeat":..,"median_ms":..,"min_ms":..,"gflops":..}
// with gflops = 2·m·n·k / median.
std::string bench_gemm_json(int m, int n, int k, int threads, int repeat);

}  // namespace ctxr
