// Minimal unit-test framework for the runner's C++ code (built as build/runner-tests by
// `make -C cuda tests`, run by test/runner/*.test.ts).
//
//   #include "runner_test.h"
//   RUNNER_TEST(gemm, small_m) {           // registers the test "gemm.small_m"
//     CHECK(x == 3);
//     CHECK_MSG(err < tol, "row " << i << ": err " << err);
//   }
//
// A failed check throws; the runner prints `ok NAME` or `FAIL NAME: message` per test, then
// "N passed, M failed", and exits 1 if any failed. `runner-tests SUBSTRING...` runs only the
// tests whose name contains one of the arguments; `runner-tests --list` lists the names.
#pragma once
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace ctxr_test {

using TestFn = void (*)();
struct TestCase {
  std::string name;
  TestFn fn;
};
std::vector<TestCase>& registry();

struct Register {
  Register(const char* suite, const char* name, TestFn fn) {
    registry().push_back({std::string(suite) + "." + name, fn});
  }
};

struct Failure {
  std::string message;
};
[[noreturn]] void fail(const char* file, int line, const std::string& message);

}  // namespace ctxr_test

#define RUNNER_TEST(suite, name)                                                                         \
  static void runner_test_##suite##_##name();                                                           \
  static const ::ctxr_test::Register runner_test_register_##suite##_##name(#suite, #name,               \
                                                                           runner_test_##suite##_##name); \
  static void runner_test_##suite##_##name()

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) ::ctxr_test::fail(__FILE__, __LINE__, "CHECK(" #cond ") failed"); \
  } while (0)

// `what` is anything that can be streamed: CHECK_MSG(a == b, "a=" << a << " b=" << b).
#define CHECK_MSG(cond, what)                                        \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::ostringstream runner_test_os_;                            \
      runner_test_os_ << "CHECK(" #cond ") failed: " << what;        \
      ::ctxr_test::fail(__FILE__, __LINE__, runner_test_os_.str()); \
    }                                                                \
  } while (0)

#define CHECK_EQ(a, b)                                                                                \
  do {                                                                                                \
    const auto runner_test_a_ = (a);                                                                  \
    const auto runner_test_b_ = (b);                                                                  \
    CHECK_MSG(runner_test_a_ == runner_test_b_, #a " = " << runner_test_a_ << ", " #b " = " << runner_test_b_); \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                        \
  do {                                                                                               \
    const double runner_test_a_ = (a), runner_test_b_ = (b), runner_test_t_ = (tol);                \
    CHECK_MSG(std::fabs(runner_test_a_ - runner_test_b_) <= runner_test_t_,                          \
              #a " = " << runner_test_a_ << ", " #b " = " << runner_test_b_ << ", tolerance " << runner_test_t_); \
  } while (0)
