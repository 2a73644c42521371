#include "kv_blocks.h"

#include <algorithm>

namespace ctxr {

KvBlocks::KvBlocks(int num_blocks, int block_size)
    : block_size_(block_size), allocated_(num_blocks, 0), positions_(static_cast<size_t>(num_blocks) * block_size, kUnwritten) {
  // Hand out low ids first: pop from the back of a descending stack.
  for (int i = num_blocks - 1; i >= 0; i--) free_.push_back(i);
}

std::vector<int32_t> KvBlocks::alloc(int n) {
  if (n < 0) throw BadRequest("ALLOC count must be non-negative");
  if (n > free_count())
    throw OutOfBlocks("out of KV blocks: " + std::to_string(n) + " requested, " + std::to_string(free_count()) + " free of " + std::to_string(num_blocks()));
  std::vector<int32_t> ids;
  for (int i = 0; i < n; i++) {
    int32_t id = free_.back();
    free_.pop_back();
    allocated_[id] = 1;
    std::fill(positions_.begin() + static_cast<size_t>(id) * block_size_, positions_.begin() + static_cast<size_t>(id + 1) * block_size_, kUnwritten);
    ids.push_back(id);
  }
  return ids;
}

void KvBlocks::check_allocated(const std::vector<int32_t>& ids, const char* what) const {
  for (int32_t id : ids)
    if (id < 0 || id >= num_blocks() || !allocated_[id])
      throw BadRequest(std::string(what) + ": block " + std::to_string(id) + " is not allocated");
}

void KvBlocks::free(const std::vector<int32_t>& ids) {
  check_allocated(ids, "FREE");
  std::vector<int32_t> sorted(ids);
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) throw BadRequest("FREE: a block id is listed twice");
  for (int32_t id : ids) {
    allocated_[id] = 0;
    free_.push_back(id);
  }
}

void KvBlocks::copy(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
  for (size_t i = 0; i < src.size(); i++)
    std::copy(positions_.begin() + static_cast<size_t>(src[i]) * block_size_, positions_.begin() + static_cast<size_t>(src[i] + 1) * block_size_,
              positions_.begin() + static_cast<size_t>(dst[i]) * block_size_);
}

}  // namespace ctxr
