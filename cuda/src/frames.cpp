#include "frames.h"

#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace ctxr {

namespace {

// Returns bytes read before EOF (== n unless input ended).
size_t read_fully(int fd, uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw std::runtime_error("read failed: " + std::string(strerror(errno)));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

bool read_frame(int fd, std::vector<uint8_t>& payload) {
  uint8_t header[4];
  size_t got = read_fully(fd, header, 4);
  if (got == 0) return false;
  if (got < 4) throw std::runtime_error("input ended inside a frame header");
  uint32_t length;
  std::memcpy(&length, header, 4);
  if (length > (1u << 31)) throw std::runtime_error("frame of " + std::to_string(length) + " bytes is too large");
  payload.resize(length);
  if (read_fully(fd, payload.data(), length) < length) throw std::runtime_error("input ended inside a frame");
  return true;
}

void write_frame(int fd, const std::vector<uint8_t>& payload) {
  uint32_t length = static_cast<uint32_t>(payload.size());
  std::vector<uint8_t> out(4 + payload.size());
  std::memcpy(out.data(), &length, 4);
  if (!payload.empty()) std::memcpy(out.data() + 4, payload.data(), payload.size());
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t w = ::write(fd, out.data() + sent, out.size() - sent);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw std::runtime_error("write failed: " + std::string(strerror(errno)));
    sent += static_cast<size_t>(w);
  }
}

}  // namespace ctxr
