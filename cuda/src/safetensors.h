// Memory-mapped safetensors checkpoints: every *.safetensors file of a model folder, with
// each tensor's dtype, shape and bytes checked against its file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend.h"
#include "weights.h"

namespace ctxr {

class SafetensorsFolder final : public WeightSource {
 public:
  explicit SafetensorsFolder(const std::string& dir);
  ~SafetensorsFolder();
  SafetensorsFolder(const SafetensorsFolder&) = delete;
  SafetensorsFolder& operator=(const SafetensorsFolder&) = delete;

  bool has(const std::string& name) const override { return tensors_.count(name) != 0; }
  // The tensor, checked to have `shape`; throws naming the tensor otherwise.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const override;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  struct Mapping {
    void* address;
    size_t length;
  };
  std::vector<Mapping> mappings_;
  std::map<std::string, TensorView> tensors_;
  void map_file(const std::string& path);
};

size_t dtype_size(DType d);
const char* dtype_name(DType d);

}  // namespace ctxr
