// A GGUF v3 file (llama.cpp's model format), memory-mapped: header, metadata of every value
// type, tensor infos, all checked against the file before any weight is used. Tensor dims are
// ggml's order: dims[0] = ne0 = columns (contiguous), dims[1] = ne1 = rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ctxr {

// ggml tensor types this runner reads (the numbers are ggml's).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30,
  Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, IQ4_NL = 20, MXFP4 = 39,  // 32-element block family (quant_blocks32.h)
  Q2_K = 10, Q3_K = 11, Q5_K = 13, IQ4_XS = 23,           // 256-element super-blocks (quant_superblock.h)
};

// GGUF metadata value types (the numbers are GGUF's).
enum class GgufValueType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64 };

struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  // Scalars: integers in `integer` (bool 0/1), floats in `real`; strings in `text`;
  // arrays: element type and count, with elements kept (strings in `strings`, numbers in `numbers`).
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double real = 0;
  std::string text;
  GgufValueType element_type = GgufValueType::U8;
  uint64_t count = 0;
  std::vector<std::string> strings;
  std::vector<double> numbers;
  bool is_integer() const;
  bool is_number() const;
  double as_number() const;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ne0 first
  GgmlType type;
  uint64_t offset;  // from the start of the data section
  const uint8_t* data;
  size_t bytes;
};

// Bytes of `elements` values of `type` in a row (elements must be a multiple of the block size).
size_t ggml_type_block_elements(GgmlType t);
size_t ggml_type_block_bytes(GgmlType t);
const char* ggml_type_name(GgmlType t);
bool ggml_type_supported(uint32_t t);

class GgufFile {
 public:
  // Maps and parses `path`; throws std::runtime_error("<path>: ...") naming the bad key or tensor.
  explicit GgufFile(const std::string& path);
  // Parses bytes already in memory (not owned; must outlive this object). `what` names them in errors.
  GgufFile(const uint8_t* bytes, size_t size, const std::string& what);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  const std::string& path() const { return what_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(const std::string& name) const;
  // Gives the mapped pages back to the kernel (they are re-read from the page cache on use).
  void drop_resident_pages() const;
  // The same for the whole pages inside [begin, begin + bytes) of the mapping.
  void drop_resident_pages(const void* begin, size_t bytes) const;

 private:
  std::string what_;
  void* mapping_ = nullptr;
  size_t mapped_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
  void parse(const uint8_t* bytes, size_t size);
};

}  // namespace ctxr
