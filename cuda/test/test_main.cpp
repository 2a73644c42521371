// Runs the tests registered with RUNNER_TEST (see runner_test.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "runner_test.h"

namespace ctxr_test {

std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

void fail(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Failure{std::string(base ? base + 1 : file) + ":" + std::to_string(line) + ": " + message};
}

}  // namespace ctxr_test

int main(int argc, char** argv) {
  using namespace ctxr_test;
  std::vector<TestCase> tests = registry();
  // Registration order across files is unspecified; run in name order.
  std::stable_sort(tests.begin(), tests.end(), [](const TestCase& a, const TestCase& b) { return a.name < b.name; });

  std::vector<std::string> filters;
  bool list = false;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--list") == 0) list = true;
    else filters.push_back(argv[i]);
  }
  auto selected = [&](const std::string& name) {
    if (filters.empty()) return true;
    for (const auto& f : filters)
      if (name.find(f) != std::string::npos) return true;
    return false;
  };

  int passed = 0, failed = 0;
  for (const auto& t : tests) {
    if (!selected(t.name)) continue;
    if (list) {
      std::printf("%s\n", t.name.c_str());
      passed++;
      continue;
    }
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    try {
      t.fn();
    } catch (const Failure& f) {
      error = f.message;
    } catch (const std::exception& e) {
      error = std::string("exception: ") + e.what();
    } catch (...) {
      error = "unknown exception";
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (error.empty()) {
      std::printf("ok %s (%.1f ms)\n", t.name.c_str(), ms);
      passed++;
    } else {
      std::printf("FAIL %s: %s\n", t.name.c_str(), error.c_str());
      failed++;
    }
    std::fflush(stdout);
  }
  if (list) return 0;
  if (passed + failed == 0) {
    std::printf("no tests matched\n");
    return 1;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
