#include "kv_groups.h"

#include <algorithm>

namespace ctxr {

KvGroupLayout kv_group_layout(const std::vector<int>& layer_windows) {
  KvGroupLayout g;
  for (size_t l = 0; l < layer_windows.size(); l++) {
    if (layer_windows[l] > 0) {
      g.sliding_layers.push_back(static_cast<int>(l));
      g.window = std::max(g.window, layer_windows[l]);
    } else {
      g.full_layers.push_back(static_cast<int>(l));
    }
  }
  if (!g.two_groups()) {
    g.full_layers.insert(g.full_layers.end(), g.sliding_layers.begin(), g.sliding_layers.end());
    std::sort(g.full_layers.begin(), g.full_layers.end());
    g.sliding_layers.clear();
    g.window = 0;
  }
  return g;
}

void check_sliding_table(const KvBlocks& blocks, const std::vector<int32_t>& table, const std::vector<int32_t>& indices, int window,
                         const std::string& which) {
  for (int32_t id : table)
    if (id != kNoBlock && (id < 0 || id >= blocks.num_blocks())) throw BadRequest(which + ": sliding block " + std::to_string(id) + " is not allocated");
  std::vector<int32_t> held;
  for (int32_t id : table)
    if (id != kNoBlock) held.push_back(id);
  blocks.check_allocated(held, "FORWARD (sliding table)");
  if (indices.empty()) return;
  const int bs = blocks.block_size();
  const int lowest = *std::min_element(indices.begin(), indices.end());
  const int highest = *std::max_element(indices.begin(), indices.end());
  const int first = std::max(0, lowest + 1 - window);
  if (static_cast<int64_t>(highest) >= static_cast<int64_t>(table.size()) * bs)
    throw BadRequest(which + ": index " + std::to_string(highest) + " is beyond the sliding table's " + std::to_string(table.size() * bs) + " slots");
  for (int b = first / bs; b <= highest / bs; b++)
    if (table[b] == kNoBlock)
      throw BadRequest(which + ": sliding block " + std::to_string(b) + " (indices " + std::to_string(b * bs) + ".." + std::to_string((b + 1) * bs - 1) +
                       ") is inside the window of index " + std::to_string(lowest) + " but the sliding table has none there");
}

}  // namespace ctxr
