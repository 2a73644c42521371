// FORWARD's greedy rows: the sampler's argmax rule (lowest id among equals, NaN never chosen,
// −1 when nothing is above −Infinity).
#include <cmath>
#include <limits>
#include <vector>

#include "greedy_row.h"
#include "runner_test.h"

using namespace ctxr;

RUNNER_TEST(greedy_row, argmax_rule) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row = {1.f, 3.f, nan, 3.f, -2.f};
  GreedyRow g = greedy_row(row.data(), 5);
  CHECK_EQ(g.token, 1);
  CHECK_EQ(g.logit, 3.f);
  row = {nan, -inf, 0.5f};
  g = greedy_row(row.data(), 3);
  CHECK_EQ(g.token, 2);
  row = {-inf, nan, -inf};
  g = greedy_row(row.data(), 3);
  CHECK_EQ(g.token, -1);
  CHECK(std::isinf(g.logit) && g.logit < 0);
  row = {inf, inf};
  CHECK_EQ(greedy_row(row.data(), 2).token, 0);
}
