// The CPU backend: float32 activations (the KV cache f32 or IEEE half), OpenMP over the
// configured threads. F32 matrices are packed for the AVX2 GEMM (gemm.cpp) on first use by
// linear(), so an untied embedding is never packed; embed() reads the rows where they are.
// F16 / BF16 matrices (cpu/half_linear.h) and quantized ones (GGUF blocks, cpu/quant_linear.h)
// stay as they are in the file or checkpoint mapping and are widened in registers or per tile.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>
#ifdef __GLIBC__
#include <malloc.h>  // malloc_trim
#endif

#include "backend.h"
#include "cpu/attention_cpu.h"
#include "cpu/gemma3_ops_cpu.h"
#include "cpu/gemm.h"
#include "cpu/half_linear.h"
#include "cpu/moe_ops_cpu.h"
#include "cpu/quant_linear.h"
#include "halfs.h"
#include "quant.h"

namespace ctxr {

struct Matrix {
  int rows, cols;
  DType dtype;
  const void* source;  // the mmap'd checkpoint bytes, alive for the runner's lifetime
  PackedB* packed = nullptr;
  std::mutex lock;
  std::unique_ptr<QuantMatrix> quant;  // set for quantized weights
  std::unique_ptr<HalfMatrix> half;    // set for F16 / BF16 weights
  std::vector<float> widened;          // a matrix_parts() mixing F32 with halves, as f32
};

namespace {

size_t dtype_size_bytes(DType d) { return d == DType::F32 ? 4 : 2; }
bool dtype_half(DType d) { return d == DType::F16 || d == DType::BF16; }

// n floats rounded to halves (to nearest even, as f32_to_f16) and back.
void narrow_to_f16(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = f32_to_f16(src[i]);
}
void widen_f16(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_num_procs()), isa_(detected_cpu_isa()) {}
  ~CpuBackend() override = default;

  const char* name() const override { return "cpu"; }

  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void trim() override {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }
  void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  Matrix* matrix(const void* data, DType dtype, int rows, int cols) override {
    auto* m = new Matrix;
    m->rows = rows;
    m->cols = cols;
    m->dtype = dtype;
    m->source = data;
    if (dtype_quantized(dtype)) {
      m->quant = std::make_unique<QuantMatrix>();
      m->quant->rows = rows;
      m->quant->cols = cols;
      m->quant->parts.push_back({dtype, 0, rows, static_cast<const uint8_t*>(data), dtype_row_bytes(dtype, cols)});
    } else if (dtype_half(dtype)) {
      m->half = std::make_unique<HalfMatrix>();
      m->half->rows = rows;
      m->half->cols = cols;
      m->half->parts.push_back({dtype, 0, rows, static_cast<const uint16_t*>(data)});
    }
    return m;
  }

  Matrix* matrix_parts(const void* data, const std::vector<MatrixPart>& parts, int cols) override {
    bool same = true, any_quant = false, all_quant = true, all_half = true;
    int rows = 0;
    for (const MatrixPart& p : parts) {
      same = same && p.dtype == parts[0].dtype && !p.data;
      any_quant = any_quant || dtype_quantized(p.dtype);
      all_quant = all_quant && dtype_quantized(p.dtype);
      all_half = all_half && dtype_half(p.dtype);
      rows += p.rows;
    }
    if (same) return matrix(data, parts[0].dtype, rows, cols);
    if (any_quant && !all_quant) throw std::runtime_error("a fused projection mixes quantized and float tensors");
    auto* m = new Matrix;
    m->rows = rows;
    m->cols = cols;
    const auto* at = static_cast<const uint8_t*>(data);
    if (all_quant) {
      m->dtype = parts[0].dtype;
      m->quant = std::make_unique<QuantMatrix>();
      m->quant->rows = rows;
      m->quant->cols = cols;
      int first = 0;
      for (const MatrixPart& p : parts) {
        const size_t row_bytes = dtype_row_bytes(p.dtype, cols);
        if (p.data) at = static_cast<const uint8_t*>(p.data);
        m->quant->parts.push_back({p.dtype, first, p.rows, at, row_bytes});
        at += row_bytes * p.rows;
        first += p.rows;
      }
    } else if (all_half) {  // f16 / bf16 parts, possibly mixed: read in place
      m->dtype = parts[0].dtype;
      m->half = std::make_unique<HalfMatrix>();
      m->half->rows = rows;
      m->half->cols = cols;
      int first = 0;
      for (const MatrixPart& p : parts) {
        if (p.data) at = static_cast<const uint8_t*>(p.data);
        m->half->parts.push_back({p.dtype, first, p.rows, reinterpret_cast<const uint16_t*>(at)});
        at += static_cast<size_t>(p.rows) * cols * 2;
        first += p.rows;
      }
    } else {  // f32 parts with f16 / bf16 ones: widened once
      m->dtype = DType::F32;
      m->widened.resize(static_cast<size_t>(rows) * cols);
      float* out = m->widened.data();
      for (const MatrixPart& p : parts) {
        const size_t count = static_cast<size_t>(p.rows) * cols;
        if (p.data) at = static_cast<const uint8_t*>(p.data);
        widen_to_f32(at, static_cast<int>(p.dtype), count, out);
        at += count * dtype_size_bytes(p.dtype);
        out += count;
      }
      m->source = m->widened.data();
    }
    return m;
  }
  bool reads_weights_in_place(DType t) const override { return dtype_quantized(t) || dtype_half(t); }
  void free_matrix(Matrix* m) override {
    if (m->packed) free_packed_b(m->packed);
    delete m;
  }
  const char* matrix_dtype() const override { return "f32"; }
  void prepare_linear(Matrix* m) override {
    if (!m->quant && !m->half) packed_of(m);
  }

  float* vector(const void* data, DType dtype, int n) override {
    auto* v = static_cast<float*>(alloc(static_cast<size_t>(n) * 4));
    widen_to_f32(data, static_cast<int>(dtype), n, v);
    return v;
  }

  void embed(const Matrix* table, const int32_t* tokens, int n, float* out) override {
    size_t d = table->cols;
    if (table->quant) {
      for (int i = 0; i < n; i++) table->quant->dequantize(tokens[i], 1, out + i * d);
      return;
    }
    if (table->half) {
      for (int i = 0; i < n; i++) table->half->widen_row(tokens[i], out + i * d);
      return;
    }
    const auto* rows = static_cast<const float*>(table->source);  // F32
    for (int i = 0; i < n; i++) std::memcpy(out + i * d, rows + static_cast<size_t>(tokens[i]) * d, d * 4);
  }

  void rms_norm(const float* x, const float* w, float eps, int n, int d, float* out) override {
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > 16)
    for (int i = 0; i < n; i++) {
      const float* row = x + static_cast<size_t>(i) * d;
      double squares = 0;
      for (int j = 0; j < d; j++) squares += static_cast<double>(row[j]) * row[j];
      float scale = static_cast<float>(1.0 / std::sqrt(squares / d + eps));
      float* o = out + static_cast<size_t>(i) * d;
      for (int j = 0; j < d; j++) o[j] = row[j] * scale * w[j];
    }
  }

  void rms_norm_heads(float* x, int stride, int n, int heads, int head_dim, const float* w, float eps) override {
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > 16)
    for (int i = 0; i < n; i++) {
      for (int h = 0; h < heads; h++) {
        float* head = x + static_cast<size_t>(i) * stride + static_cast<size_t>(h) * head_dim;
        double squares = 0;
        for (int j = 0; j < head_dim; j++) squares += static_cast<double>(head[j]) * head[j];
        const float scale = static_cast<float>(1.0 / std::sqrt(squares / head_dim + eps));
        for (int j = 0; j < head_dim; j++) head[j] = head[j] * scale * w[j];
      }
    }
  }

  void linear(const float* x, int n, const Matrix* w, const float* bias, float* y) override {
    if (w->quant) return quant_linear(x, n, *w->quant, bias, y, threads_, isa_);
    if (w->half) return half_linear(x, n, *w->half, bias, y, threads_, isa_);
    sgemm_packed(x, n, packed_of(const_cast<Matrix*>(w)), bias, y, threads_);
  }

  void rope(float* x, int stride, int n, int heads, const RopeShape& shape, const int32_t* pos, const float* inv_freq, int sign) override {
    const int half = shape.rotary_dim / 2;
    const double scale = sign < 0 ? 1.0 / shape.scale : shape.scale;
#pragma omp parallel num_threads(threads_) if (n > 16)
    {
      std::vector<float> cosines(half), sines(half);
#pragma omp for schedule(static)
      for (int i = 0; i < n; i++) {
        for (int j = 0; j < half; j++) {
          double angle = static_cast<double>(pos[i]) * static_cast<double>(inv_freq[j]);
          cosines[j] = static_cast<float>(scale * std::cos(angle));
          sines[j] = static_cast<float>(scale * sign * std::sin(angle));
        }
        float* row = x + static_cast<size_t>(i) * stride;
        for (int h = 0; h < heads; h++) {
          float* a = row + h * shape.head_dim;
          float* b = a + half;
          for (int j = 0; j < half; j++) {
            float u = a[j], v = b[j];
            a[j] = u * cosines[j] - v * sines[j];
            b[j] = v * cosines[j] + u * sines[j];
          }
        }
      }
    }
  }

  void silu_mul(const float* x, int n, int ff, float* out) override {
#pragma omp parallel for num_threads(threads_) schedule(static) if (static_cast<size_t>(n) * ff > 65536)
    for (int i = 0; i < n; i++) {
      const float* gate = x + static_cast<size_t>(i) * 2 * ff;
      const float* up = gate + ff;
      float* o = out + static_cast<size_t>(i) * ff;
      for (int j = 0; j < ff; j++) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
    }
  }

  bool supports_gemma3_ops() const override { return true; }
  void gelu_tanh_mul(const float* x, int n, int ff, float* out) override { cpu_gelu_tanh_mul(x, n, ff, out, threads_); }
  void scale(float* x, float s, size_t n) override { cpu_scale(x, s, n, threads_); }

  bool supports_moe() const override { return true; }
  void linear_jobs(const std::vector<LinearJob>& jobs) override {
    // The quantized ones together (quant_linear_jobs), the others one by one.
    std::vector<QuantLinearJob> quant;
    for (const LinearJob& j : jobs) {
      if (j.w->quant) quant.push_back({j.x, j.n, j.w->quant.get(), j.bias, j.y});
      else linear(j.x, j.n, j.w, j.bias, j.y);
    }
    if (!quant.empty()) quant_linear_jobs(quant.data(), static_cast<int>(quant.size()), threads_, isa_);
  }
  void expert_activation(const float* x, int n, int ff, const MoeConfig& c, float* out) override { cpu_expert_activation(x, n, ff, c, out, threads_); }
  void scatter_add_weighted(const float* src, const int32_t* rows, const float* weights, int n, int d, float* dst) override {
    cpu_scatter_add_weighted(src, rows, weights, n, d, dst, threads_);
  }

  void add(float* x, const float* y, size_t n) override {
#pragma omp parallel for num_threads(threads_) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
  }

  void gather_rows(const float* src, const int32_t* rows, int n, int d, float* dst) override {
    for (int i = 0; i < n; i++) std::memcpy(dst + static_cast<size_t>(i) * d, src + static_cast<size_t>(rows[i]) * d, static_cast<size_t>(d) * 4);
  }

  bool supports_kv_dtype(KvDtype) const override { return true; }

  void kv_init(const KvGeometry& g) override {
    geometry_ = g;
    half_ = g.dtype == KvDtype::F16;
    keys_.assign(half_ ? 0 : g.layers, {});
    values_.assign(half_ ? 0 : g.layers, {});
    half_keys_.assign(half_ ? g.layers : 0, {});
    half_values_.assign(half_ ? g.layers : 0, {});
    for (int l = 0; l < g.layers; l++) {
      const size_t per_layer = static_cast<size_t>(g.blocks_of(l)) * g.block_size * g.kv_width;
      if (half_) {
        half_keys_[l].assign(per_layer, 0);
        half_values_[l].assign(per_layer, 0);
      } else {
        keys_[l].assign(per_layer, 0.f);
        values_[l].assign(per_layer, 0.f);
      }
    }
  }

  void kv_write(int layer, const float* k, const float* v, int stride, const int32_t* slots, int n) override {
    const size_t w = geometry_.kv_width;
    for (int i = 0; i < n; i++) {
      const size_t at = static_cast<size_t>(slots[i]) * w;
      const float* kr = k + static_cast<size_t>(i) * stride;
      const float* vr = v + static_cast<size_t>(i) * stride;
      if (half_) {
        narrow_to_f16(kr, w, half_keys_[layer].data() + at);
        narrow_to_f16(vr, w, half_values_[layer].data() + at);
      } else {
        std::memcpy(keys_[layer].data() + at, kr, w * 4);
        std::memcpy(values_[layer].data() + at, vr, w * 4);
      }
    }
  }

  void kv_read(int layer, const int32_t* slots, int n, float* k, float* v) override {
    const size_t w = geometry_.kv_width;
    for (int i = 0; i < n; i++) {
      const size_t at = static_cast<size_t>(slots[i]) * w;
      if (half_) {
        widen_f16(half_keys_[layer].data() + at, w, k + i * w);
        widen_f16(half_values_[layer].data() + at, w, v + i * w);
      } else {
        std::memcpy(k + i * w, keys_[layer].data() + at, w * 4);
        std::memcpy(v + i * w, values_[layer].data() + at, w * 4);
      }
    }
  }

  void kv_copy_blocks(const int32_t* src, const int32_t* dst, int n) override {
    const size_t block = static_cast<size_t>(geometry_.block_size) * geometry_.kv_width;
    for (int l = 0; l < geometry_.layers; l++) {
      for (int i = 0; i < n; i++) {
        if (half_) {
          std::memmove(half_keys_[l].data() + dst[i] * block, half_keys_[l].data() + src[i] * block, block * 2);
          std::memmove(half_values_[l].data() + dst[i] * block, half_values_[l].data() + src[i] * block, block * 2);
        } else {
          std::memmove(keys_[l].data() + dst[i] * block, keys_[l].data() + src[i] * block, block * 4);
          std::memmove(values_[l].data() + dst[i] * block, values_[l].data() + src[i] * block, block * 4);
        }
      }
    }
  }

  void attention(int layer, const float* q, int q_stride, const AttentionBatch& b, float* out) override;
  bool chunk_statistics() const override { return true; }
  bool supports_attention_sinks() const override { return true; }

 private:
  int threads_;
  CpuIsa isa_;
  KvGeometry geometry_{};
  bool half_ = false;  // the KV cache is IEEE half (half_keys_/half_values_), else keys_/values_
  std::vector<std::vector<float>> keys_, values_;
  std::vector<std::vector<uint16_t>> half_keys_, half_values_;

  PackedB* packed_of(Matrix* m) {  // F32 matrices only
    std::lock_guard<std::mutex> guard(m->lock);
    if (!m->packed) {
      m->packed = pack_b(static_cast<const float*>(m->source), m->rows, m->cols);
      if (!m->widened.empty()) {  // a fused projection, never an embedding: only the packed copy is read
        std::vector<float>().swap(m->widened);
        m->source = nullptr;
      }
    }
    return m->packed;
  }
};

void CpuBackend::attention(int layer, const float* q, int q_stride, const AttentionBatch& b, float* out) {
  if (half_)
    cpu_attention(q, q_stride, b, half_keys_[layer].data(), half_values_[layer].data(), geometry_.kv_width, geometry_.block_size, threads_, out);
  else
    cpu_attention(q, q_stride, b, keys_[layer].data(), values_[layer].data(), geometry_.kv_width, geometry_.block_size, threads_, out);
}

}  // namespace

Backend* make_cpu_backend(int threads) { return new CpuBackend(threads); }

}  // namespace ctxr
