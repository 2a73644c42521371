// The runner's KV cache groups (vLLM's hybrid KV cache manager): a model whose layers all attend
// globally has one group; a model with both global and sliding-window layers (Gemma 3) has two,
// each with its own block pool, so the sliding layers' storage is only their layers × their
// blocks, and a sequence has a block table per group. Group 0 holds the global layers, group 1
// the sliding ones; a sliding table's entries before the window may be kNoBlock.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kv_blocks.h"

namespace ctxr {

// A sliding table's entry for a block that has left the window (never read again).
constexpr int32_t kNoBlock = -1;

struct KvGroupLayout {
  std::vector<int> full_layers, sliding_layers;
  int window = 0;  // the largest sliding window (the group keeps at least that many entries)
  bool two_groups() const { return !full_layers.empty() && !sliding_layers.empty(); }
};

// Splits layers by their window (0: global). All-global or all-sliding models get one group.
KvGroupLayout kv_group_layout(const std::vector<int>& layer_windows);

// The sliding table of one FORWARD sequence, checked: kNoBlock or an allocated block, and every
// entry a new token writes or attends to (within `window` of it) in an allocated block.
void check_sliding_table(const KvBlocks& blocks, const std::vector<int32_t>& table, const std::vector<int32_t>& indices, int window,
                         const std::string& which);

}  // namespace ctxr
