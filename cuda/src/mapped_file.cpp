#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ctxr {

FileMapping map_read_only(const std::string& path, size_t min_length, const std::string& too_short) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    throw std::runtime_error("cannot stat " + path);
  }
  size_t length = static_cast<size_t>(st.st_size);
  if (length < min_length) {
    close(fd);
    throw std::runtime_error(path + ": " + too_short);
  }
  void* address = mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  int error = errno;
  close(fd);
  if (address == MAP_FAILED) throw std::runtime_error("cannot map " + path + ": " + std::strerror(error));
  return {address, length};
}

}  // namespace ctxr
