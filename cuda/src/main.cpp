// ctxr-runner: loads a model and serves PROTOCOL.md requests on stdin/stdout until SHUTDOWN
// or end of input. Diagnostics go to stderr; stdout carries only frames.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "frames.h"
#include "model.h"
#include "runner.h"
#if __has_include("cpu/peak.h")
#include "cpu/peak.h"
#include "cpu/quant_bench.h"
#define CTXR_HAS_PEAK 1
#endif

#ifndef CTXR_VERSION
#define CTXR_VERSION "0.1.0"
#endif

namespace {

#ifdef CTXR_CUDA
const char* kBuild = "ctxr-runner " CTXR_VERSION " cuda";
#else
const char* kBuild = "ctxr-runner " CTXR_VERSION " cpu";
#endif

const char* kUsage =
    "Usage: ctxr-runner --model DIR [--blocks N] [--block-size 16|32] [--sliding-blocks N] [--kv-groups 1|2] [--threads N] [--device cpu|cuda[:N]]\n"
    "                   [--kv-dtype f32|f16|auto]\n"
    "       ctxr-runner --peak-gflops [--threads N] [--seconds S]\n"
    "       ctxr-runner --bench-gemm M N K [--threads N] [--repeat R]\n"
    "       ctxr-runner --bench-linear f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|mxfp4|q2_k|q3_k|q4_k|q5_k|q6_k|iq4_xs M N K [--threads N] [--repeat R]\n"
    "Serves the framed binary protocol of cuda/PROTOCOL.md on stdin/stdout.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "ctxr-runner: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

long parse_int(const char* flag, const char* text, long low, long high) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < low || v > high)
    usage_error(std::string(flag) + " must be an integer in " + std::to_string(low) + ".." + std::to_string(high) + ", got '" + text + "'");
  return v;
}

void send_status(uint32_t status, const std::string& body) {
  ctxr::BodyWriter w;
  w.u32(0);
  w.u32(status);
  w.append(body.data(), body.size());
  ctxr::write_frame(STDOUT_FILENO, w.bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, device = "cpu";
  long blocks = 0, sliding_blocks = 0, kv_groups = 2, block_size = 16, threads = 0, repeat = 10;
  double seconds = 1.0;
  bool peak = false;
  long gemm[3] = {0, 0, 0}, linear[3] = {0, 0, 0};
  std::string linear_type;
  ctxr::KvDtypeChoice kv_dtype = ctxr::KvDtypeChoice::Auto;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model_dir = value("--model");
    else if (a == "--blocks") blocks = parse_int("--blocks", value("--blocks"), 1, 1L << 24);
    else if (a == "--sliding-blocks") sliding_blocks = parse_int("--sliding-blocks", value("--sliding-blocks"), 1, 1L << 24);
    else if (a == "--kv-groups") kv_groups = parse_int("--kv-groups", value("--kv-groups"), 1, 2);
    else if (a == "--block-size") block_size = parse_int("--block-size", value("--block-size"), 1, 1024);
    else if (a == "--threads") threads = parse_int("--threads", value("--threads"), 1, 1024);
    else if (a == "--device") device = value("--device");
    else if (a == "--kv-dtype") {
      const std::string d = value("--kv-dtype");
      if (d == "f32") kv_dtype = ctxr::KvDtypeChoice::F32;
      else if (d == "f16") kv_dtype = ctxr::KvDtypeChoice::F16;
      else if (d == "auto") kv_dtype = ctxr::KvDtypeChoice::Auto;
      else usage_error("--kv-dtype must be f32, f16 or auto, got '" + d + "'");
    }
    else if (a == "--repeat") repeat = parse_int("--repeat", value("--repeat"), 1, 100000);
    else if (a == "--seconds") seconds = std::atof(value("--seconds"));
    else if (a == "--peak-gflops") peak = true;
    else if (a == "--bench-gemm") {
      for (int k = 0; k < 3; k++) gemm[k] = parse_int("--bench-gemm", value("--bench-gemm"), 1, 1 << 20);
    } else if (a == "--bench-linear") {
      linear_type = value("--bench-linear");
      for (int k = 0; k < 3; k++) linear[k] = parse_int("--bench-linear", value("--bench-linear"), 1, 1 << 20);
    } else if (a == "--version") {
      std::printf("%s\n", kBuild);
      return 0;
    } else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else {
      usage_error("unknown argument '" + a + "'");
    }
  }
  if (block_size != 16 && block_size != 32) usage_error("--block-size must be 16 or 32");
#ifdef CTXR_HAS_PEAK
  if (peak) {
    std::printf("%s\n", ctxr::peak_gflops_json(static_cast<int>(threads ? threads : 0), seconds).c_str());
    return 0;
  }
  if (gemm[0]) {
    std::printf("%s\n", ctxr::bench_gemm_json(gemm[0], gemm[1], gemm[2], static_cast<int>(threads ? threads : 0), repeat).c_str());
    return 0;
  }
  if (linear[0]) {
    try {
      std::printf("%s\n", ctxr::bench_linear_json(linear_type, linear[0], linear[1], linear[2], static_cast<int>(threads ? threads : 0), repeat).c_str());
    } catch (const std::exception& e) {
      usage_error(e.what());
    }
    return 0;
  }
#else
  if (peak || gemm[0] || linear[0]) usage_error("this build has no benchmarks");
#endif
  if (model_dir.empty()) usage_error("--model DIR is required");
  if (blocks == 0) blocks = (8192 + block_size - 1) / block_size;

  std::unique_ptr<ctxr::Backend> backend;
  std::unique_ptr<ctxr::Model> model;
  try {
    if (device == "cpu") {
      backend.reset(ctxr::make_cpu_backend(static_cast<int>(threads)));
    } else if (device.rfind("cuda", 0) == 0) {
#ifdef CTXR_CUDA
      int ordinal = device.size() > 5 && device[4] == ':' ? std::atoi(device.c_str() + 5) : 0;
      backend.reset(ctxr::make_cuda_backend(ordinal));
#else
      throw std::runtime_error("this is the CPU build of ctxr-runner; --device " + device + " needs the CUDA build (ctxr-runner-cuda)");
#endif
    } else {
      usage_error("--device must be cpu or cuda[:N], got '" + device + "'");
    }
    model = std::make_unique<ctxr::Model>(model_dir, backend.get(), static_cast<int>(blocks), static_cast<int>(block_size), kv_dtype, static_cast<int>(sliding_blocks),
                                           kv_groups == 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctxr-runner: cannot load %s: %s\n", model_dir.c_str(), e.what());
    send_status(ctxr::kInternal, std::string("cannot load ") + model_dir + ": " + e.what());
    return 1;
  }
  ctxr::Runner runner(*model, kBuild);
  send_status(ctxr::kOk, runner.info_json());
  std::vector<uint8_t> request;
  try {
    while (ctxr::read_frame(STDIN_FILENO, request)) {
      bool shutdown = false;
      ctxr::write_frame(STDOUT_FILENO, runner.handle(request, shutdown));
      if (shutdown) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctxr-runner: %s\n", e.what());
    return 1;
  }
  return 0;
}
