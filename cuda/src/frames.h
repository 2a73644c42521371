// Length-prefixed frames on file descriptors, and bounds-checked readers/writers of their bodies
// (PROTOCOL.md). A short or malformed body throws BadRequest naming what was missing.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kv_blocks.h"

namespace ctxr {

// Reads one frame's payload; false on a clean end of input. Throws on a truncated frame.
bool read_frame(int fd, std::vector<uint8_t>& payload);
void write_frame(int fd, const std::vector<uint8_t>& payload);

class BodyReader {
 public:
  BodyReader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    left_ -= 4;
    return v;
  }
  // n 4-byte values; n is checked against the bytes left before anything is allocated.
  std::vector<int32_t> i32s(uint32_t n, const char* what) {
    need(static_cast<size_t>(n) * 4, what);
    std::vector<int32_t> v(n);
    if (n) std::memcpy(v.data(), p_, static_cast<size_t>(n) * 4);
    p_ += static_cast<size_t>(n) * 4;
    left_ -= static_cast<size_t>(n) * 4;
    return v;
  }
  const float* floats(size_t n, const char* what) {
    need(n * 4, what);
    const float* f = reinterpret_cast<const float*>(p_);
    p_ += n * 4;
    left_ -= n * 4;
    return f;
  }
  size_t left() const { return left_; }
  void end(const char* op) const {
    if (left_ != 0) throw BadRequest(std::string(op) + ": " + std::to_string(left_) + " unexpected trailing bytes");
  }

 private:
  const uint8_t* p_;
  size_t left_;
  void need(size_t bytes, const char* what) const {
    if (bytes > left_) throw BadRequest(std::string("request body ends before ") + what);
  }
};

class BodyWriter {
 public:
  std::vector<uint8_t> bytes;
  void u32(uint32_t v) { append(&v, 4); }
  void append(const void* data, size_t n) {
    const auto* b = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), b, b + n);
  }
};

}  // namespace ctxr
