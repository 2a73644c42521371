// The KV cache groups' layout and the FORWARD check of a sliding table (kv_groups.h).
#include <string>
#include <vector>

#include "kv_groups.h"
#include "runner_test.h"

using namespace ctxr;

namespace {

std::string refusal(const KvBlocks& blocks, const std::vector<int32_t>& table, const std::vector<int32_t>& indices, int window) {
  try {
    check_sliding_table(blocks, table, indices, window, "seq");
  } catch (const BadRequest& e) {
    return e.what();
  }
  return "";
}

}  // namespace

RUNNER_TEST(kv_groups, layout_splits_global_and_sliding_layers) {
  KvGroupLayout g = kv_group_layout({512, 512, 0, 1024, 0});
  CHECK(g.two_groups());
  CHECK((g.full_layers == std::vector<int>{2, 4}));
  CHECK((g.sliding_layers == std::vector<int>{0, 1, 3}));
  CHECK(g.window == 1024);
  // All global or all sliding: one group holding every layer (every position's KV).
  for (const std::vector<int>& windows : {std::vector<int>{0, 0}, std::vector<int>{8, 8, 8}}) {
    KvGroupLayout one = kv_group_layout(windows);
    CHECK(!one.two_groups());
    CHECK(one.full_layers.size() == windows.size());
    CHECK(one.sliding_layers.empty() && one.window == 0);
  }
}

RUNNER_TEST(kv_groups, sliding_table_needs_the_window_of_every_new_token) {
  KvBlocks blocks(8, 16);
  std::vector<int32_t> ids = blocks.alloc(3);
  // Token 40 with a window of 24 reads 17..40: blocks 1 and 2; block 0 may be gone.
  CHECK(refusal(blocks, {kNoBlock, ids[1], ids[2]}, {40}, 24).empty());
  CHECK_MSG(refusal(blocks, {kNoBlock, kNoBlock, ids[2]}, {40}, 24).find("sliding block 1 (indices 16..31) is inside the window of index 40") != std::string::npos,
            refusal(blocks, {kNoBlock, kNoBlock, ids[2]}, {40}, 24));
  // The lowest new index decides: tokens 20 and 40 need block 0 too.
  CHECK(refusal(blocks, {kNoBlock, ids[1], ids[2]}, {40, 20}, 24).find("sliding block 0") != std::string::npos);
  CHECK(refusal(blocks, {ids[0], ids[1]}, {40}, 24).find("beyond the sliding table's 32 slots") != std::string::npos);
  CHECK(refusal(blocks, {kNoBlock, ids[1], 7}, {40}, 24).find("not allocated") != std::string::npos);
  CHECK(refusal(blocks, {kNoBlock, ids[1], 99}, {40}, 24).find("sliding block 99 is not allocated") != std::string::npos);
}
