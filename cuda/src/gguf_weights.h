// A GGUF model as a WeightSource: one file or the parts of a split one (gguf_split.h), llama.cpp
// tensor names mapped to Hugging Face ones, the model config from the (first) file's metadata,
// and the llama q/k row permutation undone.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gguf.h"
#include "model_config.h"
#include "weights.h"

namespace ctxr {

class GgufWeights final : public WeightSource {
 public:
  // `path`: the file, or the first part of a split model (the other parts are found beside it).
  explicit GgufWeights(const std::string& path);
  bool has(const std::string& name) const override { return views_.count(name) != 0; }
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const override;
  void loaded(bool still_read) override;
  const ModelConfig& config() const { return config_; }

 private:
  std::vector<std::unique_ptr<GgufFile>> files_;  // the first holds the metadata
  ModelConfig config_;
  std::map<std::string, TensorView> views_;
  std::vector<std::vector<uint8_t>> copies_;  // unpermuted q/k rows
};

// The GGUF file `path` names: itself when it is a file ending in .gguf, or the only .gguf of a
// folder that holds no *.safetensors (of a split model's parts, the first); "" otherwise (a
// safetensors folder).
std::string gguf_model_path(const std::string& path);

// Row r of a llama.cpp-converted q or k projection (heads of head_dim rows) holds Hugging Face
// row hf_row_of_gguf_row(r): the converter interleaved each head's two halves.
int hf_row_of_gguf_row(int r, int head_dim);

}  // namespace ctxr
