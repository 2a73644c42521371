// Where a model's tensors come from: a safetensors folder or a GGUF file, both presenting
// Hugging Face tensor names and [rows][cols] shapes to the model code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"

namespace ctxr {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // row-major: {rows, cols} for a matrix
  const void* data;
  size_t bytes;
  std::string file;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The tensor, checked to have `shape`; throws naming the tensor otherwise.
  virtual const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const = 0;
  // The model is loaded. still_read: the backend's matrices keep reading bytes from get() (the
  // CPU backend's f16, bf16 and quantized weights), so they must stay; otherwise the model has its own copies
  // and copies made for it may go, as may the mapping's resident pages.
  virtual void loaded(bool still_read) {}
};

}  // namespace ctxr
