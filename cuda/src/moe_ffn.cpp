#include "moe_ffn.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "safetensors.h"  // dtype_name

namespace ctxr {

namespace {

// Expert e's slice of a 3-D tensor [experts][rows][cols]: a 2-D matrix of whole rows.
const uint8_t* expert_slice(const TensorView& t, int e) {
  return static_cast<const uint8_t*>(t.data) + t.bytes / static_cast<size_t>(t.shape[0]) * e;
}

// Per expert, `n` floats of a bias tensor [experts][n], as backend vectors.
std::vector<float*> expert_biases(const MoeLoadContext& load, const std::string& name, int experts, int n) {
  const TensorView& t = load.weights.get(name, {experts, n});
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw std::runtime_error(t.file + ": tensor " + t.name + " must be F32, F16 or BF16");
  std::vector<float*> out;
  for (int e = 0; e < experts; e++) out.push_back(load.backend->vector(expert_slice(t, e), t.dtype, n));
  return out;
}

}  // namespace

MoeLayer load_moe_layer(const MoeLoadContext& load, const std::string& prefix, const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  const int experts = m.experts, ff = m.expert_ff, hidden = c.hidden;
  MoeLayer layer;
  const TensorView& router = load.weights.get(prefix + "mlp.gate.weight", {experts, hidden});
  load.matrix_elements[dtype_name(router.dtype)] += static_cast<size_t>(experts) * hidden;
  layer.router = load.backend->matrix(router.data, router.dtype, experts, hidden);
  load.weights_in_place = load.weights_in_place || load.backend->reads_weights_in_place(router.dtype);
  if (load.weights.has(prefix + "mlp.gate.bias")) {
    const TensorView& b = load.weights.get(prefix + "mlp.gate.bias", {experts});
    layer.router_bias = load.backend->vector(b.data, b.dtype, experts);
  }
  const TensorView& gate = load.weights.get(prefix + "mlp.experts.gate_exps.weight", {experts, ff, hidden});
  const TensorView& up = load.weights.get(prefix + "mlp.experts.up_exps.weight", {experts, ff, hidden});
  const TensorView& down = load.weights.get(prefix + "mlp.experts.down_exps.weight", {experts, hidden, ff});
  for (const TensorView* t : {&gate, &up, &down}) load.matrix_elements[dtype_name(t->dtype)] += static_cast<size_t>(experts) * ff * hidden;
  const bool gate_up_in_place = load.backend->reads_weights_in_place(gate.dtype) && load.backend->reads_weights_in_place(up.dtype);
  const bool down_in_place = load.backend->reads_weights_in_place(down.dtype);
  load.weights_in_place = load.weights_in_place || gate_up_in_place || down_in_place;
  for (int e = 0; e < experts; e++) {
    // In place, an expert's gate and up rows are two parts read where they are mapped: loading
    // touches no expert byte, and a token pages in only the experts it is routed to.
    if (gate_up_in_place) {
      layer.gate_up.push_back(load.backend->matrix_parts(nullptr, {{gate.dtype, ff, expert_slice(gate, e)}, {up.dtype, ff, expert_slice(up, e)}}, hidden));
    } else {
      const size_t gate_bytes = gate.bytes / experts, up_bytes = up.bytes / experts;
      std::vector<uint8_t> bytes(gate_bytes + up_bytes);
      std::memcpy(bytes.data(), expert_slice(gate, e), gate_bytes);
      std::memcpy(bytes.data() + gate_bytes, expert_slice(up, e), up_bytes);
      load.copies.push_back(std::move(bytes));
      layer.gate_up.push_back(load.backend->matrix_parts(load.copies.back().data(), {{gate.dtype, ff}, {up.dtype, ff}}, hidden));
    }
    layer.down.push_back(load.backend->matrix(expert_slice(down, e), down.dtype, hidden, ff));
  }
  const std::string gate_bias = prefix + "mlp.experts.gate_exps.bias", up_bias = prefix + "mlp.experts.up_exps.bias";
  if (load.weights.has(gate_bias) || load.weights.has(up_bias)) {
    std::vector<float*> g = expert_biases(load, gate_bias, experts, ff), u = expert_biases(load, up_bias, experts, ff);
    std::vector<float> host(2 * static_cast<size_t>(ff));
    for (int e = 0; e < experts; e++) {
      load.backend->to_host(host.data(), g[e], static_cast<size_t>(ff) * 4);
      load.backend->to_host(host.data() + ff, u[e], static_cast<size_t>(ff) * 4);
      auto* fused = static_cast<float*>(load.backend->alloc(host.size() * 4));
      load.backend->to_device(fused, host.data(), host.size() * 4);
      layer.gate_up_bias.push_back(fused);
      load.backend->release(g[e]);
      load.backend->release(u[e]);
    }
  }
  if (load.weights.has(prefix + "mlp.experts.down_exps.bias"))
    layer.down_bias = expert_biases(load, prefix + "mlp.experts.down_exps.bias", experts, hidden);
  return layer;
}

void free_moe_layer(Backend* backend, MoeLayer& layer) {
  backend->free_matrix(layer.router);
  if (layer.router_bias) backend->release(layer.router_bias);
  for (Matrix* m : layer.gate_up) backend->free_matrix(m);
  for (Matrix* m : layer.down) backend->free_matrix(m);
  for (float* b : layer.gate_up_bias) backend->release(b);
  for (float* b : layer.down_bias) backend->release(b);
  layer = MoeLayer{};
}

MoeFfn::~MoeFfn() {
  for (BackendScratch& s : scratch_)
    if (s.p) backend_->release(s.p);
}

void* MoeFfn::buffer(Buffer which, size_t bytes) {
  return grow_scratch(backend_, scratch_[which], bytes);
}

void MoeFfn::trim(size_t keep) {
  for (BackendScratch& s : scratch_)
    if (s.bytes > keep) {
      backend_->release(s.p);
      s = BackendScratch{};
    }
}

void MoeFfn::forward(const MoeLayer& layer, const float* x, int n, float* residual, std::vector<int32_t>* routes) {
  if (n == 0) return;
  const int experts = config_.experts, k = config_.experts_used, ff = config_.expert_ff;
  auto* logits = static_cast<float*>(buffer(kLogits, static_cast<size_t>(n) * experts * 4));
  backend_->linear(x, n, layer.router, layer.router_bias, logits);
  host_logits_.resize(static_cast<size_t>(n) * experts);
  backend_->to_host(host_logits_.data(), logits, host_logits_.size() * 4);
  routes_.resize(static_cast<size_t>(n) * k);
  route_tokens(host_logits_.data(), n, config_, routes_.data());
  if (routes)
    for (const ExpertRoute& r : routes_) routes->push_back(r.expert);
  const ExpertGroups groups = group_by_expert(routes_.data(), n, k, experts);
  const size_t total = groups.token.size();
  // Every (token, expert) pair's input row, grouped by expert: one gather, then per expert a
  // contiguous run of rows for its two GEMMs.
  auto* rows = static_cast<int32_t*>(buffer(kRows, total * 4));
  backend_->to_device(rows, groups.token.data(), total * 4);
  auto* weights = static_cast<float*>(buffer(kWeights, total * 4));
  backend_->to_device(weights, groups.weight.data(), total * 4);
  auto* input = static_cast<float*>(buffer(kInput, total * hidden_ * 4));
  auto* gate_up = static_cast<float*>(buffer(kGateUp, total * 2 * ff * 4));
  auto* act = static_cast<float*>(buffer(kAct, total * ff * 4));
  auto* output = static_cast<float*>(buffer(kOutput, total * hidden_ * 4));
  backend_->gather_rows(x, rows, static_cast<int>(total), hidden_, input);
  // The experts' gate|up GEMMs, one activation over all their rows, then the down GEMMs.
  std::vector<Backend::LinearJob> jobs;
  for (int e = 0; e < experts; e++)
    if (const int count = groups.tokens_of(e); count > 0) {
      const size_t at = groups.first[e];
      jobs.push_back({input + at * hidden_, count, layer.gate_up[e], layer.gate_up_bias.empty() ? nullptr : layer.gate_up_bias[e], gate_up + at * 2 * ff});
    }
  backend_->linear_jobs(jobs);
  backend_->expert_activation(gate_up, static_cast<int>(total), ff, config_, act);
  jobs.clear();
  for (int e = 0; e < experts; e++)
    if (const int count = groups.tokens_of(e); count > 0) {
      const size_t at = groups.first[e];
      jobs.push_back({act + at * ff, count, layer.down[e], layer.down_bias.empty() ? nullptr : layer.down_bias[e], output + at * hidden_});
    }
  backend_->linear_jobs(jobs);
  backend_->scatter_add_weighted(output, rows, weights, static_cast<int>(total), hidden_, residual);
}

}  // namespace ctxr
