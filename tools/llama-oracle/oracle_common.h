// The llama-oracle driver's shared helpers: errors, files, id lists, JSON text, model loading.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace oracle {

[[noreturn]] inline void fail(const std::string& message) {
  fprintf(stderr, "llama-oracle: %s\n", message.c_str());
  exit(1);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::vector<llama_token> parse_ids(const std::string& text) {
  std::vector<llama_token> ids;
  std::string digits;
  auto flush = [&] {
    if (digits.empty()) return;
    ids.push_back((llama_token)std::stol(digits));
    digits.clear();
  };
  for (char c : text) {
    if (c >= '0' && c <= '9') digits += c;
    else if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t') flush();
    else fail(std::string("ids file: unexpected character '") + c + "'");
  }
  flush();
  return ids;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += (char)c; }
    else if (c < 0x20) { char buf[8]; snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += (char)c;
  }
  return out + "\"";
}

inline std::string json_ids(const std::vector<llama_token>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); i++) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

inline llama_model* load_model(const std::string& path) {
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(path.c_str(), params);
  if (!model) fail("llama.cpp cannot load " + path + " (LLAMA_ORACLE_VERBOSE=1 shows why)");
  return model;
}

}  // namespace oracle
