#include "gguf_weights.h"

#include "gguf_split.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstring>
#include <stdexcept>

namespace ctxr {

namespace {

DType dtype_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    case GgmlType::Q8_0: return DType::Q8_0;
    case GgmlType::Q4_0: return DType::Q4_0;
    case GgmlType::Q4_K: return DType::Q4_K;
    case GgmlType::Q6_K: return DType::Q6_K;
    case GgmlType::Q4_1: return DType::Q4_1;
    case GgmlType::Q5_0: return DType::Q5_0;
    case GgmlType::Q5_1: return DType::Q5_1;
    case GgmlType::IQ4_NL: return DType::IQ4_NL;
    case GgmlType::MXFP4: return DType::MXFP4;
    case GgmlType::Q2_K: return DType::Q2_K;
    case GgmlType::Q3_K: return DType::Q3_K;
    case GgmlType::Q5_K: return DType::Q5_K;
    case GgmlType::IQ4_XS: return DType::IQ4_XS;
  }
  throw std::logic_error("unmapped ggml type");
}

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// Gemma 3's norms: llama.cpp's ffn_norm is its pre-feedforward norm, and the post-attention norm
// (Hugging Face post_attention_layernorm) normalizes the attention output.
const std::pair<const char*, const char*> kGemma3Parts[] = {
    {"post_attention_norm", "post_attention_layernorm"}, {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"}, {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"}};

// gpt-oss's: its post_attention_norm is the norm before the FFN (Hugging Face's
// post_attention_layernorm, as a Llama's), and each layer has a sink logit per head.
const std::pair<const char*, const char*> kGptOssParts[] = {{"post_attention_norm", "post_attention_layernorm"}, {"attn_sinks", "self_attn.sinks"}};

// llama.cpp's name of a tensor → the Hugging Face name; "" for tensors the model does not use.
std::string hf_name(const std::string& name, const std::string& architecture) {
  static const std::pair<const char*, const char*> top[] = {
      {"token_embd.weight", "model.embed_tokens.weight"}, {"output_norm.weight", "model.norm.weight"}, {"output.weight", "lm_head.weight"}};
  for (const auto& [g, h] : top)
    if (name == g) return h;
  if (name.compare(0, 4, "blk.") != 0) return "";
  size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
  static const std::pair<const char*, const char*> parts[] = {
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},   {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},         {"ffn_down", "mlp.down_proj"},
      {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
      // Mixture of experts: the router, and 3-D [experts][rows][cols] tensors of every expert.
      {"ffn_gate_inp", "mlp.gate"}, {"ffn_gate_exps", "mlp.experts.gate_exps"}, {"ffn_up_exps", "mlp.experts.up_exps"},
      {"ffn_down_exps", "mlp.experts.down_exps"}};
  auto match = [&](const char* g, const char* h) {
    const std::string prefix = std::string(g) + ".";
    return rest.compare(0, prefix.size(), prefix) == 0 ? "model.layers." + layer + "." + h + rest.substr(prefix.size() - 1) : std::string();
  };
  if (architecture == "Gemma3ForCausalLM")
    for (const auto& [g, h] : kGemma3Parts)
      if (std::string n = match(g, h); !n.empty()) return n;
  if (architecture == "GptOssForCausalLM")
    for (const auto& [g, h] : kGptOssParts)
      if (std::string n = match(g, h); !n.empty()) return n;
  for (const auto& [g, h] : parts)
    if (std::string n = match(g, h); !n.empty()) return n;
  return "";
}

// Phi-3's fused projections keep their own names: q|k|v rows in attn_qkv, gate|up in ffn_up
// (2·ff rows, gate first: llama.cpp's swiglu takes silu of the first half).
std::string phi3_hf_name(const std::string& name) {
  static const std::pair<const char*, const char*> fused[] = {{".attn_qkv.", ".self_attn.qkv_proj."}, {".ffn_up.", ".mlp.gate_up_proj."}};
  for (const auto& [g, h] : fused)
    if (size_t at = name.find(g); name.compare(0, 4, "blk.") == 0 && at != std::string::npos)
      return "model.layers." + name.substr(4, at - 4) + h + name.substr(at + std::strlen(g));
  return hf_name(name, "Phi3ForCausalLM");
}

// A per-frequency divisor tensor (rope_freqs, rope_factors_long/short): F32 [n], all positive.
std::vector<double> rope_factors(const std::string& path, const GgufTensor& t, int n) {
  if (t.type != GgmlType::F32 || t.dims.size() != 1 || t.dims[0] != n)
    throw std::runtime_error(path + ": tensor " + t.name + " must be F32 [" + std::to_string(n) + "] (rotary dimension / 2)");
  const auto* f = reinterpret_cast<const float*>(t.data);
  std::vector<double> out(f, f + n);
  for (double x : out)
    if (!(x > 0)) throw std::runtime_error(path + ": tensor " + t.name + " holds a factor that is not positive");
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int hf_row_of_gguf_row(int r, int head_dim) {
  // convert_hf_to_gguf.py permutes each head's rows as reshape(2, head_dim/2).swapaxes: Hugging
  // Face row half·head_dim/2 + i lands at row 2i + half, so RoPE pairs (2i, 2i+1) in GGUF are
  // the pairs (i, i + head_dim/2) our rope() rotates.
  const int head = r / head_dim, within = r % head_dim;
  return head * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

GgufWeights::GgufWeights(const std::string& path) : files_(open_gguf_parts(path)) {
  std::vector<const GgufFile*> other_parts;
  for (size_t i = 1; i < files_.size(); i++) other_parts.push_back(files_[i].get());
  config_ = model_config_from_gguf(*files_[0], other_parts);
  const bool llama = config_.architecture == "LlamaForCausalLM";
  const bool phi3 = config_.architecture == "Phi3ForCausalLM";
  for (const auto& file : files_) {
    for (const GgufTensor& t : file->tensors()) {
      if (t.name == "rope_freqs.weight") {
        config_.rope_freq_factors = rope_factors(file->path(), t, config_.rope_dim / 2);
        continue;
      }
      if (t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight") {
        (t.name == "rope_factors_long.weight" ? config_.rope_long_factors : config_.rope_short_factors) = rope_factors(file->path(), t, config_.rope_dim / 2);
        continue;
      }
      std::string name = phi3 ? phi3_hf_name(t.name) : hf_name(t.name, config_.architecture);
      if (name.empty()) continue;
      TensorView v;
      v.name = t.name;
      v.file = file->path();
      v.dtype = dtype_of(t.type);
      for (auto d = t.dims.rbegin(); d != t.dims.rend(); ++d) v.shape.push_back(*d);
      v.data = t.data;
      v.bytes = t.bytes;
      if (v.shape.size() == 1 && v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16)
        throw std::runtime_error(file->path() + ": tensor " + t.name + " is a vector in " + ggml_type_name(t.type) + " (only F32, F16, BF16 vectors are read)");
      const bool q = ends_with(name, "q_proj.weight") || ends_with(name, "q_proj.bias");
      const bool k = ends_with(name, "k_proj.weight") || ends_with(name, "k_proj.bias");
      if (llama && (q || k)) {
        const int rows = static_cast<int>(v.shape[0]);
        if (rows % config_.head_dim != 0)
          throw std::runtime_error(file->path() + ": tensor " + t.name + " has " + std::to_string(rows) + " rows, not whole heads of " + std::to_string(config_.head_dim));
        // Whole rows move, so quantized rows are moved as they are.
        const size_t row_bytes = v.bytes / rows;
        std::vector<uint8_t> rows_hf(v.bytes);
        for (int r = 0; r < rows; r++)
          std::memcpy(rows_hf.data() + static_cast<size_t>(hf_row_of_gguf_row(r, config_.head_dim)) * row_bytes,
                      t.data + static_cast<size_t>(r) * row_bytes, row_bytes);
        copies_.push_back(std::move(rows_hf));
        v.data = copies_.back().data();
        // The original rows are not read again: their pages leave the resident set, so that the
        // copy does not count twice.
        file->drop_resident_pages(t.data, t.bytes);
      }
      views_[name] = v;
    }
  }
  if (config_.rope_long_factors.empty() != config_.rope_short_factors.empty())
    throw std::runtime_error(path + ": tensors rope_factors_long.weight and rope_factors_short.weight come together; the file has one");
  if (!config_.rope_long_factors.empty()) config_.rope_type = "longrope";
}

const TensorView& GgufWeights::get(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = views_.find(name);
  if (it == views_.end()) throw std::runtime_error(files_[0]->path() + ": no tensor for " + name);
  if (it->second.shape != shape)
    throw std::runtime_error(it->second.file + ": tensor " + it->second.name + " has shape " + shape_text(it->second.shape) + ", expected " + shape_text(shape));
  return it->second;
}

void GgufWeights::loaded(bool still_read) {
  if (still_read) return;  // matrices point into the mapping and into copies_ (q/k rows)
  // The backend holds its own copies (packed f32 on the CPU, device memory on CUDA): the q/k
  // rows go, and the mapping's pages leave the resident set (the mapping itself stays valid;
  // a later read, such as an F32 embedding row, pages in again from the file).
  copies_.clear();
  copies_.shrink_to_fit();
  for (const auto& file : files_) file->drop_resident_pages();
}

std::string gguf_model_path(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
  if (S_ISREG(st.st_mode)) return ends_with(path, ".gguf") ? path : "";
  if (!S_ISDIR(st.st_mode)) return "";
  DIR* d = opendir(path.c_str());
  if (!d) return "";
  std::vector<std::string> gguf;
  bool safetensors = false;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    // A split model's later parts (…-00002-of-00003.gguf) are found from its first.
    const bool later_part = name.size() > 20 && name.compare(name.size() - 20, 1, "-") == 0 && name.compare(name.size() - 14, 4, "-of-") == 0 &&
                            name.compare(name.size() - 19, 5, "00001") != 0;
    if (ends_with(name, ".gguf") && !later_part) gguf.push_back(path + "/" + name);
    if (ends_with(name, ".safetensors")) safetensors = true;
  }
  closedir(d);
  if (safetensors || gguf.empty()) return "";
  if (gguf.size() > 1) throw std::runtime_error(path + " holds " + std::to_string(gguf.size()) + " .gguf files; name one with --model FILE.gguf");
  return gguf[0];
}

}  // namespace ctxr
