// Cache-Craft's focused-chunk prediction (src/focus.h): one layer's split of the sorted
// cumulative scores, the degenerate cases, and the window that fixes the focused set.
#include <vector>

#include "focus.h"
#include "runner_test.h"

using ctxr::FocusedChunks;
using ctxr::predict_focused;

namespace {

std::vector<int> v(std::initializer_list<int> x) { return x; }

// A chunk matrix [n][n] that is zero but for the question's row.
std::vector<float> question_row(int n, int question, const std::vector<float>& row) {
  std::vector<float> m(static_cast<size_t>(n) * n, 0.f);
  for (int c = 0; c < n; c++) m[static_cast<size_t>(question) * n + c] = row[c];
  return m;
}

}  // namespace

RUNNER_TEST(focus, split_of_sorted_scores) {
  // Sorted 10, 7, 6.9, 3.2, 0: gaps 3, 0.1, 3.7, 3.2 of 10 -> p = .3, .01, .37, .32. The entropy
  // added by gap i+1 for i = 1, 2, 3: -p ln p of .01, .37, .32 -> largest at i = 2: the top 2.
  CHECK(predict_focused({3.2, 10, 0, 6.9, 7}) == v({1, 4}));
  // Three chunks: i* can only be 1.
  CHECK(predict_focused({0.5, 0.1, 0.3}) == v({0}));
  // Sorted 10, 9, 1, 0.5, 0: p = .1, .8, .05, .05; -p ln p of .8 (i = 1) beats .05's.
  CHECK(predict_focused({0.5, 1, 9, 10, 0}) == v({3}));
  // Ties sort by position: 1, 1 first, in order.
  CHECK(predict_focused({1, 1, 0.9, 0}) == v({0}));
}

RUNNER_TEST(focus, degenerate_cases_focus_everything) {
  CHECK(predict_focused({}).empty());
  CHECK(predict_focused({5}) == v({0}));
  CHECK(predict_focused({1, 0}) == v({0, 1}));
  CHECK(predict_focused({2, 2, 2, 2}) == v({0, 1, 2, 3}));
  CHECK(predict_focused({0, 0, 0}) == v({0, 1, 2}));
}

RUNNER_TEST(focus, window_fixes_the_set) {
  // Chunks 0..4, the question is chunk 2: candidates 0, 1, 3, 4 with scores 3.2, 10, 0, 6.9
  // (sorted 10, 6.9, 3.2, 0: p = .31, .37, .32; i = 1 -> -p ln p of .37 beats .32's -> top 1).
  const std::vector<float> layer = question_row(5, 2, {3.2f, 10, 99, 0, 6.9f});
  FocusedChunks one(5, 2, 1);
  CHECK(!one.fixed());
  CHECK(one.focused() == v({0, 1, 3, 4}));
  CHECK(one.add_layer(layer.data()));
  CHECK_EQ(one.cutoff(), 1);
  CHECK(one.focused() == v({1}));
  CHECK(!one.add_layer(layer.data()));  // fixed: later layers change nothing
  CHECK_EQ(one.cutoff(), 1);

  // Window 3 after an all-zero layer (degenerate: every chunk, never counts towards stability).
  const std::vector<float> zero(25, 0.f);
  FocusedChunks three(5, 2, 3);
  CHECK(!three.add_layer(zero.data()));
  CHECK(three.last() == v({0, 1, 3, 4}));
  CHECK(!three.add_layer(layer.data()));
  CHECK(!three.add_layer(layer.data()));
  CHECK(three.add_layer(layer.data()));
  CHECK_EQ(three.cutoff(), 4);
  CHECK(three.focused() == v({1}));

  // A set that changes restarts the count.
  FocusedChunks two(5, 2, 2);
  CHECK(!two.add_layer(layer.data()));
  // Cumulative 12, 10, 0, 6.9: gaps 2, 3.1, 6.9 of 12; -p ln p of .26 (i = 1) beats .58's.
  CHECK(!two.add_layer(question_row(5, 2, {8.8f, 0, 0, 0, 0}).data()));
  CHECK(two.last() == v({0}));
  CHECK(two.add_layer(question_row(5, 2, {0, 0, 0, 0, 0}).data()));
  CHECK_EQ(two.cutoff(), 3);
  CHECK(two.focused() == v({0}));
}

RUNNER_TEST(focus, too_few_chunks_never_stop) {
  const std::vector<float> layer = question_row(3, 0, {1, 5, 0.5f});
  FocusedChunks f(3, 0, 1);
  for (int l = 0; l < 4; l++) CHECK(!f.add_layer(layer.data()));
  CHECK(!f.fixed());
  CHECK(f.focused() == v({1, 2}));
}
