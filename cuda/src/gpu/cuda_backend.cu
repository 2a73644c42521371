// The CUDA backend: ctxr::Backend on one GPU (make_cuda_backend(device)).
//
// cuBLAS. The build machine has no cuBLAS, so nothing links against it: at start the backend
// dlopens it (gpu/cublas_loader.cpp) in this order: env CTXR_CUBLAS (a full path), then
// libcublas.so.13, libcublas.so.12 and libcublas.so through the normal loader search
// (LD_LIBRARY_PATH, ld.so.cache), then well-known places: /usr/local/cuda*/lib64 and the pip
// wheels PyTorch installs (<venv>/lib/python3*/site-packages/nvidia/cu13/lib or
// nvidia/cublas/lib, under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /opt/*, /usr/local, /usr).
// The path taken is logged to stderr once. If none loads (or CTXR_NO_CUBLAS=1 is set, or the
// handle cannot be created) a warning says so and every GEMM runs on the built-in tiled
// shared-memory kernel (kernels.cu): correct, several times slower.
//
// Precision. Activations are float32 everywhere. Weight matrices stay in their checkpoint
// dtype on the device. f32 weights: cublasGemmEx with f32 inputs and output and
// CUBLAS_COMPUTE_32F under the default math mode, i.e. true FP32 (no TF32), as exact as the CPU
// build up to summation order. f16/bf16 weights: linear() rounds the activations to the
// weight's dtype in a scratch buffer and calls cublasGemmEx with f32 output and
// CUBLAS_COMPUTE_32F (tensor cores, f32 accumulation) — like PyTorch's half-precision
// inference, and unlike the CPU build, which widens the weights and keeps f32 activations, so
// results differ from it by the activation rounding (and f16 activations beyond ±65504 would
// overflow, as in PyTorch's f16 inference). The built-in GEMM widens the weights and
// keeps f32 activations (no rounding). Norms, RoPE (angle and sin/cos in double), SiLU,
// softmax and attention accumulate in float32.
//
// KV cache: float32, [layer][num_blocks * block_size][kv_width] for K and for V.
//
// Execution: one non-blocking stream; every op is queued on it, to_host() waits for it. All
// CUDA calls are checked and throw std::runtime_error naming the call and the CUDA error.
// Memory from alloc() comes from cudaMalloc through a small cache: release() keeps the block
// for a later alloc() of a similar size (safe because all work is ordered on the one stream);
// the cache is emptied when cudaMalloc runs out.
//
// Attention: attention.cu (tiled prefill kernel, per-token decode kernel with split-KV,
// statistics kernel). Checking on a GPU: gpu/selftest.h compares every op with host references
// and times prefill attention and GEMMs.
#include <cuda_runtime.h>
#include <library_types.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend.h"
#include "gpu/cublas_loader.h"
#include "gpu/cuda_util.h"
#include "gpu/kernels.h"
#include "quant.h"

static_assert(CUDA_R_32F == ctxr::gpu::kCudaR32F && CUDA_R_16F == ctxr::gpu::kCudaR16F &&
                  CUDA_R_16BF == ctxr::gpu::kCudaR16BF,
              "cudaDataType_t values differ from the ones passed to cublasGemmEx");

namespace ctxr {
namespace {

using gpu::CublasApi;

// What a Matrix* handed out by this backend points at. A distinct type (not ctxr::Matrix,
// which the CPU backend defines in the same program) cast to and from Matrix*.
struct CudaMatrix {
  DType dtype;
  int rows, cols;
  void* data;
};

const CudaMatrix* as_cuda(const Matrix* m) { return reinterpret_cast<const CudaMatrix*>(m); }

size_t dtype_bytes(DType d) { return d == DType::F32 ? 4 : 2; }
const char* dtype_name(DType d) { return d == DType::F32 ? "f32" : d == DType::F16 ? "f16" : d == DType::BF16 ? "bf16" : "quantized"; }

float bf16_bits_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    u = sign;  // ±0
  } else {     // subnormal: man · 2^-24, normalised
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  const char* name() const override { return name_.c_str(); }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void to_device(void* dst, const void* src_host, size_t bytes) override;
  void to_host(void* dst_host, const void* src, size_t bytes) override;

  Matrix* matrix(const void* data_host, DType dtype, int rows, int cols) override;
  Matrix* matrix_parts(const void* data_host, const std::vector<MatrixPart>& parts, int cols) override;
  void free_matrix(Matrix* m) override;
  const char* matrix_dtype() const override { return matrix_dtype_.c_str(); }
  float* vector(const void* data_host, DType dtype, int n) override;

  void embed(const Matrix* table, const int32_t* tokens, int n, float* out) override;
  void rms_norm(const float* x, const float* w, float eps, int n, int d, float* out) override;
  void rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w, float eps) override;
  void linear(const float* x, int n, const Matrix* w, const float* bias, float* y) override;
  void rope(float* x, int stride, int n, int heads, const RopeShape& shape, const int32_t* pos,
            const float* inv_freq, int sign) override;
  void silu_mul(const float* x, int n, int ff, float* out) override;
  void add(float* x, const float* y, size_t n) override;
  void gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst) override;

  void kv_init(const KvGeometry& g) override;
  void kv_write(int layer, const float* k, const float* v, int stride, const int32_t* slots, int n) override;
  void kv_read(int layer, const int32_t* slots, int n, float* k, float* v) override;
  void kv_copy_blocks(const int32_t* src_host, const int32_t* dst_host, int n) override;
  void attention(int layer, const float* q, int q_stride, const AttentionBatch& batch, float* out) override;

 private:
  enum Scratch { kScratchHalf, kScratchAttn, kScratchPairs, kScratchCount };

  void use() const { CTXR_CUDA_CHECK(cudaSetDevice(device_)); }
  void* scratch(Scratch which, size_t bytes);
  void init_gemm();
  void free_kv();
  void trim_cache();
  void check_layer(int layer, const char* op) const;

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  gpu::AttnDevice attn_dev_{};

  CublasApi cublas_;
  gpu::cublasHandle_t handle_ = nullptr;
  bool use_cublas_ = false;

  // alloc() cache: capacity of every block handed out, and released blocks by capacity.
  std::unordered_map<void*, size_t> live_;
  std::multimap<size_t, void*> cached_;

  void* scratch_[kScratchCount] = {};
  size_t scratch_bytes_[kScratchCount] = {};

  KvGeometry kv_{};
  float* k_cache_ = nullptr;
  float* v_cache_ = nullptr;
  size_t layer_floats_ = 0;

  std::string matrix_dtype_ = "f32";
  bool have_matrix_ = false;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  int count = 0;
  CTXR_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" +
                             std::to_string(count) + " device(s) visible)");
  CTXR_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CTXR_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name_ = std::string("cuda:") + prop.name;
  int optin = 0;
  CTXR_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  attn_dev_.sm_count = prop.multiProcessorCount;
  attn_dev_.smem_optin = static_cast<size_t>(optin);
  CTXR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  // Probe that this binary carries code for the GPU (CUDA_ARCH in the Makefile).
  float* probe = nullptr;
  CTXR_CUDA_CHECK(cudaMalloc(&probe, sizeof(float)));
  CTXR_CUDA_CHECK(cudaMemsetAsync(probe, 0, sizeof(float), stream_));
  try {
    gpu::launch_add(probe, probe, 1, stream_);
    CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (const std::exception& e) {
    cudaFree(probe);
    throw std::runtime_error(std::string(e.what()) + " — the GPU (compute capability " +
                             std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                             ") may need another CUDA_ARCH in cuda/Makefile");
  }
  CTXR_CUDA_CHECK(cudaFree(probe));
  init_gemm();
}

void CudaBackend::init_gemm() {
  const char* off = std::getenv("CTXR_NO_CUBLAS");
  if (off && *off && std::strcmp(off, "0") != 0) {
    std::fprintf(stderr, "ctxr-runner: CTXR_NO_CUBLAS is set; GEMM via the built-in CUDA kernel (slower)\n");
    return;
  }
  std::string why;
  if (!gpu::load_cublas(&cublas_, &why)) {
    std::fprintf(stderr,
                 "ctxr-runner: WARNING: cuBLAS could not be loaded; GEMM via the built-in CUDA kernel "
                 "(correct but several times slower). Set CTXR_CUBLAS=/full/path/libcublas.so.N or "
                 "LD_LIBRARY_PATH. Tried:\n%s",
                 why.c_str());
    return;
  }
  gpu::cublasStatus_t st = cublas_.create(&handle_);
  if (st != 0) {
    std::fprintf(stderr,
                 "ctxr-runner: WARNING: cublasCreate failed (%s) with %s; GEMM via the built-in CUDA "
                 "kernel (slower)\n",
                 gpu::cublas_status_name(st), cublas_.path.c_str());
    handle_ = nullptr;
    return;
  }
  st = cublas_.set_stream(handle_, stream_);
  if (st != 0) {
    std::fprintf(stderr, "ctxr-runner: WARNING: cublasSetStream failed (%s); GEMM via the built-in CUDA kernel\n",
                 gpu::cublas_status_name(st));
    cublas_.destroy(handle_);
    handle_ = nullptr;
    return;
  }
  // Default math: f32 GEMMs stay true FP32 (no TF32). Half inputs use tensor cores regardless.
  if (cublas_.set_math_mode) cublas_.set_math_mode(handle_, gpu::kCublasDefaultMath);
  int version = 0;
  if (cublas_.get_version) cublas_.get_version(handle_, &version);
  use_cublas_ = true;
  std::fprintf(stderr, "ctxr-runner: GEMM via cuBLAS %d (%s)\n", version, cublas_.path.c_str());
}

CudaBackend::~CudaBackend() {
  // No throwing here: errors are ignored, everything is handed back.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (handle_) cublas_.destroy(handle_);
  free_kv();
  for (auto& kv : live_) cudaFree(kv.first);
  for (auto& kv : cached_) cudaFree(kv.second);
  for (int i = 0; i < kScratchCount; i++)
    if (scratch_[i]) cudaFree(scratch_[i]);
  if (stream_) cudaStreamDestroy(stream_);
}

// ---- memory ---------------------------------------------------------------------------------

size_t round_capacity(size_t bytes) {
  const size_t step = bytes <= (size_t{1} << 20) ? 512 : (size_t{1} << 20);
  return (bytes + step - 1) / step * step;
}

void CudaBackend::trim_cache() {
  if (cached_.empty()) return;
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& kv : cached_) CTXR_CUDA_CHECK(cudaFree(kv.second));
  cached_.clear();
}

void* CudaBackend::alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  use();
  const size_t cap = round_capacity(bytes);
  auto it = cached_.lower_bound(cap);
  if (it != cached_.end() && it->first <= cap + cap / 4) {
    void* p = it->second;
    live_[p] = it->first;
    cached_.erase(it);
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, cap);
  if (e == cudaErrorMemoryAllocation && !cached_.empty()) {
    cudaGetLastError();  // clear the sticky-free error state of the failed call
    trim_cache();
    e = cudaMalloc(&p, cap);
  }
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA error: cudaMalloc(" + std::to_string(bytes) + " bytes) failed: " +
                             cudaGetErrorString(e));
  live_[p] = cap;
  return p;
}

void CudaBackend::release(void* p) {
  if (!p) return;
  auto it = live_.find(p);
  if (it == live_.end()) throw std::logic_error("CudaBackend::release: pointer not from alloc()/vector()");
  cached_.emplace(it->second, p);  // reused by a later alloc(): all work is stream-ordered
  live_.erase(it);
}

void* CudaBackend::scratch(Scratch which, size_t bytes) {
  if (bytes <= scratch_bytes_[which]) return scratch_[which];
  // Work queued earlier may still read the old buffer.
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (scratch_[which]) CTXR_CUDA_CHECK(cudaFree(scratch_[which]));
  scratch_[which] = nullptr;
  scratch_bytes_[which] = 0;
  const size_t want = round_capacity(bytes + bytes / 2);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, want);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    trim_cache();
    e = cudaMalloc(&p, round_capacity(bytes));
    if (e == cudaSuccess) {
      scratch_[which] = p;
      scratch_bytes_[which] = round_capacity(bytes);
      return p;
    }
  }
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA error: cudaMalloc(" + std::to_string(want) + " bytes) for scratch failed: " +
                             cudaGetErrorString(e));
  scratch_[which] = p;
  scratch_bytes_[which] = want;
  return p;
}

void CudaBackend::to_device(void* dst, const void* src_host, size_t bytes) {
  if (bytes == 0) return;
  use();
  // From pageable memory this returns once the data is staged, so the caller may reuse
  // src_host at once; the copy stays ordered after the work already queued.
  CTXR_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::to_host(void* dst_host, const void* src, size_t bytes) {
  use();
  if (bytes > 0) CTXR_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- weights --------------------------------------------------------------------------------

Matrix* CudaBackend::matrix(const void* data_host, DType dtype, int rows, int cols) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("CudaBackend::matrix: empty matrix");
  if (dtype_quantized(dtype)) {
    // GGUF blocks: dequantized to f16 once here (no quantized GPU kernels yet).
    std::vector<uint16_t> half(static_cast<size_t>(rows) * cols);
    std::vector<float> row(cols);
    const size_t row_bytes = dtype_row_bytes(dtype, cols);
    for (int r = 0; r < rows; r++) {
      dequantize_row(dtype, static_cast<const uint8_t*>(data_host) + r * row_bytes, cols, row.data());
      for (int c = 0; c < cols; c++) half[static_cast<size_t>(r) * cols + c] = f32_to_f16_bits(row[c]);
    }
    return matrix(half.data(), DType::F16, rows, cols);
  }
  use();
  const size_t bytes = static_cast<size_t>(rows) * cols * dtype_bytes(dtype);
  void* d = nullptr;
  cudaError_t e = cudaMalloc(&d, bytes);
  if (e == cudaErrorMemoryAllocation && !cached_.empty()) {
    cudaGetLastError();
    trim_cache();
    e = cudaMalloc(&d, bytes);
  }
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA error: cudaMalloc(" + std::to_string(bytes) + " bytes) for a weight matrix failed: " +
                             cudaGetErrorString(e));
  try {
    CTXR_CUDA_CHECK(cudaMemcpyAsync(d, data_host, bytes, cudaMemcpyHostToDevice, stream_));
    CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    cudaFree(d);
    throw;
  }
  const char* dn = dtype_name(dtype);
  if (!have_matrix_) matrix_dtype_ = dn;
  else if (matrix_dtype_ != dn) matrix_dtype_ = "mixed";
  have_matrix_ = true;
  return reinterpret_cast<Matrix*>(new CudaMatrix{dtype, rows, cols, d});
}

Matrix* CudaBackend::matrix_parts(const void* data_host, const std::vector<MatrixPart>& parts, int cols) {
  int rows = 0;
  bool same = true;
  for (const MatrixPart& p : parts) {
    rows += p.rows;
    same = same && p.dtype == parts[0].dtype;
  }
  if (same) return matrix(data_host, parts[0].dtype, rows, cols);
  std::vector<uint16_t> half(static_cast<size_t>(rows) * cols);
  std::vector<float> row(cols);
  const auto* at = static_cast<const uint8_t*>(data_host);
  size_t out = 0;
  for (const MatrixPart& p : parts) {
    const size_t row_bytes = dtype_row_bytes(p.dtype, cols);
    for (int r = 0; r < p.rows; r++, at += row_bytes) {
      dequantize_row(p.dtype, at, cols, row.data());
      for (int c = 0; c < cols; c++) half[out++] = f32_to_f16_bits(row[c]);
    }
  }
  return matrix(half.data(), DType::F16, rows, cols);
}

void CudaBackend::free_matrix(Matrix* m) {
  if (!m) return;
  auto* cm = reinterpret_cast<CudaMatrix*>(m);
  use();
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  CTXR_CUDA_CHECK(cudaFree(cm->data));
  delete cm;
}

float* CudaBackend::vector(const void* data_host, DType dtype, int n) {
  if (n <= 0) return nullptr;
  std::vector<float> f(static_cast<size_t>(n));
  if (dtype == DType::F32) {
    std::memcpy(f.data(), data_host, f.size() * sizeof(float));
  } else {
    const auto* h = static_cast<const uint16_t*>(data_host);
    for (size_t i = 0; i < f.size(); i++) {
      uint16_t bits;
      std::memcpy(&bits, h + i, 2);
      f[i] = dtype == DType::F16 ? f16_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
  }
  auto* d = static_cast<float*>(alloc(f.size() * sizeof(float)));
  CTXR_CUDA_CHECK(cudaMemcpyAsync(d, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));  // f dies here
  return d;
}

// ---- ops ------------------------------------------------------------------------------------

void CudaBackend::embed(const Matrix* table, const int32_t* tokens, int n, float* out) {
  const CudaMatrix* m = as_cuda(table);
  use();
  gpu::launch_embed(m->data, m->dtype, m->rows, m->cols, tokens, n, out, stream_);
}

void CudaBackend::rms_norm(const float* x, const float* w, float eps, int n, int d, float* out) {
  use();
  gpu::launch_rms_norm(x, w, eps, n, d, out, stream_);
}

void CudaBackend::rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w, float eps) {
  use();
  gpu::launch_rms_norm_heads(x, stride, n, heads, head_dim, w, eps, stream_);
}

void CudaBackend::linear(const float* x, int n, const Matrix* w, const float* bias, float* y) {
  const CudaMatrix* m = as_cuda(w);
  if (n <= 0) return;
  use();
  if (!use_cublas_) {
    gpu::launch_gemm_fallback(x, n, m->data, m->dtype, m->rows, m->cols, bias, y, stream_);
    return;
  }
  // Row-major y[n][rows] = x[n][cols] · Wᵀ seen column-major: W (row-major [rows][cols]) is
  // the column-major cols×rows matrix with ld = cols, x is column-major cols×n (ld = cols), y
  // is column-major rows×n (ld = rows). So C(rows×n) = op_T(W) · op_N(x): m = rows, n = n,
  // k = cols, transa = T, transb = N.
  const void* xb = x;
  int x_type = gpu::kCudaR32F, w_type = gpu::kCudaR32F;
  if (m->dtype != DType::F32) {
    const size_t count = static_cast<size_t>(n) * m->cols;
    void* buf = scratch(kScratchHalf, count * 2);
    gpu::launch_f32_to_half(x, count, buf, m->dtype, stream_);
    xb = buf;
    x_type = w_type = m->dtype == DType::F16 ? gpu::kCudaR16F : gpu::kCudaR16BF;
  }
  const float one = 1.0f, zero = 0.0f;  // host pointer mode (the default)
  const gpu::cublasStatus_t st =
      cublas_.gemm_ex(handle_, gpu::kCublasOpT, gpu::kCublasOpN, m->rows, n, m->cols, &one, m->data, w_type,
                      m->cols, xb, x_type, m->cols, &zero, y, gpu::kCudaR32F, m->rows, gpu::kCublasCompute32F,
                      gpu::kCublasGemmDefault);
  if (st != 0)
    throw std::runtime_error(std::string("cuBLAS error: cublasGemmEx(") + std::to_string(m->rows) + "x" +
                             std::to_string(m->cols) + " " + dtype_name(m->dtype) + ", n=" + std::to_string(n) +
                             ") failed: " + gpu::cublas_status_name(st) + " (" + std::to_string(st) + ")");
  if (bias) gpu::launch_add_bias(y, bias, n, m->rows, stream_);
}

void CudaBackend::rope(float* x, int stride, int n, int heads, const RopeShape& shape, const int32_t* pos,
                       const float* inv_freq, int sign) {
  use();
  gpu::launch_rope(x, stride, n, heads, shape.head_dim, shape.rotary_dim, pos, inv_freq, sign, shape.scale, stream_);
}

void CudaBackend::silu_mul(const float* x, int n, int ff, float* out) {
  use();
  gpu::launch_silu_mul(x, n, ff, out, stream_);
}

void CudaBackend::add(float* x, const float* y, size_t n) {
  use();
  gpu::launch_add(x, y, n, stream_);
}

void CudaBackend::gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst) {
  use();
  gpu::launch_gather_rows(src, rows, n, d, dst, stream_);
}

// ---- KV cache -------------------------------------------------------------------------------

void CudaBackend::free_kv() {
  if (k_cache_) cudaFree(k_cache_);
  if (v_cache_) cudaFree(v_cache_);
  k_cache_ = v_cache_ = nullptr;
  layer_floats_ = 0;
  kv_ = KvGeometry{};
}

void CudaBackend::kv_init(const KvGeometry& g) {
  if (g.layers <= 0 || g.num_blocks <= 0 || g.block_size <= 0 || g.kv_width <= 0)
    throw std::invalid_argument("CudaBackend::kv_init: bad geometry");
  if (g.dtype != KvDtype::F32) throw std::invalid_argument("the CUDA backend keeps its KV cache in f32 (--kv-dtype f16 is CPU only)");
  if (!g.layer_blocks.empty()) throw std::invalid_argument("the CUDA backend keeps one KV pool for every layer (no sliding-window group)");
  use();
  CTXR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  free_kv();
  const size_t layer_floats = static_cast<size_t>(g.num_blocks) * g.block_size * g.kv_width;
  const size_t bytes = layer_floats * g.layers * sizeof(float);
  trim_cache();
  cudaError_t e = cudaMalloc(&k_cache_, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&v_cache_, bytes);
  if (e != cudaSuccess) {
    free_kv();
    throw std::runtime_error("CUDA error: cudaMalloc of the KV cache (2 x " + std::to_string(bytes) +
                             " bytes) failed: " + cudaGetErrorString(e));
  }
  CTXR_CUDA_CHECK(cudaMemsetAsync(k_cache_, 0, bytes, stream_));
  CTXR_CUDA_CHECK(cudaMemsetAsync(v_cache_, 0, bytes, stream_));
  kv_ = g;
  layer_floats_ = layer_floats;
}

void CudaBackend::check_layer(int layer, const char* op) const {
  if (!k_cache_) throw std::logic_error(std::string("CudaBackend::") + op + ": kv_init() not called");
  if (layer < 0 || layer >= kv_.layers)
    throw std::out_of_range(std::string("CudaBackend::") + op + ": layer " + std::to_string(layer));
}

void CudaBackend::kv_write(int layer, const float* k, const float* v, int stride, const int32_t* slots, int n) {
  check_layer(layer, "kv_write");
  use();
  const size_t off = static_cast<size_t>(layer) * layer_floats_;
  gpu::launch_kv_write(k_cache_ + off, v_cache_ + off, kv_.num_blocks * kv_.block_size, kv_.kv_width, k, v,
                       stride, slots, n, stream_);
}

void CudaBackend::kv_read(int layer, const int32_t* slots, int n, float* k, float* v) {
  check_layer(layer, "kv_read");
  use();
  const size_t off = static_cast<size_t>(layer) * layer_floats_;
  gpu::launch_kv_read(k_cache_ + off, v_cache_ + off, kv_.num_blocks * kv_.block_size, kv_.kv_width, slots, n,
                      k, v, stream_);
}

void CudaBackend::kv_copy_blocks(const int32_t* src_host, const int32_t* dst_host, int n) {
  if (n <= 0) return;
  check_layer(0, "kv_copy_blocks");
  use();
  std::vector<int32_t> pairs(2 * static_cast<size_t>(n));
  std::unordered_set<int32_t> srcs, dsts;
  bool hazard = false;  // a block both read and written, or written twice, in this call
  for (int i = 0; i < n; i++) {
    const int32_t s = src_host[i], d = dst_host[i];
    if (s < 0 || s >= kv_.num_blocks || d < 0 || d >= kv_.num_blocks)
      throw std::out_of_range("CudaBackend::kv_copy_blocks: block id out of range");
    pairs[2 * i] = s;
    pairs[2 * i + 1] = d;
    if (!dsts.insert(d).second) hazard = true;
    srcs.insert(s);
  }
  for (int32_t d : dsts)
    if (srcs.count(d)) hazard = true;
  const size_t block_floats = static_cast<size_t>(kv_.block_size) * kv_.kv_width;
  if (hazard) {  // keep the sequential meaning: pair i sees the writes of pairs before it
    const size_t bytes = block_floats * sizeof(float);
    for (int i = 0; i < n; i++) {
      if (pairs[2 * i] == pairs[2 * i + 1]) continue;
      for (int l = 0; l < kv_.layers; l++) {
        const size_t base = static_cast<size_t>(l) * layer_floats_;
        const size_t so = base + static_cast<size_t>(pairs[2 * i]) * block_floats;
        const size_t dof = base + static_cast<size_t>(pairs[2 * i + 1]) * block_floats;
        CTXR_CUDA_CHECK(cudaMemcpyAsync(k_cache_ + dof, k_cache_ + so, bytes, cudaMemcpyDeviceToDevice, stream_));
        CTXR_CUDA_CHECK(cudaMemcpyAsync(v_cache_ + dof, v_cache_ + so, bytes, cudaMemcpyDeviceToDevice, stream_));
      }
    }
    return;
  }
  auto* dev_pairs = static_cast<int32_t*>(scratch(kScratchPairs, pairs.size() * sizeof(int32_t)));
  CTXR_CUDA_CHECK(cudaMemcpyAsync(dev_pairs, pairs.data(), pairs.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
  gpu::launch_kv_copy_blocks(k_cache_, v_cache_, layer_floats_, kv_.layers, block_floats, dev_pairs, n, stream_);
}

void CudaBackend::attention(int layer, const float* q, int q_stride, const AttentionBatch& batch, float* out) {
  check_layer(layer, "attention");
  if (batch.n_tokens <= 0) return;
  use();
  const size_t off = static_cast<size_t>(layer) * layer_floats_;
  gpu::AttnArgs a{};
  a.q = q;
  a.q_stride = q_stride;
  a.k_layer = k_cache_ + off;
  a.v_layer = v_cache_ + off;
  a.kv_width = kv_.kv_width;
  a.block_size = kv_.block_size;
  a.batch = &batch;
  a.out = out;
  const size_t bytes = gpu::attention_scratch_bytes(a, attn_dev_);
  void* s = bytes ? scratch(kScratchAttn, bytes) : nullptr;
  gpu::launch_attention(a, attn_dev_, s, stream_);
}

}  // namespace

Backend* make_cuda_backend(int device) { return new CudaBackend(device); }

}  // namespace ctxr
