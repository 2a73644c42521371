// FORWARD's greedy rows (flags bit 3, PROTOCOL.md): a logit row reduced to its largest logit and
// that logit's token, the lowest id among equals, NaN never chosen; token −1 when no logit is
// above −Infinity. The same rule as the server's sampler (src/engine/sampler.ts, argmax).
#pragma once
#include <cstdint>

namespace ctxr {

struct GreedyRow {
  int32_t token;
  float logit;
};

GreedyRow greedy_row(const float* logits, int vocab);

}  // namespace ctxr
