#include "greedy_row.h"

#include <limits>

namespace ctxr {

GreedyRow greedy_row(const float* logits, int vocab) {
  GreedyRow best{-1, -std::numeric_limits<float>::infinity()};
  for (int i = 0; i < vocab; i++)
    if (logits[i] > best.logit) best = {i, logits[i]};
  return best;
}

}  // namespace ctxr
