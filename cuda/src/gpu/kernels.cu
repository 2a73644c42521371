// Element-wise, row and KV-cache kernels of the CUDA backend, and the built-in GEMM used when
// cuBLAS cannot be loaded. All arithmetic is float32; indices into large buffers are size_t.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/cuda_util.h"
#include "gpu/kernels.h"

namespace ctxr::gpu {
namespace {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

// Grid size for a grid-stride loop over `count` items with `threads` per block.
unsigned grid_for(size_t count, int threads) {
  const size_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(blocks, 65535u * 8)));
}

// ---------------------------------------------------------------------------------------------
template <typename T>
__global__ void embed_kernel(const T* table, int rows, int cols, const int32_t* tokens, float* out) {
  const int i = blockIdx.x;
  const int tok = tokens[i];
  float* o = out + static_cast<size_t>(i) * cols;
  if (tok < 0 || tok >= rows) {  // validated by the caller; never read out of bounds
    for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = 0.f;
    return;
  }
  const T* r = table + static_cast<size_t>(tok) * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = to_f(r[j]);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    float s = lane < nw ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// x and out may alias: each element is read and then written by the same thread.
__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int d, float* out) {
  const size_t row = blockIdx.x;
  const float* xr = x + row * d;
  float* o = out + row * d;
  float ss = 0.f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = xr[j];
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = xr[j] * inv * w[j];
}

// One block per (row, head): blockIdx.x = row * heads + head. Each element is read and written
// by the same thread, after block_sum's barrier, so the in-place update is safe.
__global__ void rms_norm_heads_kernel(float* x, int stride, int heads, int head_dim, const float* w, float eps) {
  const int row = blockIdx.x / heads, head = blockIdx.x % heads;
  float* e = x + static_cast<size_t>(row) * stride + static_cast<size_t>(head) * head_dim;
  float ss = 0.f;
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) ss = fmaf(e[j], e[j], ss);
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) e[j] = e[j] * inv * w[j];
}

// One block per row; thread j computes the angle for pair (j, j + half) once (in double: a
// position of 1e5 times inv_freq near 1 is an angle float cannot hold to the needed digits)
// and rotates that pair in every head (heads head_dim apart; half = rotary_dim / 2).
__global__ void rope_kernel(float* x, int stride, int heads, int head_dim, int half, const int32_t* pos,
                            const float* inv_freq, int sign, float scale) {
  float* row = x + static_cast<size_t>(blockIdx.x) * stride;
  const double p = static_cast<double>(pos[blockIdx.x]);
  const double m = sign < 0 ? 1.0 / scale : static_cast<double>(scale);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    double sd, cd;
    sincos(p * static_cast<double>(inv_freq[j]), &sd, &cd);
    const float c = static_cast<float>(m * cd);
    const float s = sign < 0 ? -static_cast<float>(m * sd) : static_cast<float>(m * sd);
    for (int h = 0; h < heads; h++) {
      float* e = row + static_cast<size_t>(h) * head_dim;
      const float x1 = e[j], x2 = e[j + half];
      e[j] = x1 * c - x2 * s;
      e[j + half] = x2 * c + x1 * s;
    }
  }
}

__global__ void silu_mul_kernel(const float* x, int n, int ff, float* out) {
  const size_t total = static_cast<size_t>(n) * ff;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = idx / ff, j = idx % ff;
    const float g = x[i * 2 * ff + j];
    const float u = x[i * 2 * ff + ff + j];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int d, float* dst) {
  const float* s = src + static_cast<size_t>(rows[blockIdx.x]) * d;
  float* o = dst + static_cast<size_t>(blockIdx.x) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = s[j];
}

__global__ void add_bias_kernel(float* y, const float* bias, int n, int cols) {
  const size_t total = static_cast<size_t>(n) * cols;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[idx] += bias[idx % cols];
}

__global__ void to_half_kernel(const float* x, size_t n, __half* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(x[i]);
}
__global__ void to_bf16_kernel(const float* x, size_t n, __nv_bfloat16* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Built-in GEMM: y[m][n] = x[m][k] · W[n][k]ᵀ (+ bias[n]). 64×64 output tile per block of 256
// threads, 4×4 outputs per thread, k in steps of 16 staged k-major in shared memory so that
// each thread reads its 4 x-values and 4 w-values as one float4 each.
constexpr int kGemmBM = 64, kGemmBN = 64, kGemmBK = 16, kGemmPad = 4;

template <typename T>
__global__ void __launch_bounds__(256) gemm_nt_kernel(const float* __restrict__ x, int m,
                                                      const T* __restrict__ w, int n, int k,
                                                      const float* __restrict__ bias,
                                                      float* __restrict__ y) {
  __shared__ __align__(16) float xs[kGemmBK][kGemmBM + kGemmPad];
  __shared__ __align__(16) float ws[kGemmBK][kGemmBN + kGemmPad];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * kGemmBM;
  const int n0 = blockIdx.x * kGemmBN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < k; k0 += kGemmBK) {
    for (int e = tid; e < kGemmBM * kGemmBK; e += 256) {
      const int r = e / kGemmBK, kk = e % kGemmBK;
      const int gk = k0 + kk;
      const int gm = m0 + r, gn = n0 + r;
      xs[kk][r] = (gm < m && gk < k) ? x[static_cast<size_t>(gm) * k + gk] : 0.f;
      ws[kk][r] = (gn < n && gk < k) ? to_f(w[static_cast<size_t>(gn) * k + gk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kGemmBK; kk++) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int gm = m0 + ty * 4 + i;
    if (gm >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int gn = n0 + tx * 4 + j;
      if (gn < n) y[static_cast<size_t>(gm) * n + gn] = acc[i][j] + (bias ? bias[gn] : 0.f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
__global__ void kv_write_kernel(float* kc, float* vc, int num_slots, int kvw, const float* k,
                                const float* v, int stride, const int32_t* slots) {
  const int slot = slots[blockIdx.x];
  if (slot < 0 || slot >= num_slots) return;  // validated by the caller
  const float* ks = k + static_cast<size_t>(blockIdx.x) * stride;
  const float* vs = v + static_cast<size_t>(blockIdx.x) * stride;
  float* kd = kc + static_cast<size_t>(slot) * kvw;
  float* vd = vc + static_cast<size_t>(slot) * kvw;
  for (int j = threadIdx.x; j < kvw; j += blockDim.x) {
    kd[j] = ks[j];
    vd[j] = vs[j];
  }
}

__global__ void kv_read_kernel(const float* kc, const float* vc, int num_slots, int kvw,
                               const int32_t* slots, float* k, float* v) {
  const int slot = slots[blockIdx.x];
  float* kd = k + static_cast<size_t>(blockIdx.x) * kvw;
  float* vd = v + static_cast<size_t>(blockIdx.x) * kvw;
  const bool ok = slot >= 0 && slot < num_slots;
  const float* ks = kc + (ok ? static_cast<size_t>(slot) * kvw : 0);
  const float* vs = vc + (ok ? static_cast<size_t>(slot) * kvw : 0);
  for (int j = threadIdx.x; j < kvw; j += blockDim.x) {
    kd[j] = ok ? ks[j] : 0.f;
    vd[j] = ok ? vs[j] : 0.f;
  }
}

// grid (pairs, layers, 2): blockIdx.z picks K or V.
__global__ void kv_copy_blocks_kernel(float* kc, float* vc, size_t layer_floats, size_t block_floats,
                                      const int32_t* pairs) {
  float* base = (blockIdx.z == 0 ? kc : vc) + blockIdx.y * layer_floats;
  const float4* src = reinterpret_cast<const float4*>(base + pairs[2 * blockIdx.x] * block_floats);
  float4* dst = reinterpret_cast<float4*>(base + pairs[2 * blockIdx.x + 1] * block_floats);
  // Blocks start 16-byte aligned when block_floats is a multiple of 4 (always, in practice).
  const size_t n4 = block_floats % 4 == 0 ? block_floats / 4 : 0;
  for (size_t j = threadIdx.x; j < n4; j += blockDim.x) dst[j] = src[j];
  const float* s1 = reinterpret_cast<const float*>(src);
  float* d1 = reinterpret_cast<float*>(dst);
  for (size_t j = n4 * 4 + threadIdx.x; j < block_floats; j += blockDim.x) d1[j] = s1[j];
}

int row_threads(int width) {
  // One block per row: enough threads for the width, a multiple of 32, at most 256.
  int t = ((width + 31) / 32) * 32;
  return std::max(32, std::min(256, t));
}

}  // namespace

void launch_embed(const void* table, DType dtype, int rows, int cols, const int32_t* tokens, int n,
                  float* out, cudaStream_t stream) {
  if (n <= 0) return;
  const int t = row_threads(cols);
  switch (dtype) {
    case DType::F32:
      embed_kernel<<<n, t, 0, stream>>>(static_cast<const float*>(table), rows, cols, tokens, out);
      break;
    case DType::F16:
      embed_kernel<<<n, t, 0, stream>>>(static_cast<const __half*>(table), rows, cols, tokens, out);
      break;
    case DType::BF16:
      embed_kernel<<<n, t, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), rows, cols, tokens, out);
      break;
    default:  // quantized matrices are widened to f16 by CudaBackend::matrix
      break;
  }
  CTXR_CUDA_LAUNCH_CHECK("embed_kernel");
}

void launch_rms_norm(const float* x, const float* w, float eps, int n, int d, float* out,
                     cudaStream_t stream) {
  if (n <= 0) return;
  const int t = d >= 2048 ? 512 : 256;
  rms_norm_kernel<<<n, t, 0, stream>>>(x, w, eps, d, out);
  CTXR_CUDA_LAUNCH_CHECK("rms_norm_kernel");
}

void launch_rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w,
                           float eps, cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || head_dim <= 0) return;
  const int t = row_threads(head_dim);
  rms_norm_heads_kernel<<<static_cast<unsigned>(n) * static_cast<unsigned>(heads), t, 0, stream>>>(x, stride, heads, head_dim, w, eps);
  CTXR_CUDA_LAUNCH_CHECK("rms_norm_heads_kernel");
}

void launch_rope(float* x, int stride, int n, int heads, int head_dim, int rotary_dim, const int32_t* pos,
                 const float* inv_freq, int sign, float scale, cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || rotary_dim < 2) return;
  const int t = row_threads(rotary_dim / 2);
  rope_kernel<<<n, t, 0, stream>>>(x, stride, heads, head_dim, rotary_dim / 2, pos, inv_freq, sign, scale);
  CTXR_CUDA_LAUNCH_CHECK("rope_kernel");
}

void launch_silu_mul(const float* x, int n, int ff, float* out, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(n) * ff;
  if (total == 0) return;
  silu_mul_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, n, ff, out);
  CTXR_CUDA_LAUNCH_CHECK("silu_mul_kernel");
}

void launch_add(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, y, n);
  CTXR_CUDA_LAUNCH_CHECK("add_kernel");
}

void launch_gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst,
                        cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  gather_rows_kernel<<<n, row_threads(d), 0, stream>>>(src, rows, d, dst);
  CTXR_CUDA_LAUNCH_CHECK("gather_rows_kernel");
}

void launch_add_bias(float* y, const float* bias, int n, int cols, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(n) * cols;
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total, 256), 256, 0, stream>>>(y, bias, n, cols);
  CTXR_CUDA_LAUNCH_CHECK("add_bias_kernel");
}

void launch_f32_to_half(const float* x, size_t count, void* out, DType dtype, cudaStream_t stream) {
  if (count == 0) return;
  if (dtype == DType::F16)
    to_half_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, count, static_cast<__half*>(out));
  else if (dtype == DType::BF16)
    to_bf16_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, count, static_cast<__nv_bfloat16*>(out));
  else
    throw std::logic_error("launch_f32_to_half: dtype must be F16 or BF16");
  CTXR_CUDA_LAUNCH_CHECK("f32 to half conversion");
}

void launch_gemm_fallback(const float* x, int n, const void* w, DType dtype, int rows, int cols,
                          const float* bias, float* y, cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return;
  const dim3 grid((rows + kGemmBN - 1) / kGemmBN, (n + kGemmBM - 1) / kGemmBM);
  if (grid.y > 65535u) throw std::runtime_error("built-in GEMM: too many rows in one call");
  switch (dtype) {
    case DType::F32:
      gemm_nt_kernel<<<grid, 256, 0, stream>>>(x, n, static_cast<const float*>(w), rows, cols, bias, y);
      break;
    case DType::F16:
      gemm_nt_kernel<<<grid, 256, 0, stream>>>(x, n, static_cast<const __half*>(w), rows, cols, bias, y);
      break;
    case DType::BF16:
      gemm_nt_kernel<<<grid, 256, 0, stream>>>(x, n, static_cast<const __nv_bfloat16*>(w), rows, cols, bias, y);
      break;
  }
  CTXR_CUDA_LAUNCH_CHECK("gemm_nt_kernel");
}

void launch_kv_write(float* k_layer, float* v_layer, int num_slots, int kv_width, const float* k,
                     const float* v, int stride, const int32_t* slots, int n, cudaStream_t stream) {
  if (n <= 0) return;
  kv_write_kernel<<<n, row_threads(kv_width), 0, stream>>>(k_layer, v_layer, num_slots, kv_width, k,
                                                           v, stride, slots);
  CTXR_CUDA_LAUNCH_CHECK("kv_write_kernel");
}

void launch_kv_read(const float* k_layer, const float* v_layer, int num_slots, int kv_width,
                    const int32_t* slots, int n, float* k, float* v, cudaStream_t stream) {
  if (n <= 0) return;
  kv_read_kernel<<<n, row_threads(kv_width), 0, stream>>>(k_layer, v_layer, num_slots, kv_width,
                                                          slots, k, v);
  CTXR_CUDA_LAUNCH_CHECK("kv_read_kernel");
}

void launch_kv_copy_blocks(float* k_cache, float* v_cache, size_t layer_floats, int layers,
                           size_t block_floats, const int32_t* pairs, int n, cudaStream_t stream) {
  if (n <= 0 || layers <= 0) return;
  if (layers > 65535) throw std::runtime_error("kv_copy_blocks: too many layers");
  const dim3 grid(n, layers, 2);
  kv_copy_blocks_kernel<<<grid, 256, 0, stream>>>(k_cache, v_cache, layer_floats, block_floats, pairs);
  CTXR_CUDA_LAUNCH_CHECK("kv_copy_blocks_kernel");
}

}  // namespace ctxr::gpu
