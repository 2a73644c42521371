// Bookkeeping of the paged KV cache on the runner side: which blocks are allocated and the
// rotary position written at each slot (INT32_MIN while unwritten), so requests that read
// unwritten entries or foreign blocks are refused instead of computing garbage.
#pragma once
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ctxr {

struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct OutOfBlocks : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class KvBlocks {
 public:
  static constexpr int32_t kUnwritten = INT32_MIN;
  KvBlocks(int num_blocks, int block_size);

  int num_blocks() const { return static_cast<int>(allocated_.size()); }
  int block_size() const { return block_size_; }
  int free_count() const { return static_cast<int>(free_.size()); }

  std::vector<int32_t> alloc(int n);               // throws OutOfBlocks (nothing allocated)
  void free(const std::vector<int32_t>& ids);      // throws BadRequest (nothing freed)
  void copy(const std::vector<int32_t>& src, const std::vector<int32_t>& dst);  // positions only
  void check_allocated(const std::vector<int32_t>& ids, const char* what) const;

  int32_t slot(const std::vector<int32_t>& table, int index) const { return table[index / block_size_] * block_size_ + index % block_size_; }
  int32_t position(int32_t slot) const { return positions_[slot]; }
  void set_position(int32_t slot, int32_t position) { positions_[slot] = position; }

 private:
  int block_size_;
  std::vector<uint8_t> allocated_;
  std::vector<int32_t> free_;
  std::vector<int32_t> positions_;
};

}  // namespace ctxr
