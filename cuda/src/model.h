// A Llama-family decoder (Llama 2/3, Qwen2 with QKV bias, Qwen3 with q/k norm, Mistral, tied
// embeddings; Gemma 3 with its sandwich norms, q/k norms, GeGLU and interleaved sliding-window
// layers) on a
// Backend: weights loaded from a Hugging Face folder, a batched forward pass over new tokens
// of several sequences writing their K/V into the paged cache. The weights come from a Hugging
// Face folder (config.json + *.safetensors) or a GGUF file (gguf_weights.h).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <functional>
#include <vector>

#include "backend.h"
#include "scratch_buffer.h"
#include "kv_groups.h"
#include "model_config.h"
#include "moe_ffn.h"
#include "weights.h"

namespace ctxr {

// New tokens of one sequence. Validated by the caller (runner.cpp) before forward().
struct SequenceStep {
  std::vector<int32_t> table;      // block ids
  // With two KV groups (Model::kv_groups()): the sliding-window layers' block table, indexed
  // like `table`; kNoBlock where its block has left the window. Empty with one group.
  std::vector<int32_t> sliding_table;
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;  // rotary positions
  std::vector<int32_t> indices;    // sequence index each token's K/V goes to
  // With two KV groups, optional: each token's index in `sliding_table` (its K/V slot there and
  // the end of its window) when `table` is a compacted one (sparse decode); empty: `indices`.
  std::vector<int32_t> sliding_indices;
  std::vector<int32_t> logit_rows; // rows of `tokens` to return logits for
  // Attention statistics (when ForwardResult stats are requested).
  std::vector<int32_t> query_rows;
  std::vector<int32_t> chunk_bounds;  // n_chunks + 1 increasing sequence indices
  // Focused-chunk early stop (ForwardFlags::early_stop): the layer window (>= 1), the question's
  // chunk, and per token whether it may drop out of the batch once the focused chunks are fixed
  // (it then keeps the K/V its slot already holds in the later layers).
  int stop_window = 0;
  int question_chunk = -1;
  std::vector<uint8_t> may_stop;
};

struct ForwardFlags {
  bool stats = false;       // attention statistics
  bool chunk_mass = false;  // with stats: each query's mass summed per chunk, not per entry
  bool early_stop = false;  // with stats: Cache-Craft's focused-chunk early stop per sequence
  bool expert_routes = false;  // a mixture-of-experts model's chosen experts (ForwardResult::routes)
};

// A sequence's early stop: the layers its stoppable tokens ran through (all of them when the
// focused set was never fixed) and the focused chunks (every chunk but the question's then).
struct EarlyStop {
  int cutoff_layer = 0;
  std::vector<int> focused;
};

struct ForwardResult {
  std::vector<float> logits;  // per sequence, per logit row, vocab floats, in order
  // Per sequence, per layer: mass [n_queries][len] (or [n_queries][n_chunks] with chunk_mass),
  // then chunks [n_chunks][n_chunks].
  std::vector<float> stats;
  std::vector<EarlyStop> early_stop;  // per sequence, with ForwardFlags::early_stop
  // With ForwardFlags::expert_routes: per sequence, per layer, per new token, its k experts in
  // selection order.
  std::vector<int32_t> routes;
};

// Where forward() spends its time, when profiling is on (it synchronizes after each op).
struct ForwardProfile {
  double linear_seconds = 0, attention_seconds = 0, total_seconds = 0;
  double linear_flops = 0, attention_flops = 0;
  long long tokens = 0, calls = 0;
};

// The runner's --kv-dtype: Auto is f16 for a GGUF file on a backend that supports it (the CPU
// one), f32 otherwise (safetensors checkpoints keep the exact f32 cache).
enum class KvDtypeChoice { Auto, F32, F16 };

class Model {
 public:
  // `dir`: a Hugging Face folder, a .gguf file, or a folder holding one .gguf and no safetensors.
  // `sliding_blocks`: the sliding-window group's pool size on a model with two KV groups (0:
  // num_blocks); `split_groups` false keeps every layer in one pool (every position's KV).
  Model(const std::string& dir, Backend* backend, int num_blocks, int block_size, KvDtypeChoice kv_dtype = KvDtypeChoice::Auto, int sliding_blocks = 0,
        bool split_groups = true);
  ~Model();

  // Per layer: the sliding-window length (0: global attention).
  int layer_window(int layer) const { return layers_[layer].window; }

  const ModelConfig& config() const { return config_; }
  Backend* backend() const { return backend_; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // The KV groups (one, or global + sliding-window layers) and the sliding group's pool size.
  const KvGroupLayout& kv_groups() const { return kv_groups_; }
  int sliding_blocks() const { return sliding_blocks_; }
  int kv_width() const { return config_.kv_heads * config_.head_dim; }
  const std::string& weight_dtype() const { return weight_dtype_; }
  KvDtype kv_dtype() const { return kv_dtype_; }
  const char* kv_dtype_name() const { return kv_dtype_ == KvDtype::F16 ? "f16" : "f32"; }

  ForwardResult forward(const std::vector<SequenceStep>& steps, const ForwardFlags& flags);

  void set_profiling(bool on) { profiling_ = on; }
  bool profiling() const { return profiling_; }
  // The profile since the last call, then zeroed.
  ForwardProfile take_profile();

  // The KV ops below address `slots` for every layer; with two KV groups a sliding-window layer
  // reads and writes `sliding_slots` instead (the same entries' slots in the sliding pool; must then
  // be given, one per entry). Every layer's K is (un)rotated with its own RoPE table. `groups`
  // (two groups only): bit 0 the global layers, bit 1 the sliding ones; the layers of a group left
  // out are not read (zeros) or written, and its slots need not be given (n = positions.size()).
  // K (rotation removed) and V of `slots` at `positions`, per layer: K[n][kv_width], V[n][kv_width].
  void export_kv(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, std::vector<float>& out,
                 const std::vector<int32_t>* sliding_slots = nullptr, int groups = 3);
  // The inverse: `data` holds per layer K (unrotated) then V for n slots; K is rotated to positions.
  void import_kv(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, const float* data,
                 const std::vector<int32_t>* sliding_slots = nullptr, int groups = 3);
  // Copies K and V of src[i] (stored rotated at from[i]) to dst[i], K re-rotated to to[i], all
  // layers. dst[i] may be src[i]; no other dst slot may be a src slot (in either group).
  void relocate_kv(const std::vector<int32_t>& src, const std::vector<int32_t>& from, const std::vector<int32_t>& dst,
                   const std::vector<int32_t>& to, const std::vector<int32_t>* sliding_src = nullptr,
                   const std::vector<int32_t>* sliding_dst = nullptr);
  // Per group g < groups: the mean over the slots i with group[i] == g of K without RoPE (slot i
  // rotated at positions[i]), per layer: out[g][layer * kv_width + j]; zeros for an empty group.
  // With two KV groups the slots are the full group's: only its layers are read (the sliding
  // layers' rows are zeros here, and add nothing in key_dots).
  std::vector<float> key_means(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions,
                               const std::vector<int32_t>& group, int groups);
  // Per slot i: the dot product of K without RoPE (slot i rotated at positions[i]) with `anchor`,
  // summed over the layers (anchor: layers * kv_width floats, layer-major as key_means' rows).
  std::vector<float> key_dots(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, const float* anchor);

 private:
  struct Layer {
    float* attn_norm = nullptr;
    Matrix* qkv = nullptr;
    float* qkv_bias = nullptr;
    float* q_norm = nullptr;  // [head_dim] each, with ModelConfig::qk_norm
    float* k_norm = nullptr;
    Matrix* o = nullptr;
    float* o_bias = nullptr;  // gpt-oss
    float* sinks = nullptr;   // [heads] sink logits, with ModelConfig::attention_sinks
    float* mlp_norm = nullptr;
    Matrix* gate_up = nullptr;
    Matrix* down = nullptr;
    std::shared_ptr<MoeLayer> moe;  // a mixture-of-experts FFN in place of gate_up/down
    // Gemma 3: norms of the attention and MLP outputs (null elsewhere).
    float* attn_out_norm = nullptr;
    float* mlp_out_norm = nullptr;
    const float* inv_freq = nullptr;  // this layer's rotary table (inv_freq_ or inv_freq_local_)
    int window = 0;                   // sliding-window length; 0: global attention
  };

  ModelConfig config_;
  Backend* backend_;
  std::unique_ptr<WeightSource> weights_;
  int num_blocks_, block_size_;
  KvGroupLayout kv_groups_;
  int sliding_blocks_ = 0;
  // The type holding most matrix elements (a GGUF file mixes types: a q4_k file keeps its output
  // matrix in Q6_K, and rows that are no whole K-quant block fall back to Q8_0).
  std::string weight_dtype_;
  KvDtype kv_dtype_ = KvDtype::F32;
  std::map<std::string, size_t> matrix_elements_;  // per dtype name, for weight_dtype_
  Matrix* embed_ = nullptr;
  Matrix* lm_head_ = nullptr;
  float* final_norm_ = nullptr;
  float* inv_freq_ = nullptr;
  float* inv_freq_local_ = nullptr;  // sliding-window layers' table (Gemma 3); null when none
  std::vector<Layer> layers_;
  std::unique_ptr<MoeFfn> moe_;  // the experts' forward pass and scratch (a mixture-of-experts model)
  bool profiling_ = false;
  ForwardProfile profile_;
  void sync();
  bool weights_in_place_ = false;  // some backend matrix reads weights_'s bytes where they are
  std::vector<std::vector<uint8_t>> fused_;  // host bytes of fused matrices (the CPU backend reads them lazily)

  // Reusable backend buffers, grown on demand.
  std::vector<BackendScratch> scratch_;
  void* buffer(int which, size_t bytes);
  // `values` copied to the device into scratch buffer `which`.
  int32_t* upload_ints(int which, const std::vector<int32_t>& values);
  // Rows of one MLP tile in forward(): gate|up and its product are [mlp_rows_][..], not [n][..]
  // (CTXR_MLP_ROWS overrides, 0: the whole batch at once).
  int mlp_rows_ = 0;
  // After each op, scratch buffers larger than this are released (a one-off large FORWARD or
  // EXPORT does not pin its buffers); the size of the largest a kRetainTokens forward needs.
  size_t retain_bytes_ = 0;
  void trim_scratch();
  struct TrimOnReturn;

  Matrix* load_matrix(const std::string& name, int rows, int cols);
  Matrix* load_fused(const std::vector<std::string>& names, const std::vector<int>& rows, int cols);
  float* load_vector(const std::string& name, int n);
  // An RMSNorm weight, plus config_.norm_weight_offset (Hugging Face Gemma's 1 + w).
  float* load_norm(const std::string& name, int n);
  float* upload_inv_freq(const std::vector<double>& inv);
  float* load_fused_vector(const std::vector<std::string>& names, const std::vector<int>& sizes);
  // backend_->rope() with this model's rotary shape (partial rotary, LongRoPE's factor).
  // Reads K of `slots` (rotated at positions[i]) without RoPE, layer by layer, in pieces of at most
  // kSlotPiece slots: visit(layer, first slot index, count, count rows of kv_width floats on the host).
  // Slots of the full group: with two KV groups the sliding layers are skipped.
  void for_each_unrotated_key(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions,
                              const std::function<void(int layer, int first, int count, const float* keys)>& visit);
  void rotate(float* x, int stride, int n, int heads, const int32_t* positions, const float* inv_freq, int sign);
  // Whether layer l keeps its K/V in the sliding group's pool (a model with two KV groups).
  bool in_sliding_group(int l) const { return kv_groups_.two_groups() && layers_[l].window > 0; }
  // Whether a KV op with `groups` (export_kv) addresses layer l.
  bool in_groups(int l, int groups) const { return (groups >> (in_sliding_group(l) ? 1 : 0)) & 1; }
  // The sliding slots a KV op was given for a model with two groups (checked: one per entry).
  const std::vector<int32_t>* sliding_slots_for(const std::vector<int32_t>* sliding, size_t entries, const char* op) const;
  void kv_slots_for(const std::vector<int32_t>& slots, size_t entries, const char* op) const;
};

}  // namespace ctxr
