// A whole file mapped read-only (MAP_PRIVATE), for the weight readers (safetensors.cpp, gguf.cpp).
#pragma once
#include <cstddef>
#include <string>

namespace ctxr {

struct FileMapping {
  void* address = nullptr;
  size_t length = 0;
};

// Maps `path`; throws std::runtime_error naming the file when it cannot be opened, is shorter than
// `min_length` bytes (`too_short` says why that matters) or cannot be mapped. munmap() releases it.
FileMapping map_read_only(const std::string& path, size_t min_length, const std::string& too_short);

}  // namespace ctxr
