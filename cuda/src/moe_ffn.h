// A mixture-of-experts FFN layer on a Backend: its weights (the router and one gate|up and one
// down matrix per expert, each a slice of llama.cpp's 3-D expert tensors read where the file maps
// them), and the forward pass: route every token on the host (moe_router.h), then run each
// expert once over all the batch's tokens routed to it (one GEMM per expert in a prefill or a
// batch of sequences; in a one-token decode only the k routed experts' rows are read), and add
// the weighted results to the residual stream.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend.h"
#include "scratch_buffer.h"
#include "model_config.h"
#include "moe_router.h"
#include "weights.h"

namespace ctxr {

struct MoeLayer {
  Matrix* router = nullptr;       // [experts][hidden]
  float* router_bias = nullptr;   // [experts], or null
  std::vector<Matrix*> gate_up;   // per expert: [2 * expert_ff][hidden], gate rows first
  std::vector<Matrix*> down;      // per expert: [hidden][expert_ff]
  std::vector<float*> gate_up_bias, down_bias;  // per expert, or empty
};

// What loading an expert layer records in its Model (model.h): elements per dtype, whether some
// matrix reads the mapped bytes in place, and host copies made for backends that do not.
struct MoeLoadContext {
  WeightSource& weights;
  Backend* backend;
  std::map<std::string, size_t>& matrix_elements;
  bool& weights_in_place;
  std::vector<std::vector<uint8_t>>& copies;
};

// The layer whose Hugging Face-style names start with `prefix` ("model.layers.N."): mlp.gate.weight
// (+ .bias), mlp.experts.{gate,up,down}_exps.weight (+ .bias) as GgufWeights names them.
MoeLayer load_moe_layer(const MoeLoadContext& load, const std::string& prefix, const ModelConfig& c);
void free_moe_layer(Backend* backend, MoeLayer& layer);

class MoeFfn {
 public:
  MoeFfn(Backend* backend, const MoeConfig& config, int hidden) : backend_(backend), config_(config), hidden_(hidden) {}
  ~MoeFfn();
  MoeFfn(const MoeFfn&) = delete;
  MoeFfn& operator=(const MoeFfn&) = delete;

  // residual[i] += Σ_j weight_ij · expert_ij(x[i]) over n rows of `hidden` (x: the normed input).
  // `routes` (optional) gets each row's k experts appended, in selection order.
  void forward(const MoeLayer& layer, const float* x, int n, float* residual, std::vector<int32_t>* routes);
  // Releases scratch buffers larger than `keep` bytes.
  void trim(size_t keep);

 private:
  enum Buffer { kLogits, kRows, kWeights, kInput, kGateUp, kAct, kOutput, kBufferCount };
  void* buffer(Buffer which, size_t bytes);
  Backend* backend_;
  MoeConfig config_;
  int hidden_;
  BackendScratch scratch_[kBufferCount];
  std::vector<float> host_logits_;
  std::vector<ExpertRoute> routes_;
};

}  // namespace ctxr
