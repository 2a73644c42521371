// The compute interface the model code (model.cpp) drives. Two implementations: the CPU
// backend (cpu/, OpenMP + AVX2 GEMM) and the CUDA backend (gpu/, cuBLAS + own kernels).
//
// Conventions: every pointer argument of an op is backend memory (host memory for the CPU
// backend, device memory for CUDA) unless its name ends in _host. Activations are float32,
// row-major, with an explicit row stride (in floats) where a row may be part of a wider fused
// row (q|k|v out of one fused projection). Ops are asynchronous on CUDA; to_host() waits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe_config.h"

namespace ctxr {

// Weight element types: the first three as in safetensors; the rest are ggml's quantized block
// formats as stored in GGUF files (quant.h), kept as they are by the CPU backend.
enum class DType { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q5_K, IQ4_XS };

// An opaque weight matrix [rows][cols] (row-major, as stored in safetensors), prepared by the
// backend for linear(): the CPU backend packs f32 panels and reads f16/bf16 and quantized
// matrices where they are; CUDA keeps f16/bf16.
struct Matrix;

// Consecutive rows of a matrix stored in one dtype (see Backend::matrix_parts).
struct MatrixPart {
  DType dtype;
  int rows;
  // Where this part's bytes are, for a backend whose reads_weights_in_place(dtype) is true (the
  // parts then need not be back to back: no fused copy); null: next in matrix_parts' data_host.
  const void* data = nullptr;
};

// How a backend stores its KV cache. kv_write/kv_read and EXPORT/IMPORT always carry f32 rows;
// an F16 cache rounds them to IEEE half on the way in.
enum class KvDtype { F32, F16 };

struct KvGeometry {
  int layers;
  int num_blocks;
  int block_size;
  int kv_width;  // kv_heads * head_dim
  KvDtype dtype = KvDtype::F32;
  // Per layer, the blocks of its pool (a model with sliding-window layers keeps those in a
  // smaller pool, kv_groups.h); empty: num_blocks for every layer.
  std::vector<int> layer_blocks = {};
  int blocks_of(int layer) const { return layer_blocks.empty() ? num_blocks : layer_blocks[layer]; }
};

// What rope() rotates of a head: Phi-4-mini rotates 3/4 of it; LongRoPE (Phi-3) multiplies cos
// and sin by its attention factor, so the rotated part of q·k grows by scale².
struct RopeShape {
  int head_dim;
  int rotary_dim;  // even, <= head_dim
  float scale = 1;
};

// One attention call for n_tokens query rows of possibly different sequences.
struct AttentionBatch {
  int n_tokens;
  int heads, kv_heads, head_dim;
  float scale;                  // 1/sqrt(head_dim)
  const int32_t* block_tables;  // [n_seqs][max_blocks]
  int max_blocks;
  const int32_t* token_seq;     // [n_tokens] row of block_tables
  const int32_t* token_len;     // [n_tokens] visible entries: sequence index + 1
  int max_len;                  // max of token_len
  // Sliding-window attention (backend supports_sliding_window()): when > 0, token t attends only
  // to entries token_len[t] - window .. token_len[t] - 1 (llama.cpp: masked when p1 - p0 >= window).
  int window;
  // Optional statistics: when stat_row is not null, token t with stat_row[t] >= 0 writes the
  // head-averaged attention probabilities over its entries into stats[stat_row[t]][0..len),
  // zero-filling [len, max_len).
  const int32_t* stat_row;
  float* stats;                 // [n_stat_rows][max_len], or in chunk mode [n_stat_rows][heads][stat_chunks]
  // Chunk mode (only for a backend whose chunk_statistics() is true): with stat_chunk_of not
  // null, the probabilities are summed per chunk and kept per head instead:
  // stats[stat_row[t]][h][c] = Σ p_h(e) over entries e < len with chunk_of[e] == c, where
  // chunk_of = stat_chunk_of + token_seq[t] * max_len (-1: the entry is in no chunk).
  const int32_t* stat_chunk_of;  // [n_seqs][max_len]
  int stat_chunks;
  // Learned attention sinks (gpt-oss; only for a backend whose supports_attention_sinks() is
  // true): when not null, head h's softmax denominator gains exp(sinks[h]), a logit in the scaled
  // domain (q·k · scale) of an extra entry that has no value, as llama.cpp's soft_max sinks. The
  // probabilities (and statistics) then sum to less than 1.
  const float* sinks;  // [heads]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu" or "cuda:<gpu name>"

  // Memory.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void to_device(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void to_host(void* dst_host, const void* src, size_t bytes) = 0;  // waits for prior ops
  // Hands memory freed by release() back to the system where the allocator keeps it (the CPU
  // backend: glibc's malloc_trim); called after large buffers were released.
  virtual void trim() {}

  // Weights. `data_host` is the raw safetensors payload in `dtype` (for a quantized dtype: rows
  // of cols / block elements blocks each, as in a GGUF file).
  virtual Matrix* matrix(const void* data_host, DType dtype, int rows, int cols) = 0;
  // A matrix whose consecutive row ranges have their own dtypes, the parts' bytes back to back
  // in `data_host` (a fused projection of a GGUF file). By default the parts must share one.
  virtual Matrix* matrix_parts(const void* data_host, const std::vector<MatrixPart>& parts, int cols) {
    int rows = 0;
    for (const MatrixPart& p : parts) {
      if (p.dtype != parts[0].dtype) throw std::runtime_error("this backend cannot mix dtypes in one matrix");
      rows += p.rows;
    }
    return matrix(data_host, parts[0].dtype, rows, cols);
  }
  // Whether a matrix of `t` keeps reading the caller's bytes (which must then stay mapped) rather
  // than a copy of its own: the CPU backend's f16, bf16 and quantized matrices. matrix_parts() then takes
  // MatrixPart::data pointers.
  virtual bool reads_weights_in_place(DType t) const { return false; }
  virtual void free_matrix(Matrix* m) = 0;
  virtual const char* matrix_dtype() const = 0;  // what matrices are kept in: "f32", "bf16", ...
  // Called once at load for every matrix linear() will use, so its one-time preparation (the CPU
  // backend's panel packing) happens before the first request rather than inside it.
  virtual void prepare_linear(Matrix* m) {}
  // A float32 vector in backend memory (norm weights, biases); release() frees it.
  virtual float* vector(const void* data_host, DType dtype, int n) = 0;

  // Ops.
  // out[i][:] = row tokens[i] of `table` (the embedding), widened to f32.
  virtual void embed(const Matrix* table, const int32_t* tokens, int n, float* out) = 0;
  // out[i] = x[i] / rms(x[i]) * w, rows of width d; x and out may alias.
  virtual void rms_norm(const float* x, const float* w, float eps, int n, int d, float* out) = 0;
  // RMSNorm of each head on its own (Qwen3's q/k norm): in each of n rows (row stride `stride`),
  // the first `heads` heads of head_dim floats are each scaled by 1/rms(head) * w, in place; w
  // is one head_dim weight shared by every head.
  virtual void rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w, float eps) = 0;
  // y[i][:] = x[i][:] · Wᵀ (+ bias): x is [n][W.cols], y is [n][W.rows], both contiguous.
  virtual void linear(const float* x, int n, const Matrix* w, const float* bias, float* y) = 0;
  // Rotates `heads` heads (shape.head_dim apart) at the start of each of n rows (row stride
  // `stride`) in place: the first shape.rotary_dim values of a head, pairs (j, j + rotary_dim/2)
  // by angle pos[i] * inv_freq[j] (rotary_dim/2 frequencies), multiplied by shape.scale; the
  // rest of the head stays. sign -1 undoes it (the opposite angle, divided by scale).
  virtual void rope(float* x, int stride, int n, int heads, const RopeShape& shape, const int32_t* pos,
                    const float* inv_freq, int sign) = 0;
  // out[i][j] = silu(x[i][j]) * x[i][ff + j] for rows of 2*ff (gate|up fused), out is [n][ff].
  virtual void silu_mul(const float* x, int n, int ff, float* out) = 0;
  // x += y over n floats.
  virtual void add(float* x, const float* y, size_t n) = 0;

  // Gemma 3's ops (model_config.h's gelu_tanh, embedding_scale, AttentionBatch::window);
  // a backend without them refuses such a model at load (Model checks supports_gemma3_ops()).
  virtual bool supports_gemma3_ops() const { return false; }
  // out[i][j] = gelu_tanh(x[i][j]) * x[i][ff + j] for rows of 2*ff (gate|up fused), out is [n][ff];
  // gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) · (g + 0.044715 g³))).
  virtual void gelu_tanh_mul(const float* x, int n, int ff, float* out) {
    throw std::runtime_error(std::string("the ") + name() + " backend has no GeGLU");
  }
  // x *= s over n floats.
  virtual void scale(float* x, float s, size_t n) { throw std::runtime_error(std::string("the ") + name() + " backend has no scale op"); }
  // dst[i][:] = src[rows[i]][:], rows of width d.
  virtual void gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst) = 0;

  // Mixture-of-experts ops (moe_ffn.h); a backend without them refuses such a model at load.
  virtual bool supports_moe() const { return false; }
  // out[i][:] = the experts' gated activation (moe_activation.h) of gate|up rows of 2*ff; out is [n][ff].
  virtual void expert_activation(const float* x, int n, int ff, const MoeConfig& c, float* out) {
    throw std::runtime_error(std::string("the ") + name() + " backend has no mixture-of-experts ops");
  }
  // Several linear() calls at once (a decode step's routed experts: small matrices whose own
  // parallel regions would cost more than their rows); by default one after another.
  struct LinearJob {
    const float* x;
    int n;
    const Matrix* w;
    const float* bias;
    float* y;
  };
  virtual void linear_jobs(const std::vector<LinearJob>& jobs) {
    for (const LinearJob& j : jobs) linear(j.x, j.n, j.w, j.bias, j.y);
  }
  // dst[rows[i]][:] += weights[i] * src[i][:] for i < n, rows of width d (rows may repeat).
  virtual void scatter_add_weighted(const float* src, const int32_t* rows, const float* weights, int n, int d, float* dst) {
    throw std::runtime_error(std::string("the ") + name() + " backend has no mixture-of-experts ops");
  }

  // KV cache (layer-first pages, see PROTOCOL.md).
  virtual bool supports_kv_dtype(KvDtype d) const { return d == KvDtype::F32; }
  // Throws std::invalid_argument for a dtype supports_kv_dtype() rejects.
  virtual void kv_init(const KvGeometry& g) = 0;
  // Writes K and V rows (stride `stride` floats, kv_width wide) of n tokens to `slots`.
  virtual void kv_write(int layer, const float* k, const float* v, int stride, const int32_t* slots, int n) = 0;
  // Reads n slots into contiguous [n][kv_width] K and V.
  virtual void kv_read(int layer, const int32_t* slots, int n, float* k, float* v) = 0;
  // Copies whole blocks (every layer, K and V); ids are host arrays.
  virtual void kv_copy_blocks(const int32_t* src_host, const int32_t* dst_host, int n) = 0;
  // out[t] = softmax(q[t] · K[entries]ᵀ · scale) · V[entries] per head, grouped-query
  // (query head h reads kv head h / (heads / kv_heads)). q rows have stride q_stride; out is
  // [n_tokens][heads * head_dim] contiguous.
  virtual void attention(int layer, const float* q, int q_stride, const AttentionBatch& batch, float* out) = 0;
  // Whether attention() takes statistics in chunk mode (AttentionBatch::stat_chunk_of).
  virtual bool chunk_statistics() const { return false; }
  // Whether attention() takes AttentionBatch::sinks (a model with attention sinks needs it).
  virtual bool supports_attention_sinks() const { return false; }
};

Backend* make_cpu_backend(int threads);
// Defined only in the CUDA build; device is the CUDA ordinal.
Backend* make_cuda_backend(int device);

}  // namespace ctxr
