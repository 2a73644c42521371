// A mixture-of-experts FFN's shape and its routing and activation rules (moe_router.h, moe_ffn.h):
// Qwen3-MoE's softmax router with normalised top-k, and gpt-oss's top-k then softmax with its
// clamped SwiGLU and biases. experts == 0: a dense model.
#pragma once

namespace ctxr {

enum class ExpertGating {
  SoftmaxThenTopK,  // probabilities over all experts, the k largest kept (llama.cpp's SOFTMAX)
  TopKThenSoftmax,  // the k largest logits, their weights a softmax over those k (SOFTMAX_WEIGHT: gpt-oss)
};

enum class ExpertActivation {
  SwiGLU,         // silu(gate) * up
  SwiGLUClamped,  // gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit), g * sigmoid(alpha g) * (u + 1)
};

struct MoeConfig {
  int experts = 0;       // experts per layer
  int experts_used = 0;  // k: experts each token is routed to
  int expert_ff = 0;     // rows of an expert's gate and up projections
  ExpertGating gating = ExpertGating::SoftmaxThenTopK;
  bool normalize_topk = false;  // the k weights divided by their sum (Qwen3-MoE's norm_topk_prob)
  float weights_scale = 1;      // the k weights multiplied by this (llama.cpp's expert_weights_scale)
  ExpertActivation activation = ExpertActivation::SwiGLU;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.f;
  bool enabled() const { return experts > 0; }
};

}  // namespace ctxr
