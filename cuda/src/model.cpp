#include "model.h"

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "focus.h"
#include "gguf_weights.h"
#include "safetensors.h"

namespace ctxr {

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rows per MLP tile of a prefill (Model::forward): the MLP (norm, gate|up, silu·up, down, add)
// runs over at most this many rows at a time, so its widest activations, gate|up [rows][2·ff]
// and [rows][ff] (48 MiB at ff = 8192 for 512 rows), take half of that at 512-token chunks.
// Each tile unpacks the quantized weights again (cpu/quant_gemm.cpp), which the int8 GEMM
// amortizes over the tile's rows. Measured (BENCHMARKS.md, issue 14, "Prefill activation
// memory"), CPU time per prefill token of the 1b Q4_K file: 256 rows +0–2.5%, 128 rows +6–9%.
constexpr int kMlpRows = 256;
// Scratch buffers a forward of this many tokens needs stay allocated between calls (the server
// prefills in 512-token chunks); larger ones are released after the op that grew them.
constexpr int kRetainTokens = 512;

enum ScratchBuffer { kTokens, kPositions, kSlots, kTables, kTokenSeq, kTokenLen, kStatRow, kX, kH, kQkv, kAttn, kTmp, kGateUp, kAct, kLogitRows, kLogitX, kLogits, kStats, kStatChunkOf, kKeepRows, kDstSlots, kDstPositions, kSlidingSlots, kSlidingTables, kSlidingDstSlots, kSlidingTokenLen, kScratchCount };

}  // namespace

Model::Model(const std::string& dir, Backend* backend, int num_blocks, int block_size, KvDtypeChoice kv_dtype, int sliding_blocks, bool split_groups)
    : backend_(backend), num_blocks_(num_blocks), block_size_(block_size), scratch_(kScratchCount) {
  bool gguf_file = false;
  if (std::string gguf = gguf_model_path(dir); !gguf.empty()) {
    gguf_file = true;
    auto file = std::make_unique<GgufWeights>(gguf);
    config_ = file->config();
    weights_ = std::move(file);
  } else {
    config_ = model_config_from_json_text(read_text_file(dir + "/config.json"));
    weights_ = std::make_unique<SafetensorsFolder>(dir);
  }
  if (config_.rope_dim == 0) config_.rope_dim = config_.head_dim;
  choose_longrope_factors(config_, static_cast<long long>(num_blocks) * block_size);
  const ModelConfig& c = config_;
  if ((c.sandwich_norms || c.hidden_act != "silu" || !c.layer_window.empty()) && !backend_->supports_gemma3_ops())
    throw std::invalid_argument(c.architecture + " does not run on the " + backend_->name() +
                                " backend (no sliding-window attention or GeGLU there yet); use the CPU runner");
  if (c.attention_sinks && !backend_->supports_attention_sinks())
    throw std::invalid_argument(c.architecture + " does not run on the " + backend_->name() + " backend (no attention sinks there yet); use the CPU runner");
  if (c.moe.enabled() && !backend_->supports_moe())
    throw std::invalid_argument(c.architecture + " does not run on the " + backend_->name() + " backend (no mixture-of-experts ops there yet); use the CPU runner");
  if (c.moe.enabled()) moe_ = std::make_unique<MoeFfn>(backend_, c.moe, c.hidden);
  embed_ = load_matrix("model.embed_tokens.weight", c.vocab, c.hidden);
  bool tied = c.tie_word_embeddings || !weights_->has("lm_head.weight");
  lm_head_ = tied ? embed_ : load_matrix("lm_head.weight", c.vocab, c.hidden);
  final_norm_ = load_norm("model.norm.weight", c.hidden);
  int q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  const bool phi3 = c.architecture == "Phi3ForCausalLM";
  for (int l = 0; l < c.layers; l++) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attn_norm = load_norm(p + "input_layernorm.weight", c.hidden);
    // Phi-3 stores q|k|v and gate|up fused already (qkv_proj, gate_up_proj); others in parts.
    layer.qkv = phi3 || weights_->has(p + "self_attn.qkv_proj.weight")
                    ? load_matrix(p + "self_attn.qkv_proj.weight", q + 2 * kv, c.hidden)
                    : load_fused({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}, {q, kv, kv}, c.hidden);
    if (weights_->has(p + "self_attn.q_proj.bias"))
      layer.qkv_bias = load_fused_vector({p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"}, {q, kv, kv});
    layer.o = load_matrix(p + "self_attn.o_proj.weight", c.hidden, q);
    if (weights_->has(p + "self_attn.o_proj.bias")) layer.o_bias = load_vector(p + "self_attn.o_proj.bias", c.hidden);
    if (c.attention_sinks) layer.sinks = load_vector(p + "self_attn.sinks.weight", c.heads);
    if (c.sandwich_norms) {
      layer.attn_out_norm = load_norm(p + "post_attention_layernorm.weight", c.hidden);
      layer.mlp_norm = load_norm(p + "pre_feedforward_layernorm.weight", c.hidden);
      layer.mlp_out_norm = load_norm(p + "post_feedforward_layernorm.weight", c.hidden);
    } else {
      layer.mlp_norm = load_norm(p + "post_attention_layernorm.weight", c.hidden);
    }
    if (c.qk_norm) {
      layer.q_norm = load_norm(p + "self_attn.q_norm.weight", c.head_dim);
      layer.k_norm = load_norm(p + "self_attn.k_norm.weight", c.head_dim);
    }
    layer.window = c.layer_window_of(l);
    if (c.moe.enabled()) {
      layer.moe = std::make_shared<MoeLayer>(load_moe_layer({*weights_, backend_, matrix_elements_, weights_in_place_, fused_}, p, c));
      layers_.push_back(layer);
      continue;
    }
    layer.gate_up = phi3 || weights_->has(p + "mlp.gate_up_proj.weight")
                        ? load_matrix(p + "mlp.gate_up_proj.weight", 2 * c.intermediate, c.hidden)
                        : load_fused({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {c.intermediate, c.intermediate}, c.hidden);
    layer.down = load_matrix(p + "mlp.down_proj.weight", c.hidden, c.intermediate);
    layers_.push_back(layer);
  }
  inv_freq_ = upload_inv_freq(rope_inverse_frequencies(c));
  if (c.rope_local_theta > 0) inv_freq_local_ = upload_inv_freq(rope_local_inverse_frequencies(c));
  for (auto& layer : layers_) layer.inv_freq = layer.window > 0 && inv_freq_local_ ? inv_freq_local_ : inv_freq_;
  if (kv_dtype == KvDtypeChoice::F16 && !backend_->supports_kv_dtype(KvDtype::F16))
    throw std::invalid_argument(std::string("the ") + backend_->name() + " backend has no f16 KV cache (--kv-dtype f16)");
  kv_dtype_ = kv_dtype == KvDtypeChoice::F16 || (kv_dtype == KvDtypeChoice::Auto && gguf_file && backend_->supports_kv_dtype(KvDtype::F16))
                  ? KvDtype::F16
                  : KvDtype::F32;
  std::vector<int> windows;
  for (const Layer& layer : layers_) windows.push_back(layer.window);
  kv_groups_ = kv_group_layout(split_groups ? windows : std::vector<int>(windows.size(), 0));
  std::vector<int> layer_blocks;
  if (kv_groups_.two_groups()) {
    sliding_blocks_ = sliding_blocks > 0 ? sliding_blocks : num_blocks;
    for (const Layer& layer : layers_) layer_blocks.push_back(layer.window > 0 ? sliding_blocks_ : num_blocks);
  }
  backend_->kv_init({c.layers, num_blocks, block_size, kv_width(), kv_dtype_, layer_blocks});
  backend_->prepare_linear(lm_head_);
  for (auto& layer : layers_)
    for (Matrix* m : {layer.qkv, layer.o, layer.gate_up, layer.down})
      if (m) backend_->prepare_linear(m);
  if (std::string(backend_->name()) != "cpu") fused_.clear();
  mlp_rows_ = kMlpRows;
  if (const char* rows = std::getenv("CTXR_MLP_ROWS")) mlp_rows_ = std::max(0, std::atoi(rows));
  {
    const size_t widest = std::max<size_t>(static_cast<size_t>(c.heads + 2 * c.kv_heads) * c.head_dim, c.hidden);
    const size_t tile = mlp_rows_ > 0 ? std::min(mlp_rows_, kRetainTokens) : kRetainTokens;
    // buffer() grows by half again at least: room for that.
    const size_t mlp_width = c.moe.enabled() ? static_cast<size_t>(c.moe.experts_used) * std::max(c.hidden, 2 * c.moe.expert_ff) : 2 * c.intermediate;
    retain_bytes_ = std::max<size_t>(kRetainTokens * widest * 4, tile * mlp_width * 4) * 3 / 2;
  }
  weights_->loaded(weights_in_place_);
  size_t most = 0;
  for (const auto& [name, elements] : matrix_elements_)
    if (elements > most) most = elements, weight_dtype_ = name;
}

Model::~Model() {
  for (auto& s : scratch_)
    if (s.p) backend_->release(s.p);
  for (auto& l : layers_) {
    backend_->release(l.attn_norm);
    backend_->release(l.mlp_norm);
    for (float* v : {l.q_norm, l.k_norm, l.attn_out_norm, l.mlp_out_norm, l.qkv_bias, l.o_bias, l.sinks})
      if (v) backend_->release(v);
    for (Matrix* m : {l.qkv, l.o})
      if (m) backend_->free_matrix(m);
    if (l.moe) free_moe_layer(backend_, *l.moe);
    else backend_->free_matrix(l.gate_up), backend_->free_matrix(l.down);
  }
  if (lm_head_ != embed_) backend_->free_matrix(lm_head_);
  backend_->free_matrix(embed_);
  backend_->release(final_norm_);
  backend_->release(inv_freq_);
  if (inv_freq_local_) backend_->release(inv_freq_local_);
}

float* Model::upload_inv_freq(const std::vector<double>& inv) {
  std::vector<float> inv_f(inv.begin(), inv.end());
  auto* d = static_cast<float*>(backend_->alloc(inv_f.size() * 4));
  backend_->to_device(d, inv_f.data(), inv_f.size() * 4);
  return d;
}

float* Model::load_norm(const std::string& name, int n) {
  float* v = load_vector(name, n);
  if (config_.norm_weight_offset == 0) return v;
  std::vector<float> host(n);
  backend_->to_host(host.data(), v, host.size() * 4);
  for (float& w : host) w += static_cast<float>(config_.norm_weight_offset);
  backend_->to_device(v, host.data(), host.size() * 4);
  return v;
}

Matrix* Model::load_matrix(const std::string& name, int rows, int cols) {
  const TensorView& t = weights_->get(name, {rows, cols});
  matrix_elements_[dtype_name(t.dtype)] += size_t(rows) * cols;
  weights_in_place_ = weights_in_place_ || backend_->reads_weights_in_place(t.dtype);
  return backend_->matrix(t.data, t.dtype, rows, cols);
}

Matrix* Model::load_fused(const std::vector<std::string>& names, const std::vector<int>& rows, int cols) {
  size_t total = 0;
  int total_rows = 0;
  std::vector<const TensorView*> parts;
  std::vector<MatrixPart> layout;
  bool in_place = true;
  for (size_t i = 0; i < names.size(); i++) {
    parts.push_back(&weights_->get(names[i], {rows[i], cols}));
    matrix_elements_[dtype_name(parts[i]->dtype)] += size_t(rows[i]) * cols;
    layout.push_back({parts[i]->dtype, rows[i], parts[i]->data});
    total += parts[i]->bytes;
    total_rows += rows[i];
    in_place = in_place && backend_->reads_weights_in_place(parts[i]->dtype);
  }
  // A backend that reads the weights where they are takes the parts by pointer: no fused copy
  // next to the mapped file (which would count twice in the resident set).
  if (in_place) {
    weights_in_place_ = true;
    return backend_->matrix_parts(nullptr, layout, cols);
  }
  for (MatrixPart& part : layout) part.data = nullptr;
  std::vector<uint8_t> bytes(total);
  size_t at = 0;
  for (const TensorView* t : parts) {
    std::memcpy(bytes.data() + at, t->data, t->bytes);
    at += t->bytes;
  }
  fused_.push_back(std::move(bytes));
  // GGUF files may store the parts in different block formats (Q4_K_M: v in Q6_K, q and k in Q4_K).
  return backend_->matrix_parts(fused_.back().data(), layout, cols);
}

float* Model::load_vector(const std::string& name, int n) {
  const TensorView& t = weights_->get(name, {n});
  return backend_->vector(t.data, t.dtype, n);
}

float* Model::load_fused_vector(const std::vector<std::string>& names, const std::vector<int>& sizes) {
  std::vector<float> all;
  for (size_t i = 0; i < names.size(); i++) {
    const TensorView& t = weights_->get(names[i], {sizes[i]});
    float* v = backend_->vector(t.data, t.dtype, sizes[i]);
    std::vector<float> host(sizes[i]);
    backend_->to_host(host.data(), v, host.size() * 4);
    backend_->release(v);
    all.insert(all.end(), host.begin(), host.end());
  }
  auto* out = static_cast<float*>(backend_->alloc(all.size() * 4));
  backend_->to_device(out, all.data(), all.size() * 4);
  return out;
}

void Model::rotate(float* x, int stride, int n, int heads, const int32_t* positions, const float* inv_freq, int sign) {
  const RopeShape shape{config_.head_dim, config_.rope_dim, static_cast<float>(config_.rope_attention_factor)};
  backend_->rope(x, stride, n, heads, shape, positions, inv_freq, sign);
}

int32_t* Model::upload_ints(int which, const std::vector<int32_t>& values) {
  auto* p = static_cast<int32_t*>(buffer(which, std::max<size_t>(1, values.size()) * 4));
  if (!values.empty()) backend_->to_device(p, values.data(), values.size() * 4);
  return p;
}

void* Model::buffer(int which, size_t bytes) {
  return grow_scratch(backend_, scratch_[which], bytes);
}

void Model::trim_scratch() {
  bool released = false;
  for (BackendScratch& s : scratch_)
    if (s.bytes > retain_bytes_) {
      backend_->release(s.p);
      s = BackendScratch{};
      released = true;
    }
  if (moe_) moe_->trim(retain_bytes_);
  if (released) backend_->trim();
}

void Model::sync() {
  float sink;
  backend_->to_host(&sink, inv_freq_, 4);
}

ForwardProfile Model::take_profile() {
  ForwardProfile p = profile_;
  profile_ = ForwardProfile{};
  return p;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

namespace {

// The chunk of each sequence entry 0..len-1 (-1 outside every chunk).
std::vector<int> chunk_of_entries(const std::vector<int32_t>& bounds, int len) {
  std::vector<int> chunk_of(len, -1);
  for (size_t c = 0; c + 1 < bounds.size(); c++)
    for (int e = bounds[c]; e < bounds[c + 1] && e < len; e++) chunk_of[e] = static_cast<int>(c);
  return chunk_of;
}

// One layer's statistics of one sequence: appends the query rows' mass (per entry, or summed per
// chunk with chunk_mass; zeros for a token that stopped) and then the chunk matrix to `out`, and
// leaves the chunk matrix in `matrix`. Token i's attention row is rows[i * stride .. + len).
void append_sequence_stats(const SequenceStep& s, const float* rows, size_t stride, int len, const uint8_t* stopped, bool chunk_mass,
                           std::vector<float>& out, std::vector<float>& matrix) {
  const int chunks = std::max(0, static_cast<int>(s.chunk_bounds.size()) - 1);
  const std::vector<int> chunk_of = chunk_of_entries(s.chunk_bounds, len);
  const int width = chunk_mass ? chunks : len;
  for (int32_t r : s.query_rows) {
    size_t at = out.size();
    out.resize(at + width, 0.f);
    if (stopped[r]) continue;
    const float* row = rows + static_cast<size_t>(r) * stride;
    if (!chunk_mass) {
      std::copy(row, row + len, out.begin() + at);
      continue;
    }
    for (int e = 0; e < len; e++)
      if (chunk_of[e] >= 0) out[at + chunk_of[e]] += row[e];
  }
  matrix.assign(static_cast<size_t>(chunks) * chunks, 0.f);
  for (size_t i = 0; i < s.tokens.size(); i++) {
    int a = chunk_of[s.indices[i]];
    if (a < 0 || stopped[i]) continue;
    const float* row = rows + i * stride;
    for (int e = 0; e < len; e++)
      if (chunk_of[e] >= 0) matrix[static_cast<size_t>(a) * chunks + chunk_of[e]] += row[e];
  }
  out.insert(out.end(), matrix.begin(), matrix.end());
}

// The same from chunk-mode statistics (backend.h): token i's row is rows[i * stride ..], its
// masses per head (`heads` rows of `width` chunks), averaged over heads here.
void append_sequence_chunk_stats(const SequenceStep& s, const float* rows, size_t stride, int heads, int width, int len,
                                 const uint8_t* stopped, std::vector<float>& out, std::vector<float>& matrix) {
  const int chunks = std::max(0, static_cast<int>(s.chunk_bounds.size()) - 1);
  const std::vector<int> chunk_of = chunk_of_entries(s.chunk_bounds, len);
  std::vector<float> mass(chunks);
  auto mass_of = [&](size_t i) {
    const float* row = rows + i * stride;
    for (int c = 0; c < chunks; c++) {
      float sum = 0.f;
      for (int h = 0; h < heads; h++) sum += row[static_cast<size_t>(h) * width + c];
      mass[c] = sum / heads;
    }
  };
  for (int32_t r : s.query_rows) {
    size_t at = out.size();
    out.resize(at + chunks, 0.f);
    if (stopped[r]) continue;
    mass_of(r);
    std::copy(mass.begin(), mass.end(), out.begin() + at);
  }
  matrix.assign(static_cast<size_t>(chunks) * chunks, 0.f);
  for (size_t i = 0; i < s.tokens.size(); i++) {
    int a = chunk_of[s.indices[i]];
    if (a < 0 || stopped[i]) continue;
    mass_of(i);
    for (int c = 0; c < chunks; c++) matrix[static_cast<size_t>(a) * chunks + c] += mass[c];
  }
  out.insert(out.end(), matrix.begin(), matrix.end());
}

// Marks the tokens of `s` that stop now: those that may stop and lie in a chunk outside `focused`.
bool mark_stopped(const SequenceStep& s, int len, const std::vector<int>& focused, uint8_t* stopped) {
  const std::vector<int> chunk_of = chunk_of_entries(s.chunk_bounds, len);
  bool any = false;
  for (size_t i = 0; i < s.tokens.size(); i++) {
    int c = chunk_of[s.indices[i]];
    if (!s.may_stop[i] || c < 0 || c == s.question_chunk || std::binary_search(focused.begin(), focused.end(), c)) continue;
    stopped[i] = 1;
    any = true;
  }
  return any;
}

}  // namespace

// Trims the scratch buffers when the op that declares it returns (or throws).
struct Model::TrimOnReturn {
  Model* model;
  ~TrimOnReturn() { model->trim_scratch(); }
};

ForwardResult Model::forward(const std::vector<SequenceStep>& steps, const ForwardFlags& flags) {
  TrimOnReturn trim{this};
  const ModelConfig& c = config_;
  const bool with_stats = flags.stats;
  int n = 0, max_blocks = 1, max_len = 0, n_logits = 0;
  for (const auto& s : steps) {
    n += static_cast<int>(s.tokens.size());
    max_blocks = std::max(max_blocks, static_cast<int>(s.table.size()));
    n_logits += static_cast<int>(s.logit_rows.size());
  }
  ForwardResult result;
  std::vector<FocusedChunks> focus;
  if (flags.early_stop)
    for (const auto& s : steps) focus.emplace_back(static_cast<int>(s.chunk_bounds.size()) - 1, s.question_chunk, s.stop_window);
  auto early_stop_result = [&] {
    for (const auto& f : focus) result.early_stop.push_back({f.fixed() ? f.cutoff() : c.layers, f.focused()});
  };
  if (n == 0) {
    early_stop_result();
    return result;
  }
  // Per token of the batch (sequence after sequence): what the batch rows are built from. Tokens
  // that stop (early stop) leave the batch; `live` holds the batch rows' token numbers.
  const bool two_groups = kv_groups_.two_groups();
  if (two_groups)
    for (const auto& s : steps) max_blocks = std::max(max_blocks, static_cast<int>(s.sliding_table.size()));
  std::vector<int32_t> tokens, positions, slots, sliding_slots, token_seq, token_len, sliding_token_len, logit_rows;
  // Sliding indices apart from `indices` (sparse decode): the sliding layers see their own lengths.
  bool own_sliding_len = false;
  int sliding_max_len = 0;
  std::vector<int32_t> tables(steps.size() * max_blocks, 0), sliding_tables(two_groups ? steps.size() * max_blocks : 0, kNoBlock);
  std::vector<int> seq_len(steps.size(), 0), seq_first(steps.size(), 0);
  for (size_t q = 0; q < steps.size(); q++) {
    const auto& s = steps[q];
    std::copy(s.table.begin(), s.table.end(), tables.begin() + q * max_blocks);
    if (two_groups) std::copy(s.sliding_table.begin(), s.sliding_table.end(), sliding_tables.begin() + q * max_blocks);
    for (size_t i = 0; i < s.tokens.size(); i++) seq_len[q] = std::max(seq_len[q], s.indices[i] + 1);
    max_len = std::max(max_len, seq_len[q]);
    seq_first[q] = static_cast<int>(tokens.size());
    for (int32_t r : s.logit_rows) logit_rows.push_back(static_cast<int32_t>(tokens.size()) + r);
    for (size_t i = 0; i < s.tokens.size(); i++) {
      int idx = s.indices[i];
      tokens.push_back(s.tokens[i]);
      positions.push_back(s.positions[i]);
      slots.push_back(s.table[idx / block_size_] * block_size_ + idx % block_size_);
      if (two_groups) {
        const int sidx = s.sliding_indices.empty() ? idx : s.sliding_indices[i];
        own_sliding_len |= sidx != idx;
        sliding_slots.push_back(s.sliding_table[sidx / block_size_] * block_size_ + sidx % block_size_);
        sliding_token_len.push_back(sidx + 1);
        sliding_max_len = std::max(sliding_max_len, sidx + 1);
      }
      token_seq.push_back(static_cast<int32_t>(q));
      token_len.push_back(idx + 1);
    }
  }
  std::vector<int32_t> live(n);
  for (int t = 0; t < n; t++) live[t] = t;
  std::vector<uint8_t> stopped(n, 0);
  // The per-token arrays of the live rows.
  auto of_live = [&](const std::vector<int32_t>& all) {
    std::vector<int32_t> v;
    v.reserve(live.size());
    for (int32_t t : live) v.push_back(all[t]);
    return v;
  };
  int32_t* d_tokens = upload_ints(kTokens, tokens);
  int32_t* d_positions = upload_ints(kPositions, positions);
  int32_t* d_slots = upload_ints(kSlots, slots);
  int32_t* d_sliding_slots = two_groups ? upload_ints(kSlidingSlots, sliding_slots) : nullptr;
  AttentionBatch batch{};
  batch.n_tokens = n;
  batch.heads = c.heads;
  batch.kv_heads = c.kv_heads;
  batch.head_dim = c.head_dim;
  batch.scale = static_cast<float>(c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const int32_t* d_tables = upload_ints(kTables, tables);
  const int32_t* d_sliding_tables = two_groups ? upload_ints(kSlidingTables, sliding_tables) : nullptr;
  batch.block_tables = d_tables;
  batch.max_blocks = max_blocks;
  batch.token_seq = upload_ints(kTokenSeq, token_seq);
  batch.token_len = upload_ints(kTokenLen, token_len);
  batch.max_len = max_len;
  const int32_t* d_token_len = batch.token_len;
  const int32_t* d_sliding_token_len = own_sliding_len ? upload_ints(kSlidingTokenLen, sliding_token_len) : d_token_len;
  if (!own_sliding_len) sliding_max_len = max_len;
  // Chunk masses straight from the attention kernel when the backend can (no [n][max_len] rows).
  const bool chunk_stats = with_stats && flags.chunk_mass && backend_->chunk_statistics();
  int stat_chunks = 1;
  for (const auto& s : steps) stat_chunks = std::max(stat_chunks, static_cast<int>(s.chunk_bounds.size()) - 1);
  const size_t stat_width = chunk_stats ? static_cast<size_t>(c.heads) * stat_chunks : static_cast<size_t>(max_len);
  if (with_stats) {
    // Statistics row of a token = its number in the batch (rows of stopped tokens go stale).
    batch.stat_row = upload_ints(kStatRow, live);
    batch.stats = static_cast<float*>(buffer(kStats, static_cast<size_t>(n) * stat_width * 4));
  }
  if (chunk_stats) {
    std::vector<int32_t> chunk_of(steps.size() * max_len, -1);
    for (size_t q = 0; q < steps.size(); q++) {
      const std::vector<int> of = chunk_of_entries(steps[q].chunk_bounds, seq_len[q]);
      std::copy(of.begin(), of.end(), chunk_of.begin() + q * max_len);
    }
    batch.stat_chunk_of = upload_ints(kStatChunkOf, chunk_of);
    batch.stat_chunks = stat_chunks;
  }

  const int q_width = c.heads * c.head_dim, kv = kv_width(), qkv_width = q_width + 2 * kv;
  auto* x = static_cast<float*>(buffer(kX, static_cast<size_t>(n) * c.hidden * 4));
  auto* h = static_cast<float*>(buffer(kH, static_cast<size_t>(n) * c.hidden * 4));
  auto* qkv = static_cast<float*>(buffer(kQkv, static_cast<size_t>(n) * qkv_width * 4));
  auto* attn = static_cast<float*>(buffer(kAttn, static_cast<size_t>(n) * q_width * 4));
  auto* tmp = static_cast<float*>(buffer(kTmp, static_cast<size_t>(n) * c.hidden * 4));
  // MLP tiles: as many as rows / mlp_rows_ rounded up, of equal size (none much smaller than the
  // others: a tile of ≤ 16 rows would take the decode kernels, which sum in another order).
  const int mlp_tiles = mlp_rows_ > 0 ? (n + mlp_rows_ - 1) / mlp_rows_ : 1;
  const int mlp_rows = (n + mlp_tiles - 1) / mlp_tiles;
  const size_t dense_ff = c.moe.enabled() ? 0 : c.intermediate;  // an expert layer has buffers of its own (moe_ffn.h)
  auto* gate_up = static_cast<float*>(buffer(kGateUp, static_cast<size_t>(mlp_rows) * 2 * dense_ff * 4));
  auto* act = static_cast<float*>(buffer(kAct, static_cast<size_t>(mlp_rows) * dense_ff * 4));

  // Drops the tokens that stopped from the batch: their hidden rows and per-token arrays.
  int m = n;
  auto drop_stopped = [&] {
    std::vector<int32_t> keep, next;
    for (int r = 0; r < m; r++)
      if (!stopped[live[r]]) {
        keep.push_back(r);
        next.push_back(live[r]);
      }
    if (static_cast<int>(next.size()) == m) return;
    m = static_cast<int>(next.size());
    if (m > 0) backend_->gather_rows(x, upload_ints(kKeepRows, keep), m, c.hidden, h);
    std::swap(x, h);
    live.swap(next);
    d_positions = upload_ints(kPositions, of_live(positions));
    d_slots = upload_ints(kSlots, of_live(slots));
    if (two_groups) d_sliding_slots = upload_ints(kSlidingSlots, of_live(sliding_slots));
    batch.n_tokens = m;
    batch.token_seq = upload_ints(kTokenSeq, of_live(token_seq));
    batch.token_len = d_token_len = upload_ints(kTokenLen, of_live(token_len));
    d_sliding_token_len = own_sliding_len ? upload_ints(kSlidingTokenLen, of_live(sliding_token_len)) : d_token_len;
    if (with_stats) batch.stat_row = upload_ints(kStatRow, live);
  };

  std::vector<float> host_stats, matrix;
  std::vector<std::vector<int32_t>> layer_routes(flags.expert_routes ? c.layers : 0);
  auto started = std::chrono::steady_clock::now();
  auto linear = [&](const float* in, int rows, const Matrix* w, int out_width, int in_width, const float* bias, float* out) {
    if (!profiling_) return backend_->linear(in, rows, w, bias, out);
    sync();
    auto t = std::chrono::steady_clock::now();
    backend_->linear(in, rows, w, bias, out);
    sync();
    profile_.linear_seconds += seconds_since(t);
    profile_.linear_flops += 2.0 * rows * out_width * in_width;
  };
  // One layer's statistics of every sequence, and the early stops they decide.
  auto layer_stats = [&](int l) {
    bool any_stopped = false;
    host_stats.resize(static_cast<size_t>(n) * stat_width);
    backend_->to_host(host_stats.data(), batch.stats, host_stats.size() * 4);
    for (size_t q = 0; q < steps.size(); q++) {
      const auto& s = steps[q];
      const float* rows = host_stats.data() + static_cast<size_t>(seq_first[q]) * stat_width;
      uint8_t* seq_stopped = stopped.data() + seq_first[q];
      if (chunk_stats)
        append_sequence_chunk_stats(s, rows, stat_width, c.heads, stat_chunks, seq_len[q], seq_stopped, result.stats, matrix);
      else
        append_sequence_stats(s, rows, max_len, seq_len[q], seq_stopped, flags.chunk_mass, result.stats, matrix);
      if (flags.early_stop && focus[q].add_layer(matrix.data()) && l + 1 < c.layers)
        any_stopped |= mark_stopped(s, seq_len[q], focus[q].focused(), seq_stopped);
    }
    return any_stopped;
  };
  backend_->embed(embed_, d_tokens, n, x);
  if (c.embedding_scale != 1) backend_->scale(x, static_cast<float>(c.embedding_scale), static_cast<size_t>(n) * c.hidden);
  for (int l = 0; l < c.layers; l++) {
    if (m == 0) {  // every token stopped (statistics rows are all zeros then)
      if (with_stats) layer_stats(l);
      continue;
    }
    const Layer& layer = layers_[l];
    backend_->rms_norm(x, layer.attn_norm, static_cast<float>(c.rms_norm_eps), m, c.hidden, h);
    linear(h, m, layer.qkv, qkv_width, c.hidden, layer.qkv_bias, qkv);
    if (layer.q_norm) {
      const float eps = static_cast<float>(c.rms_norm_eps);
      backend_->rms_norm_heads(qkv, qkv_width, m, c.heads, c.head_dim, layer.q_norm, eps);
      backend_->rms_norm_heads(qkv + q_width, qkv_width, m, c.kv_heads, c.head_dim, layer.k_norm, eps);
    }
    rotate(qkv, qkv_width, m, c.heads, d_positions, layer.inv_freq, 1);
    rotate(qkv + q_width, qkv_width, m, c.kv_heads, d_positions, layer.inv_freq, 1);
    // With two KV groups a sliding layer's K/V lives in the sliding pool, under the sliding table.
    const bool in_sliding_group = two_groups && layer.window > 0;
    backend_->kv_write(l, qkv + q_width, qkv + q_width + kv, qkv_width, in_sliding_group ? d_sliding_slots : d_slots, m);
    batch.block_tables = in_sliding_group ? d_sliding_tables : d_tables;
    batch.token_len = in_sliding_group ? d_sliding_token_len : d_token_len;
    batch.max_len = in_sliding_group ? sliding_max_len : max_len;
    batch.window = layer.window;
    batch.sinks = layer.sinks;
    if (profiling_) {
      sync();
      auto t = std::chrono::steady_clock::now();
      backend_->attention(l, qkv, qkv_width, batch, attn);
      sync();
      profile_.attention_seconds += seconds_since(t);
      for (int32_t tok : live) profile_.attention_flops += 4.0 * token_len[tok] * c.heads * c.head_dim;
    } else {
      backend_->attention(l, qkv, qkv_width, batch, attn);
    }
    bool any_stopped = with_stats && layer_stats(l);
    linear(attn, m, layer.o, c.hidden, q_width, layer.o_bias, tmp);
    if (layer.attn_out_norm) backend_->rms_norm(tmp, layer.attn_out_norm, static_cast<float>(c.rms_norm_eps), m, c.hidden, tmp);
    backend_->add(x, tmp, static_cast<size_t>(m) * c.hidden);
    // Every op of the MLP is row by row: tiles give the rows of the whole-batch pass, bit for bit.
    const int tiles = (m + mlp_rows - 1) / mlp_rows;
    for (int t = 0; t < tiles; t++) {
      const int r0 = static_cast<int>(static_cast<int64_t>(m) * t / tiles), rows = static_cast<int>(static_cast<int64_t>(m) * (t + 1) / tiles) - r0;
      float* xt = x + static_cast<size_t>(r0) * c.hidden;
      float* ht = h + static_cast<size_t>(r0) * c.hidden;
      float* tt = tmp + static_cast<size_t>(r0) * c.hidden;
      backend_->rms_norm(xt, layer.mlp_norm, static_cast<float>(c.rms_norm_eps), rows, c.hidden, ht);
      if (layer.moe) {  // adds the experts' outputs to xt itself; profiled as linear work (router and experts)
        if (profiling_) sync();
        const auto t = std::chrono::steady_clock::now();
        moe_->forward(*layer.moe, ht, rows, xt, flags.expert_routes ? &layer_routes[l] : nullptr);
        if (profiling_) {
          sync();
          profile_.linear_seconds += seconds_since(t);
          profile_.linear_flops += 2.0 * rows * c.hidden * (c.moe.experts + 3.0 * c.moe.experts_used * c.moe.expert_ff);
        }
        continue;
      }
      linear(ht, rows, layer.gate_up, 2 * c.intermediate, c.hidden, nullptr, gate_up);
      if (c.hidden_act == "gelu_tanh") backend_->gelu_tanh_mul(gate_up, rows, c.intermediate, act);
      else backend_->silu_mul(gate_up, rows, c.intermediate, act);
      linear(act, rows, layer.down, c.hidden, c.intermediate, nullptr, tt);
      if (layer.mlp_out_norm) backend_->rms_norm(tt, layer.mlp_out_norm, static_cast<float>(c.rms_norm_eps), rows, c.hidden, tt);
      backend_->add(xt, tt, static_cast<size_t>(rows) * c.hidden);
    }
    if (any_stopped) drop_stopped();
  }
  if (n_logits > 0) {
    // Logit rows never stop (runner.cpp checks): find their batch rows.
    std::vector<int32_t> row_of(n, -1);
    for (int r = 0; r < m; r++) row_of[live[r]] = r;
    for (int32_t& t : logit_rows) t = row_of[t];
    int32_t* d_rows = upload_ints(kLogitRows, logit_rows);
    auto* xl = static_cast<float*>(buffer(kLogitX, static_cast<size_t>(n_logits) * c.hidden * 4));
    auto* logits = static_cast<float*>(buffer(kLogits, static_cast<size_t>(n_logits) * c.vocab * 4));
    backend_->gather_rows(x, d_rows, n_logits, c.hidden, xl);
    backend_->rms_norm(xl, final_norm_, static_cast<float>(c.rms_norm_eps), n_logits, c.hidden, xl);
    linear(xl, n_logits, lm_head_, c.vocab, c.hidden, nullptr, logits);
    result.logits.resize(static_cast<size_t>(n_logits) * c.vocab);
    backend_->to_host(result.logits.data(), logits, result.logits.size() * 4);
    if (const float cap = static_cast<float>(c.final_logit_softcap); cap > 0)
      for (float& z : result.logits) z = cap * std::tanh(z / cap);
  }
  if (profiling_) {
    sync();
    profile_.total_seconds += seconds_since(started);
    profile_.tokens += n;
    profile_.calls += 1;
  }
  // Stats were appended layer by layer for all sequences; reorder to sequence-major.
  if (with_stats && steps.size() > 1) {
    std::vector<size_t> per_seq(steps.size());
    for (size_t q = 0; q < steps.size(); q++) {
      size_t chunks = steps[q].chunk_bounds.empty() ? 0 : steps[q].chunk_bounds.size() - 1;
      per_seq[q] = steps[q].query_rows.size() * (flags.chunk_mass ? chunks : seq_len[q]) + chunks * chunks;
    }
    std::vector<float> ordered;
    ordered.reserve(result.stats.size());
    for (size_t q = 0; q < steps.size(); q++) {
      for (int l = 0; l < c.layers; l++) {
        size_t offset = 0;
        for (int l2 = 0; l2 < l; l2++)
          for (size_t q2 = 0; q2 < steps.size(); q2++) offset += per_seq[q2];
        for (size_t q2 = 0; q2 < q; q2++) offset += per_seq[q2];
        ordered.insert(ordered.end(), result.stats.begin() + offset, result.stats.begin() + offset + per_seq[q]);
      }
    }
    result.stats.swap(ordered);
  }
  early_stop_result();
  if (flags.expert_routes) {  // batch rows (no early stop with routes) → sequence-major
    const size_t k = c.moe.experts_used;
    for (size_t q = 0; q < steps.size(); q++)
      for (int l = 0; l < c.layers; l++) {
        const auto first = layer_routes[l].begin() + seq_first[q] * k;
        result.routes.insert(result.routes.end(), first, first + steps[q].tokens.size() * k);
      }
  }
  return result;
}

void Model::kv_slots_for(const std::vector<int32_t>& slots, size_t entries, const char* op) const {
  if (slots.size() != entries) throw std::logic_error(std::string(op) + ": one slot per entry is needed");
}

const std::vector<int32_t>* Model::sliding_slots_for(const std::vector<int32_t>* sliding, size_t entries, const char* op) const {
  if (!kv_groups_.two_groups()) return nullptr;
  if (sliding == nullptr || sliding->size() != entries) throw std::logic_error(std::string(op) + ": a model with two KV groups needs the sliding group's slots of every entry");
  return sliding;
}

void Model::export_kv(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, std::vector<float>& out,
                      const std::vector<int32_t>* sliding_slots, int groups) {
  TrimOnReturn trim{this};
  if (!kv_groups_.two_groups()) groups = 3;
  if (groups & 1) kv_slots_for(slots, positions.size(), "export_kv");
  sliding_slots = groups & 2 ? sliding_slots_for(sliding_slots, positions.size(), "export_kv") : nullptr;
  int count = static_cast<int>(positions.size());
  int kv = kv_width();
  size_t per = static_cast<size_t>(count) * kv;
  out.resize(per * 2 * config_.layers);
  if (count == 0) return;
  int32_t* d_slots = groups & 1 ? upload_ints(kSlots, slots) : nullptr;
  int32_t* d_sliding = sliding_slots ? upload_ints(kSlidingSlots, *sliding_slots) : nullptr;
  int32_t* d_positions = upload_ints(kPositions, positions);
  auto* k = static_cast<float*>(buffer(kTmp, per * 4));
  auto* v = static_cast<float*>(buffer(kAttn, per * 4));
  for (int l = 0; l < config_.layers; l++) {
    if (!in_groups(l, groups)) {
      std::fill(out.begin() + per * 2 * l, out.begin() + per * 2 * (l + 1), 0.f);
      continue;
    }
    backend_->kv_read(l, in_sliding_group(l) ? d_sliding : d_slots, count, k, v);
    rotate(k, kv, count, config_.kv_heads, d_positions, layers_[l].inv_freq, -1);
    backend_->to_host(out.data() + per * 2 * l, k, per * 4);
    backend_->to_host(out.data() + per * (2 * l + 1), v, per * 4);
  }
}

void Model::import_kv(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, const float* data,
                      const std::vector<int32_t>* sliding_slots, int groups) {
  TrimOnReturn trim{this};
  if (!kv_groups_.two_groups()) groups = 3;
  if (groups & 1) kv_slots_for(slots, positions.size(), "import_kv");
  sliding_slots = groups & 2 ? sliding_slots_for(sliding_slots, positions.size(), "import_kv") : nullptr;
  int count = static_cast<int>(positions.size());
  if (count == 0) return;
  int kv = kv_width();
  size_t per = static_cast<size_t>(count) * kv;
  int32_t* d_slots = groups & 1 ? upload_ints(kSlots, slots) : nullptr;
  int32_t* d_sliding = sliding_slots ? upload_ints(kSlidingSlots, *sliding_slots) : nullptr;
  int32_t* d_positions = upload_ints(kPositions, positions);
  auto* k = static_cast<float*>(buffer(kTmp, per * 4));
  auto* v = static_cast<float*>(buffer(kAttn, per * 4));
  for (int l = 0; l < config_.layers; l++) {
    if (!in_groups(l, groups)) continue;
    backend_->to_device(k, data + per * 2 * l, per * 4);
    backend_->to_device(v, data + per * (2 * l + 1), per * 4);
    rotate(k, kv, count, config_.kv_heads, d_positions, layers_[l].inv_freq, 1);
    backend_->kv_write(l, k, v, kv, in_sliding_group(l) ? d_sliding : d_slots, count);
  }
}

namespace {
// Slots are moved through backend buffers this many at a time (bounded scratch memory).
constexpr int kSlotPiece = 4096;
}  // namespace

void Model::relocate_kv(const std::vector<int32_t>& src, const std::vector<int32_t>& from, const std::vector<int32_t>& dst,
                        const std::vector<int32_t>& to, const std::vector<int32_t>* sliding_src, const std::vector<int32_t>* sliding_dst) {
  TrimOnReturn trim{this};
  sliding_src = sliding_slots_for(sliding_src, src.size(), "relocate_kv");
  sliding_dst = sliding_slots_for(sliding_dst, dst.size(), "relocate_kv");
  const int kv = kv_width(), total = static_cast<int>(src.size());
  for (int first = 0; first < total; first += kSlotPiece) {
    const int count = std::min(kSlotPiece, total - first);
    auto piece = [&](int which, const std::vector<int32_t>& v) {
      auto* p = static_cast<int32_t*>(buffer(which, static_cast<size_t>(count) * 4));
      backend_->to_device(p, v.data() + first, static_cast<size_t>(count) * 4);
      return p;
    };
    int32_t* d_src = piece(kSlots, src);
    int32_t* d_from = piece(kPositions, from);
    int32_t* d_dst = piece(kDstSlots, dst);
    int32_t* d_to = piece(kDstPositions, to);
    int32_t* d_sliding_src = sliding_src ? piece(kSlidingSlots, *sliding_src) : nullptr;
    int32_t* d_sliding_dst = sliding_dst ? piece(kSlidingDstSlots, *sliding_dst) : nullptr;
    auto* k = static_cast<float*>(buffer(kTmp, static_cast<size_t>(count) * kv * 4));
    auto* v = static_cast<float*>(buffer(kAttn, static_cast<size_t>(count) * kv * 4));
    for (int l = 0; l < config_.layers; l++) {
      const bool sliding = in_sliding_group(l);
      backend_->kv_read(l, sliding ? d_sliding_src : d_src, count, k, v);
      // Each layer's own table: a sliding layer of Gemma 3 turns at base 1e4, a global one at 1e6.
      rotate(k, kv, count, config_.kv_heads, d_from, layers_[l].inv_freq, -1);
      rotate(k, kv, count, config_.kv_heads, d_to, layers_[l].inv_freq, 1);
      backend_->kv_write(l, k, v, kv, sliding ? d_sliding_dst : d_dst, count);
    }
  }
}

void Model::for_each_unrotated_key(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions,
                                   const std::function<void(int layer, int first, int count, const float* keys)>& visit) {
  TrimOnReturn trim{this};
  const int kv = kv_width(), total = static_cast<int>(slots.size());
  std::vector<float> host;
  for (int first = 0; first < total; first += kSlotPiece) {
    const int count = std::min(kSlotPiece, total - first);
    auto* d_slots = static_cast<int32_t*>(buffer(kSlots, static_cast<size_t>(count) * 4));
    backend_->to_device(d_slots, slots.data() + first, static_cast<size_t>(count) * 4);
    auto* d_positions = static_cast<int32_t*>(buffer(kPositions, static_cast<size_t>(count) * 4));
    backend_->to_device(d_positions, positions.data() + first, static_cast<size_t>(count) * 4);
    auto* k = static_cast<float*>(buffer(kTmp, static_cast<size_t>(count) * kv * 4));
    auto* v = static_cast<float*>(buffer(kAttn, static_cast<size_t>(count) * kv * 4));
    host.resize(static_cast<size_t>(count) * kv);
    for (int l = 0; l < config_.layers; l++) {
      if (in_sliding_group(l)) continue;  // the slots are the full group's (KEY_SUMMARY, KEY_SCORES)
      backend_->kv_read(l, d_slots, count, k, v);
      rotate(k, kv, count, config_.kv_heads, d_positions, layers_[l].inv_freq, -1);
      backend_->to_host(host.data(), k, host.size() * 4);
      visit(l, first, count, host.data());
    }
  }
}

std::vector<float> Model::key_means(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions,
                                    const std::vector<int32_t>& group, int groups) {
  const int kv = kv_width();
  const size_t width = static_cast<size_t>(config_.layers) * kv;
  std::vector<float> out(static_cast<size_t>(groups) * width, 0.f);
  std::vector<int> members(groups, 0);
  for (int32_t g : group) members[g]++;
  for_each_unrotated_key(slots, positions, [&](int l, int first, int count, const float* keys) {
    for (int i = 0; i < count; i++) {
      float* sum = out.data() + static_cast<size_t>(group[first + i]) * width + static_cast<size_t>(l) * kv;
      const float* row = keys + static_cast<size_t>(i) * kv;
      for (int j = 0; j < kv; j++) sum[j] += row[j];
    }
  });
  for (int g = 0; g < groups; g++) {
    if (members[g] == 0) continue;
    for (size_t j = 0; j < width; j++) out[static_cast<size_t>(g) * width + j] /= static_cast<float>(members[g]);
  }
  return out;
}

std::vector<float> Model::key_dots(const std::vector<int32_t>& slots, const std::vector<int32_t>& positions, const float* anchor) {
  const int kv = kv_width();
  std::vector<double> sums(slots.size(), 0.0);
  for_each_unrotated_key(slots, positions, [&](int l, int first, int count, const float* keys) {
    const float* a = anchor + static_cast<size_t>(l) * kv;
    for (int i = 0; i < count; i++) {
      const float* row = keys + static_cast<size_t>(i) * kv;
      double dot = 0.0;
      for (int j = 0; j < kv; j++) dot += static_cast<double>(row[j]) * a[j];
      sums[first + i] += dot;
    }
  });
  return std::vector<float>(sums.begin(), sums.end());
}

}  // namespace ctxr
