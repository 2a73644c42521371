#include "gguf_split.h"

#include <sys/stat.h>

#include <cstdio>
#include <set>
#include <stdexcept>

namespace ctxr {

namespace {

constexpr const char* kSplitNo = "split.no";
constexpr const char* kSplitCount = "split.count";
constexpr const char* kSplitTensors = "split.tensors.count";

// An integer key's value, or `absent` when the file lacks it; a non-integer value throws.
int64_t integer_key(const GgufFile& file, const char* key, int64_t absent) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return absent;
  if (!v->is_integer()) throw std::runtime_error(file.path() + ": metadata " + key + " is not an integer");
  return v->integer;
}

std::string part_name(const std::string& prefix, int no, int count) {
  char tail[40];
  std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", no, count);
  return prefix + tail;
}

const std::string* text_key(const GgufFile& file, const char* key) {
  const GgufValue* v = file.find(key);
  return v != nullptr && v->type == GgufValueType::String ? &v->text : nullptr;
}

}  // namespace

std::vector<std::string> gguf_split_paths(const std::string& first, int count) {
  const std::string tail = part_name("", 1, count);
  if (first.size() <= tail.size() || first.compare(first.size() - tail.size(), tail.size(), tail) != 0)
    throw std::runtime_error(first + ": its split.count says the model is split in " + std::to_string(count) +
                             " parts, but the file is not named as the first of them (PREFIX" + tail + ", llama.cpp's names for the parts)");
  const std::string prefix = first.substr(0, first.size() - tail.size());
  std::vector<std::string> paths;
  for (int no = 1; no <= count; no++) paths.push_back(part_name(prefix, no, count));
  return paths;
}

std::vector<std::unique_ptr<GgufFile>> open_gguf_parts(const std::string& path) {
  std::vector<std::unique_ptr<GgufFile>> parts;
  parts.push_back(std::make_unique<GgufFile>(path));
  const GgufFile& first = *parts[0];
  const int64_t count = integer_key(first, kSplitCount, 0);
  const int64_t no = integer_key(first, kSplitNo, 0);
  if (count == 0) return parts;  // one file (split.no alone means nothing)
  if (count < 1 || count > 99999) throw std::runtime_error(path + ": split.count " + std::to_string(count) + " is not a number of parts (1..99999)");
  if (no != 0) {
    const std::string tail = part_name("", static_cast<int>(no + 1), static_cast<int>(count));
    const bool named = no > 0 && path.size() > tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
    throw std::runtime_error(path + ": this is part " + std::to_string(no + 1) + " of " + std::to_string(count) + " of a split model; give --model its first part" +
                             (named ? ", " + part_name(path.substr(0, path.size() - tail.size()), 1, static_cast<int>(count)) : std::string()));
  }
  if (count == 1) return parts;
  const std::vector<std::string> paths = gguf_split_paths(path, static_cast<int>(count));
  const int64_t total = integer_key(first, kSplitTensors, -1);
  if (total < 0) throw std::runtime_error(path + ": the first part of a split has no " + kSplitTensors);
  const std::string* arch = text_key(first, "general.architecture");
  for (int i = 1; i < static_cast<int>(count); i++) {
    struct stat st;
    if (stat(paths[i].c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw std::runtime_error(path + ": part " + std::to_string(i + 1) + " of " + std::to_string(count) + " of this split model is missing: " + paths[i]);
    parts.push_back(std::make_unique<GgufFile>(paths[i]));
    const GgufFile& part = *parts.back();
    const int64_t part_no = integer_key(part, kSplitNo, -1), part_count = integer_key(part, kSplitCount, -1), part_total = integer_key(part, kSplitTensors, -1);
    if (part_no != i || part_count != count || part_total != total)
      throw std::runtime_error(paths[i] + ": not part " + std::to_string(i + 1) + " of " + path + "'s split: its split.no / split.count / split.tensors.count are " +
                               std::to_string(part_no) + " / " + std::to_string(part_count) + " / " + std::to_string(part_total) + ", expected " +
                               std::to_string(i) + " / " + std::to_string(count) + " / " + std::to_string(total) + " (a part of another model or split?)");
    const std::string* part_arch = text_key(part, "general.architecture");
    if (arch != nullptr && part_arch != nullptr && *arch != *part_arch)
      throw std::runtime_error(paths[i] + ": a part of a " + *part_arch + " model, but the first part " + path + " is " + *arch);
  }
  std::set<std::string> names;
  size_t tensors = 0;
  for (const auto& part : parts)
    for (const GgufTensor& t : part->tensors()) {
      tensors++;
      if (!names.insert(t.name).second) throw std::runtime_error(part->path() + ": tensor " + t.name + " is in two parts of the split model " + path);
    }
  if (tensors != static_cast<size_t>(total))
    throw std::runtime_error(path + ": the " + std::to_string(count) + " parts hold " + std::to_string(tensors) + " tensors, but split.tensors.count says " + std::to_string(total));
  return parts;
}

}  // namespace ctxr
