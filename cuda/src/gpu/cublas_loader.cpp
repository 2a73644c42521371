// dlopen-based cuBLAS binding (see cublas_loader.h).
#include "gpu/cublas_loader.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ctxr::gpu {
namespace {

// The well-known places a cuBLAS may sit when it is not on the loader's search path: the CUDA
// toolkit and the pip wheels PyTorch depends on (CUDA 13 wheels put every library in
// nvidia/cu13/lib, CUDA 12 wheels in nvidia/cublas/lib).
std::vector<std::string> fallback_patterns() {
  std::vector<std::string> roots;
  if (const char* v = std::getenv("VIRTUAL_ENV"); v && *v) roots.push_back(v);
  if (const char* c = std::getenv("CONDA_PREFIX"); c && *c) roots.push_back(c);
  if (const char* h = std::getenv("HOME"); h && *h) roots.push_back(std::string(h) + "/.local");
  for (const char* r : {"/opt/*/.venv", "/opt/*/venv", "/opt/*", "/opt/conda", "/usr/local", "/usr"})
    roots.push_back(r);
  std::vector<std::string> pats;
  for (const char* rel : {"/nvidia/cu13/lib/libcublas.so.13", "/nvidia/cublas/lib/libcublas.so.12"}) {
    for (const auto& root : roots)
      for (const char* site : {"/lib/python3*/site-packages", "/lib/python3*/dist-packages",
                               "/lib/python3/dist-packages"})
        pats.push_back(root + site + rel);
  }
  for (const char* p : {"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
                        "/usr/local/cuda-13*/lib64/libcublas.so.13", "/usr/local/cuda-12*/lib64/libcublas.so.12",
                        "/usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.1[32]"})
    pats.push_back(p);
  if (const char* c = std::getenv("CONDA_PREFIX"); c && *c) {
    pats.push_back(std::string(c) + "/lib/libcublas.so.13");
    pats.push_back(std::string(c) + "/lib/libcublas.so.12");
  }
  return pats;
}

std::vector<std::string> expand(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

// A libcublas in some folder needs the libcublasLt of the same release; the wheels find it
// through their RUNPATH, but load it first from the same folder in case a copy does not.
void preload_lt(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return;
  const std::string file = path.substr(slash + 1);
  const std::string stem = "libcublas.so";
  if (file.compare(0, stem.size(), stem) != 0) return;
  const std::string lt = path.substr(0, slash + 1) + "libcublasLt.so" + file.substr(stem.size());
  dlopen(lt.c_str(), RTLD_NOW | RTLD_GLOBAL);  // failure is fine: libcublas may still resolve it
  dlerror();
}

bool try_load(const std::string& path, CublasApi* api, std::string* why) {
  preload_lt(path);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why += "  " + path + ": " + (e ? e : "dlopen failed") + "\n";
    return false;
  }
  CublasApi a;
  bool ok = true;
  std::string missing;
  auto sym = [&](const char* name, bool required) -> void* {
    dlerror();
    void* p = dlsym(lib, name);
    if (!p && required) {
      ok = false;
      missing += std::string(missing.empty() ? "" : ", ") + name;
    }
    return p;
  };
  a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2", true));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2", true));
  a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2", true));
  a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx", true));
  a.set_math_mode = reinterpret_cast<decltype(a.set_math_mode)>(sym("cublasSetMathMode", false));
  a.get_version = reinterpret_cast<decltype(a.get_version)>(sym("cublasGetVersion_v2", false));
  if (!ok) {
    *why += "  " + path + ": missing " + missing + "\n";
    dlclose(lib);
    return false;
  }
  a.path = path;
  *api = a;
  return true;  // never dlclose'd: the handle lives as long as the process
}

}  // namespace

bool load_cublas(CublasApi* api, std::string* why) {
  why->clear();
  std::vector<std::string> tried;
  auto attempt = [&](const std::string& p) {
    for (const auto& t : tried)
      if (t == p) return false;
    tried.push_back(p);
    return try_load(p, api, why);
  };
  if (const char* env = std::getenv("CTXR_CUBLAS"); env && *env)
    if (attempt(env)) return true;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if (attempt(name)) return true;
  for (const auto& pat : fallback_patterns())
    for (const auto& p : expand(pat))
      if (attempt(p)) return true;
  return false;
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}

}  // namespace ctxr::gpu
