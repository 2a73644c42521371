// The router of a mixture-of-experts layer, on the host: from each token's router logits (router
// bias already added), its k experts and their weights, in llama.cpp's order of operations
// (build_moe_ffn: softmax, top-k, renormalise, scale); and the batch's tokens grouped by expert,
// so that each expert runs once over all the tokens routed to it.
#pragma once
#include <cstdint>
#include <vector>

#include "moe_config.h"

namespace ctxr {

struct ExpertRoute {
  int32_t expert;
  float weight;
};

// routes[t * k + j] for token t < n: its experts by descending selection score (ties: lower id
// first). `logits` is [n][c.experts].
void route_tokens(const float* logits, int n, const MoeConfig& c, ExpertRoute* routes);

// The selection score gap between a token's k-th and (k+1)-th expert: probabilities with
// SoftmaxThenTopK, logits with TopKThenSoftmax; +inf when every expert is chosen. A small gap is
// a near-tie that rounding may decide either way.
float topk_margin(const float* logits, const MoeConfig& c);

// The batch's routes by expert: expert e's entries are first[e] .. first[e + 1] - 1 of token
// (the batch row) and weight, tokens ascending.
struct ExpertGroups {
  std::vector<int32_t> first;  // experts + 1
  std::vector<int32_t> token;
  std::vector<float> weight;
  int tokens_of(int e) const { return first[e + 1] - first[e]; }
};
ExpertGroups group_by_expert(const ExpertRoute* routes, int n, int k, int experts);

}  // namespace ctxr
