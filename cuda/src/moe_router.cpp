#include "moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ctxr {

namespace {

// softmax(x) into out, in float as ggml_soft_max computes it (max subtracted, sum in double).
void softmax(const float* x, int n, float* out) {
  float top = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; i++) top = std::max(top, x[i]);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += out[i] = std::exp(x[i] - top);
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; i++) out[i] *= inv;
}

// The selection scores of one token, and the expert ids ordered by them (descending, ties by id).
void ranked(const float* logits, const MoeConfig& c, std::vector<float>& score, std::vector<int32_t>& order, int keep) {
  const int e = c.experts;
  score.resize(e);
  if (c.gating == ExpertGating::SoftmaxThenTopK) softmax(logits, e, score.data());
  else std::copy(logits, logits + e, score.begin());
  order.resize(e);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + std::min(keep, e), order.end(), before);
}

}  // namespace

void route_tokens(const float* logits, int n, const MoeConfig& c, ExpertRoute* routes) {
  const int k = c.experts_used;
  std::vector<float> score, chosen(k);
  std::vector<int32_t> order;
  for (int t = 0; t < n; t++) {
    ranked(logits + static_cast<size_t>(t) * c.experts, c, score, order, k);
    for (int j = 0; j < k; j++) chosen[j] = score[order[j]];
    if (c.gating == ExpertGating::TopKThenSoftmax) softmax(chosen.data(), k, chosen.data());
    if (c.normalize_topk) {
      float sum = 0;
      for (float w : chosen) sum += w;
      sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal f16
      for (float& w : chosen) w /= sum;
    }
    if (c.weights_scale != 0 && c.weights_scale != 1)
      for (float& w : chosen) w *= c.weights_scale;
    for (int j = 0; j < k; j++) routes[static_cast<size_t>(t) * k + j] = {order[j], chosen[j]};
  }
}

float topk_margin(const float* logits, const MoeConfig& c) {
  if (c.experts_used >= c.experts) return std::numeric_limits<float>::infinity();
  std::vector<float> score;
  std::vector<int32_t> order;
  ranked(logits, c, score, order, c.experts_used + 1);
  return score[order[c.experts_used - 1]] - score[order[c.experts_used]];
}

ExpertGroups group_by_expert(const ExpertRoute* routes, int n, int k, int experts) {
  ExpertGroups g;
  g.first.assign(experts + 1, 0);
  const size_t total = static_cast<size_t>(n) * k;
  for (size_t i = 0; i < total; i++) g.first[routes[i].expert + 1]++;
  for (int e = 0; e < experts; e++) g.first[e + 1] += g.first[e];
  g.token.resize(total);
  g.weight.resize(total);
  std::vector<int32_t> at(g.first.begin(), g.first.end() - 1);
  for (int t = 0; t < n; t++)
    for (int j = 0; j < k; j++) {
      const ExpertRoute& r = routes[static_cast<size_t>(t) * k + j];
      g.token[at[r.expert]] = t;
      g.weight[at[r.expert]++] = r.weight;
    }
  return g;
}

}  // namespace ctxr
