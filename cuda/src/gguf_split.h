// A GGUF model split in parts, as llama.cpp's gguf-split and gguf-py write it: files named
// PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf, each with split.no (0-based),
// split.count and split.tensors.count; the first part holds the metadata, every part some of the
// tensors. A file without split.count is a model of one part.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gguf.h"

namespace ctxr {

// The parts' paths of a split whose first part is `first` and that has `count` parts (pure);
// throws std::runtime_error when `first` is not named PREFIX-00001-of-NNNNN.gguf with NNNNN == count.
std::vector<std::string> gguf_split_paths(const std::string& first, int count);

// Opens `path` and, when it is the first part of a split, every other part; checks that the parts
// belong together (a missing part, a part of another split or model, counts that disagree, a
// tensor in two parts each throw std::runtime_error naming the file). The first file comes first.
std::vector<std::unique_ptr<GgufFile>> open_gguf_parts(const std::string& path);

}  // namespace ctxr
