#include "safetensors.h"
#include "mapped_file.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "json.h"

namespace ctxr {

size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }
const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q6_K: return "q6_k";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::IQ4_NL: return "iq4_nl";
    case DType::MXFP4: return "mxfp4";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::Q5_K: return "q5_k";
    case DType::IQ4_XS: return "iq4_xs";
  }
  return "?";
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

SafetensorsFolder::SafetensorsFolder(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) throw std::runtime_error("cannot open model folder " + dir + ": " + std::strerror(errno));
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    const std::string ext = ".safetensors";
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no *.safetensors file in " + dir);
  try {
    for (const auto& f : files) map_file(f);
  } catch (...) {
    for (auto& m : mappings_) munmap(m.address, m.length);
    throw;
  }
}

SafetensorsFolder::~SafetensorsFolder() {
  for (auto& m : mappings_) munmap(m.address, m.length);
}

void SafetensorsFolder::map_file(const std::string& path) {
  auto [address, length] = map_read_only(path, 8, "too short for a safetensors file");
  mappings_.push_back({address, length});
  const auto* bytes = static_cast<const uint8_t*>(address);
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > length - 8) throw std::runtime_error(path + ": header length " + std::to_string(header_len) + " exceeds the file");
  JsonValue header;
  try {
    header = parse_json(std::string(reinterpret_cast<const char*>(bytes + 8), header_len));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": header: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(path + ": header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  size_t data_len = length - 8 - header_len;
  for (const auto& [name, info] : header.object) {
    if (name == "__metadata__") continue;
    const JsonValue* dtype = info.find("dtype");
    const JsonValue* shape = info.find("shape");
    const JsonValue* offsets = info.find("data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() || offsets->array.size() != 2)
      throw std::runtime_error(path + ": tensor " + name + " lacks dtype, shape or data_offsets");
    TensorView t;
    t.name = name;
    t.file = path;
    if (dtype->string == "F32") t.dtype = DType::F32;
    else if (dtype->string == "F16") t.dtype = DType::F16;
    else if (dtype->string == "BF16") t.dtype = DType::BF16;
    else throw std::runtime_error(path + ": tensor " + name + " has dtype " + dtype->string + " (supported: F32, F16, BF16)");
    int64_t count = 1;
    for (const auto& dim : shape->array) {
      if (!dim.is_number() || dim.number < 0) throw std::runtime_error(path + ": tensor " + name + " has a bad shape");
      t.shape.push_back(static_cast<int64_t>(dim.number));
      count *= t.shape.back();
    }
    double begin = offsets->array[0].number, end = offsets->array[1].number;
    if (begin < 0 || end < begin || end > static_cast<double>(data_len))
      throw std::runtime_error(path + ": tensor " + name + " data_offsets lie outside the file");
    t.bytes = static_cast<size_t>(end - begin);
    if (t.bytes != static_cast<size_t>(count) * dtype_size(t.dtype))
      throw std::runtime_error(path + ": tensor " + name + " has " + std::to_string(t.bytes) + " bytes for shape " + shape_text(t.shape));
    t.data = data + static_cast<size_t>(begin);
    if (tensors_.count(name)) throw std::runtime_error(path + ": tensor " + name + " appears in two files");
    tensors_[name] = t;
  }
}

const TensorView& SafetensorsFolder::get(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::runtime_error("the checkpoint has no tensor " + name);
  if (it->second.shape != shape)
    throw std::runtime_error("tensor " + name + " has shape " + shape_text(it->second.shape) + ", expected " + shape_text(shape));
  return it->second;
}

}  // namespace ctxr
