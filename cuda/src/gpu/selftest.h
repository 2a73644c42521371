// Self-test of the CUDA backend against plain host reference code (double accumulation), for
// a machine with a GPU. Nothing in the runner calls it; to run it, link a three-line main with
// the CUDA build's objects, e.g. (from cuda/, after `make cuda` or at least the gpu objects):
//
//   printf '#include "gpu/selftest.h"\nint main(){return ctxr::cuda_selftest(0, true);}\n' > /tmp/t.cpp
//   g++ -std=c++17 -Isrc -c /tmp/t.cpp -o /tmp/t.o
//   nvcc -o /tmp/cuda-selftest /tmp/t.o build/gpu/gpu/*.o -lcudart_static -ldl -lrt -lpthread -Xcompiler -fopenmp
//   /tmp/cuda-selftest
//
// It checks every op (linear on the cuBLAS path and, with a second backend made under
// CTXR_NO_CUBLAS=1, on the built-in GEMM), attention on the tiled, per-token and split paths
// and the statistics, then times a 4096-token prefill attention and a few GEMMs.
#pragma once

namespace ctxr {
// Returns 0 when every check passed, 1 otherwise; prints one line per check to stderr.
// `only`, when set, runs just the groups whose name contains it: "linear", "embed", "ops",
// "kv", "attention", "builtin" (linear on the built-in GEMM).
int cuda_selftest(int device, bool bench, const char* only = nullptr);
}  // namespace ctxr
