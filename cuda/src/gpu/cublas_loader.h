// Run-time binding of the few cuBLAS entry points the CUDA backend uses. The build machine has
// no cuBLAS headers or libraries, so the declarations below are written from the documented
// C API (cublas_api.h, v2 interface); the enum values are the library's stable ABI constants.
// Plain C++ (no CUDA headers): the stream is passed as an opaque pointer (cudaStream_t is a
// pointer to an opaque struct).
#pragma once
#include <string>

namespace ctxr::gpu {

using cublasHandle_t = void*;  // pointer to the opaque struct cublasContext
using cublasStatus_t = int;    // CUBLAS_STATUS_SUCCESS = 0

// cublasOperation_t
constexpr int kCublasOpN = 0;
constexpr int kCublasOpT = 1;
// cublasComputeType_t
constexpr int kCublasCompute32F = 68;
// cublasGemmAlgo_t
constexpr int kCublasGemmDefault = -1;
// cublasMath_t
constexpr int kCublasDefaultMath = 0;
// cudaDataType_t (library_types.h; checked against the header in the .cu that uses them)
constexpr int kCudaR32F = 0;
constexpr int kCudaR16F = 2;
constexpr int kCudaR16BF = 14;

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;                  // cublasCreate_v2
  cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;                  // cublasDestroy_v2
  cublasStatus_t (*set_stream)(cublasHandle_t handle, void* stream) = nullptr; // cublasSetStream_v2
  cublasStatus_t (*set_math_mode)(cublasHandle_t handle, int mode) = nullptr;  // optional
  cublasStatus_t (*get_version)(cublasHandle_t handle, int* version) = nullptr;// optional
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
  //              C, Ctype, ldc, computeType, algo)
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                            const void* alpha, const void* a, int a_type, int lda, const void* b,
                            int b_type, int ldb, const void* beta, void* c, int c_type, int ldc,
                            int compute_type, int algo) = nullptr;
  std::string path;  // what was loaded
};

// Tries env CTXR_CUBLAS (a full path), then libcublas.so.13, libcublas.so.12, libcublas.so
// through the default dlopen search (LD_LIBRARY_PATH, ld.so.cache), then a few well-known
// install locations (CUDA toolkit, pip wheels nvidia/cu13/lib and nvidia/cublas/lib of the
// active Python environments). Returns true and fills `api` on success; otherwise false with
// `why` listing what was tried. The library stays loaded for the life of the process.
bool load_cublas(CublasApi* api, std::string* why);

// Readable name of a cublasStatus_t.
const char* cublas_status_name(cublasStatus_t s);

}  // namespace ctxr::gpu
