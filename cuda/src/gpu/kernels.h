// Launchers for the CUDA backend's own kernels (kernels.cu, attention.cu). Every pointer is
// device memory; every launch goes to `stream` and is checked (throws std::runtime_error).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend.h"

namespace ctxr::gpu {

// --- elementwise / row ops (kernels.cu) ---
void launch_embed(const void* table, DType dtype, int rows, int cols, const int32_t* tokens, int n,
                  float* out, cudaStream_t stream);
void launch_rms_norm(const float* x, const float* w, float eps, int n, int d, float* out,
                     cudaStream_t stream);
// Per-head RMSNorm in place: heads of head_dim floats at the start of n rows of stride `stride`.
void launch_rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w,
                           float eps, cudaStream_t stream);
void launch_rope(float* x, int stride, int n, int heads, int head_dim, int rotary_dim, const int32_t* pos,
                 const float* inv_freq, int sign, float scale, cudaStream_t stream);
void launch_silu_mul(const float* x, int n, int ff, float* out, cudaStream_t stream);
void launch_add(float* x, const float* y, size_t n, cudaStream_t stream);
void launch_gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst,
                        cudaStream_t stream);
// y[i][j] += bias[j] for y [n][cols].
void launch_add_bias(float* y, const float* bias, int n, int cols, cudaStream_t stream);
// out[i] = (half or bfloat16) x[i]; dtype is F16 or BF16.
void launch_f32_to_half(const float* x, size_t count, void* out, DType dtype, cudaStream_t stream);
// Built-in GEMM used when cuBLAS is unavailable: y[n][rows] = x[n][cols] · Wᵀ (+ bias), W
// [rows][cols] row-major in `dtype`.
void launch_gemm_fallback(const float* x, int n, const void* w, DType dtype, int rows, int cols,
                          const float* bias, float* y, cudaStream_t stream);

// --- KV cache (kernels.cu); k_layer/v_layer point at one layer's [num_slots][kv_width] ---
void launch_kv_write(float* k_layer, float* v_layer, int num_slots, int kv_width, const float* k,
                     const float* v, int stride, const int32_t* slots, int n, cudaStream_t stream);
void launch_kv_read(const float* k_layer, const float* v_layer, int num_slots, int kv_width,
                    const int32_t* slots, int n, float* k, float* v, cudaStream_t stream);
// pairs: device [n][2] (src block, dst block); copies block_floats floats per block, every layer
// (layer_floats apart), in both caches.
void launch_kv_copy_blocks(float* k_cache, float* v_cache, size_t layer_floats, int layers,
                           size_t block_floats, const int32_t* pairs, int n, cudaStream_t stream);

// --- attention (attention.cu) ---
struct AttnArgs {
  const float* q;  // [n_tokens] rows of stride q_stride, heads*head_dim used
  int q_stride;
  const float* k_layer;  // [num_slots][kv_width]
  const float* v_layer;
  int kv_width;
  int block_size;
  const AttentionBatch* batch;
  float* out;  // [n_tokens][heads*head_dim]
};
struct AttnDevice {
  int sm_count;
  size_t smem_optin;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
};
// Scratch bytes launch_attention needs for this call (split-KV partial results).
size_t attention_scratch_bytes(const AttnArgs& a, const AttnDevice& dev);
void launch_attention(const AttnArgs& a, const AttnDevice& dev, void* scratch, cudaStream_t stream);

}  // namespace ctxr::gpu
