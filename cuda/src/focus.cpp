#include "focus.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ctxr {

std::vector<int> predict_focused(const std::vector<double>& scores) {
  const int k = static_cast<int>(scores.size());
  std::vector<int> order(k);
  std::iota(order.begin(), order.end(), 0);
  if (k < 3) return order;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  // diff[i] for i = 1..k-1 (index 0 unused).
  std::vector<double> diff(k, 0.0);
  double total = 0;
  for (int i = 1; i <= k - 1; i++) {
    diff[i] = scores[order[i - 1]] - scores[order[i]];
    total += diff[i];
  }
  if (!(total > 0)) {
    std::sort(order.begin(), order.end());
    return order;
  }
  // h_{i+1} - h_i = -p_{i+1} ln p_{i+1}: the entropy the gap i+1 adds.
  int best = 1;
  double best_jump = -1;
  for (int i = 1; i <= k - 2; i++) {
    const double p = diff[i + 1] / total;
    const double jump = p > 0 ? -p * std::log(p) : 0.0;
    if (jump > best_jump) {
      best_jump = jump;
      best = i;
    }
  }
  std::vector<int> top(order.begin(), order.begin() + best);
  std::sort(top.begin(), top.end());
  return top;
}

FocusedChunks::FocusedChunks(int n_chunks, int question, int window) : n_(n_chunks), question_(question), window_(window) {
  for (int c = 0; c < n_chunks; c++)
    if (c != question) candidates_.push_back(c);
  cinter_.assign(candidates_.size(), 0.0);
  focused_ = candidates_;
}

bool FocusedChunks::add_layer(const float* chunk_matrix) {
  if (fixed()) return false;
  const float* row = chunk_matrix + static_cast<size_t>(question_) * n_;
  for (size_t i = 0; i < candidates_.size(); i++) cinter_[i] += static_cast<double>(row[candidates_[i]]);
  std::vector<int> split;
  for (int at : predict_focused(cinter_)) split.push_back(candidates_[at]);
  history_.push_back(split);
  const int layers = static_cast<int>(history_.size());
  if (layers < window_ || split.size() == candidates_.size()) return false;
  for (int l = layers - window_; l < layers; l++)
    if (history_[l] != split) return false;
  focused_ = split;
  cutoff_ = layers;
  return true;
}

}  // namespace ctxr
