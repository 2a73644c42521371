// Error checking shared by the CUDA backend's translation units (.cu only).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ctxr::gpu {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + what + " failed: " + cudaGetErrorName(e) +
                           " (" + cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace ctxr::gpu

// Checks a CUDA runtime call; throws std::runtime_error naming the call and the error.
#define CTXR_CUDA_CHECK(call)                                                 \
  do {                                                                        \
    cudaError_t ctxr_err_ = (call);                                           \
    if (ctxr_err_ != cudaSuccess) ::ctxr::gpu::cuda_fail(ctxr_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports launch-configuration errors (and earlier asynchronous ones).
#define CTXR_CUDA_LAUNCH_CHECK(name)                                          \
  do {                                                                        \
    cudaError_t ctxr_err_ = cudaGetLastError();                               \
    if (ctxr_err_ != cudaSuccess) ::ctxr::gpu::cuda_fail(ctxr_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
