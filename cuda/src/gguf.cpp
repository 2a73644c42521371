#include "gguf.h"
#include "mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ctxr {

namespace {

constexpr uint64_t kMaxCount = 1u << 24;        // tensors, keys, array elements: far above any model
constexpr uint64_t kMaxElements = 1ull << 40;   // elements of one tensor

struct TypeInfo {
  GgmlType type;
  const char* name;
  size_t block_elements, block_bytes;
};
constexpr TypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4},      {GgmlType::F16, "F16", 1, 2},        {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::Q8_0, "Q8_0", 32, 34},  {GgmlType::Q4_0, "Q4_0", 32, 18},    {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::Q4_1, "Q4_1", 32, 20},  {GgmlType::Q5_0, "Q5_0", 32, 22},    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18}, {GgmlType::MXFP4, "MXFP4", 32, 17},
    {GgmlType::Q2_K, "Q2_K", 256, 84},  {GgmlType::Q3_K, "Q3_K", 256, 110},   {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
};

const TypeInfo* info_of(uint32_t t) {
  for (const auto& i : kTypes)
    if (static_cast<uint32_t>(i.type) == t) return &i;
  return nullptr;
}

// ggml's names of the types we do not read, for the error message.
std::string unsupported_type_name(uint32_t t) {
  static const char* names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
                                "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
                                "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (t < sizeof(names) / sizeof(names[0])) return names[t];
  return "type " + std::to_string(t);
}

// A bounds-checked little-endian cursor over the header.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size, const std::string& what) : p_(p), size_(size), what_(what) {}
  size_t at() const { return at_; }
  size_t left() const { return size_ - at_; }
  [[noreturn]] void fail(const std::string& message) const { throw std::runtime_error(what_ + ": " + message); }
  const uint8_t* take(size_t n, const char* context) {
    if (n > left()) fail(std::string("truncated file (") + context + " at byte " + std::to_string(at_) + ")");
    const uint8_t* r = p_ + at_;
    at_ += n;
    return r;
  }
  template <typename T>
  T get(const char* context) {
    T v;
    std::memcpy(&v, take(sizeof(T), context), sizeof(T));
    return v;
  }
  std::string string(const char* context) {
    uint64_t n = get<uint64_t>(context);
    if (n > left()) fail(std::string("truncated file (") + context + " of " + std::to_string(n) + " bytes)");
    const uint8_t* s = take(n, context);
    return std::string(reinterpret_cast<const char*>(s), n);
  }

 private:
  const uint8_t* p_;
  size_t size_, at_ = 0;
  std::string what_;
};

size_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;
  }
}

// One scalar of type t: integer (as i64 and u64) or real.
void read_scalar(Reader& r, GgufValueType t, const std::string& key, GgufValue& v) {
  const char* c = "metadata value";
  switch (t) {
    case GgufValueType::U8: v.unsigned_integer = r.get<uint8_t>(c); v.integer = static_cast<int64_t>(v.unsigned_integer); break;
    case GgufValueType::I8: v.integer = r.get<int8_t>(c); break;
    case GgufValueType::U16: v.unsigned_integer = r.get<uint16_t>(c); v.integer = static_cast<int64_t>(v.unsigned_integer); break;
    case GgufValueType::I16: v.integer = r.get<int16_t>(c); break;
    case GgufValueType::U32: v.unsigned_integer = r.get<uint32_t>(c); v.integer = static_cast<int64_t>(v.unsigned_integer); break;
    case GgufValueType::I32: v.integer = r.get<int32_t>(c); break;
    case GgufValueType::U64: v.unsigned_integer = r.get<uint64_t>(c); v.integer = static_cast<int64_t>(v.unsigned_integer); break;
    case GgufValueType::I64: v.integer = r.get<int64_t>(c); break;
    case GgufValueType::F32: v.real = r.get<float>(c); break;
    case GgufValueType::F64: v.real = r.get<double>(c); break;
    case GgufValueType::Bool: {
      uint8_t b = r.get<uint8_t>(c);
      if (b > 1) r.fail("metadata " + key + ": bool value " + std::to_string(b));
      v.integer = b;
      break;
    }
    default: r.fail("metadata " + key + ": bad value type");
  }
  if (t != GgufValueType::U64 && t != GgufValueType::F32 && t != GgufValueType::F64 && v.integer >= 0) v.unsigned_integer = static_cast<uint64_t>(v.integer);
}

GgufValue read_value(Reader& r, GgufValueType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (t == GgufValueType::String) {
    v.text = r.string("metadata string");
  } else if (t == GgufValueType::Array) {
    uint32_t et = r.get<uint32_t>("array type");
    if (et > static_cast<uint32_t>(GgufValueType::F64) || et == static_cast<uint32_t>(GgufValueType::Array))
      r.fail("metadata " + key + ": unsupported array element type " + std::to_string(et));
    v.element_type = static_cast<GgufValueType>(et);
    v.count = r.get<uint64_t>("array length");
    size_t each = v.element_type == GgufValueType::String ? 8 : scalar_bytes(v.element_type);
    if (v.count > kMaxCount * 16 || v.count * each > r.left())
      r.fail("metadata " + key + ": array of " + std::to_string(v.count) + " elements runs past the end of the file");
    if (v.element_type == GgufValueType::String) {
      v.strings.reserve(v.count);
      for (uint64_t i = 0; i < v.count; i++) v.strings.push_back(r.string("metadata array string"));
    } else {
      v.numbers.reserve(v.count);
      for (uint64_t i = 0; i < v.count; i++) {
        GgufValue e;
        read_scalar(r, v.element_type, key, e);
        v.numbers.push_back(e.is_number() && (v.element_type == GgufValueType::F32 || v.element_type == GgufValueType::F64) ? e.real : static_cast<double>(e.integer));
      }
    }
  } else if (scalar_bytes(t) != 0) {
    read_scalar(r, t, key, v);
  } else {
    r.fail("metadata " + key + ": unknown value type " + std::to_string(static_cast<uint32_t>(t)));
  }
  return v;
}

}  // namespace

bool GgufValue::is_integer() const {
  return type != GgufValueType::F32 && type != GgufValueType::F64 && scalar_bytes(type) != 0 && type != GgufValueType::Bool;
}
bool GgufValue::is_number() const { return scalar_bytes(type) != 0 && type != GgufValueType::Bool; }
double GgufValue::as_number() const {
  if (type == GgufValueType::F32 || type == GgufValueType::F64) return real;
  if (type == GgufValueType::U64) return static_cast<double>(unsigned_integer);
  return static_cast<double>(integer);
}

size_t ggml_type_block_elements(GgmlType t) { return info_of(static_cast<uint32_t>(t))->block_elements; }
size_t ggml_type_block_bytes(GgmlType t) { return info_of(static_cast<uint32_t>(t))->block_bytes; }
const char* ggml_type_name(GgmlType t) { return info_of(static_cast<uint32_t>(t))->name; }
bool ggml_type_supported(uint32_t t) { return info_of(t) != nullptr; }

GgufFile::GgufFile(const std::string& path) : what_(path) {
  FileMapping file = map_read_only(path, 24, "truncated file (shorter than a GGUF header)");
  mapping_ = file.address;
  mapped_ = file.length;
  try {
    parse(static_cast<const uint8_t*>(mapping_), mapped_);
  } catch (...) {
    munmap(mapping_, mapped_);
    throw;
  }
}

GgufFile::GgufFile(const uint8_t* bytes, size_t size, const std::string& what) : what_(what) { parse(bytes, size); }

GgufFile::~GgufFile() {
  if (mapping_) munmap(mapping_, mapped_);
}

void GgufFile::drop_resident_pages() const {
  if (mapping_) madvise(mapping_, mapped_, MADV_DONTNEED);
}

void GgufFile::drop_resident_pages(const void* begin, size_t bytes) const {
  if (!mapping_) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const auto hi = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  const auto start = reinterpret_cast<uintptr_t>(mapping_);
  if (hi > lo && lo >= start && hi <= start + mapped_) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::parse(const uint8_t* bytes, size_t size) {
  Reader r(bytes, size, what_);
  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file (bad magic)");
  version_ = r.get<uint32_t>("version");
  if (version_ != 3 && version_ != 2) r.fail("GGUF version " + std::to_string(version_) + " is not supported (2, 3)");
  uint64_t n_tensors = r.get<uint64_t>("tensor count");
  uint64_t n_kv = r.get<uint64_t>("metadata count");
  if (n_tensors > kMaxCount) r.fail("absurd tensor count " + std::to_string(n_tensors));
  if (n_kv > kMaxCount) r.fail("absurd metadata count " + std::to_string(n_kv));
  for (uint64_t i = 0; i < n_kv; i++) {
    std::string key = r.string("metadata key");
    uint32_t type = r.get<uint32_t>("metadata value type");
    if (type > static_cast<uint32_t>(GgufValueType::F64)) r.fail("metadata " + key + ": unknown value type " + std::to_string(type));
    GgufValue v = read_value(r, static_cast<GgufValueType>(type), key);
    if (!metadata_.emplace(key, std::move(v)).second) r.fail("metadata key " + key + " appears twice");
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->integer <= 0 || a->integer > (1 << 20) || (a->integer & (a->integer - 1)) != 0)
      r.fail("metadata general.alignment must be a power of two");
    alignment_ = static_cast<size_t>(a->integer);
  }
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; i++) {
    GgufTensor t;
    t.name = r.string("tensor name");
    uint32_t n_dims = r.get<uint32_t>("tensor dims");
    if (n_dims < 1 || n_dims > 4) r.fail("tensor " + t.name + ": " + std::to_string(n_dims) + " dimensions");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
      uint64_t ne = r.get<uint64_t>("tensor dim");
      if (ne < 1 || ne > kMaxElements || elements * ne > kMaxElements) r.fail("tensor " + t.name + ": absurd dimension " + std::to_string(ne));
      elements *= ne;
      t.dims.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type = r.get<uint32_t>("tensor type");
    const TypeInfo* info = info_of(type);
    if (!info) r.fail("tensor " + t.name + ": type " + unsupported_type_name(type) + " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)");
    t.type = info->type;
    t.offset = r.get<uint64_t>("tensor offset");
    if (t.dims[0] % static_cast<int64_t>(info->block_elements) != 0)
      r.fail("tensor " + t.name + ": " + std::to_string(t.dims[0]) + " columns are not a multiple of the " + info->name + " block (" +
             std::to_string(info->block_elements) + ")");
    t.bytes = elements / info->block_elements * info->block_bytes;
    if (t.offset % alignment_ != 0) r.fail("tensor " + t.name + ": data offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(alignment_));
    if (!index_.emplace(t.name, tensors_.size()).second) r.fail("tensor " + t.name + " appears twice");
    tensors_.push_back(std::move(t));
  }
  size_t data_start = (r.at() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& t : tensors_) {
    if (data_start > size || t.offset > size - data_start || t.bytes > size - data_start - t.offset)
      r.fail("tensor " + t.name + ": data (" + std::to_string(t.bytes) + " bytes at offset " + std::to_string(t.offset) +
             ") runs past the end of the file (truncated?)");
    t.data = bytes + data_start + t.offset;
  }
}

}  // namespace ctxr
