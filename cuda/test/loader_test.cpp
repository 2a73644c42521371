// config.json, JSON and safetensors header parsing: accepted shapes and the errors that name
// the problem.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string>

#include "gguf_split.h"
#include "gguf_weights.h"
#include "json.h"
#include "model_config.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;

namespace {

std::string error_of(void (*f)()) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

RUNNER_TEST(loader, json_values_and_errors) {
  JsonValue v = parse_json(R"({"a": [1, -2.5e3, true, null], "b": "x\u00e9\n", "c": {}})");
  CHECK(v.is_object());
  CHECK_EQ(v.find("a")->array.size(), 4u);
  CHECK_NEAR(v.find("a")->array[1].number, -2500.0, 0.0);
  CHECK(v.find("b")->string == "x\xc3\xa9\n");
  CHECK(v.find("missing") == nullptr);
  CHECK(contains(error_of([] { parse_json("{\"a\": }"); }), "byte 6"));
  CHECK(contains(error_of([] { parse_json("[1, 2"); }), "invalid JSON"));
  CHECK(contains(error_of([] { parse_json("{} x"); }), "trailing"));
  CHECK(contains(error_of([] { parse_json(std::string(500, '[')); }), "nested too deeply"));
}

RUNNER_TEST(loader, config_defaults_and_errors) {
  ModelConfig c = model_config_from_json_text(R"({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
    "num_hidden_layers": 2, "vocab_size": 100})");
  CHECK_EQ(c.kv_heads, 4);
  CHECK_EQ(c.head_dim, 16);
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(!c.tie_word_embeddings);
  CHECK(contains(error_of([] { model_config_from_json_text(R"({"num_attention_heads": 4})"); }), "config.json: hidden_size is missing"));
  CHECK(contains(error_of([] { model_config_from_json_text(R"({"architectures": ["GPT2LMHeadModel"]})"); }), "GPT2LMHeadModel is not supported"));
  CHECK(contains(error_of([] {
              model_config_from_json_text(R"({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
                "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10})");
            }),
            "not a multiple"));
  CHECK(contains(error_of([] {
              model_config_from_json_text(R"({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8,
                "num_hidden_layers": 1, "vocab_size": 10, "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
            }),
            "yarn is not supported"));
}

RUNNER_TEST(loader, qwen3_config) {
  ModelConfig c = model_config_from_json_text(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 96, "intermediate_size": 512,
    "num_hidden_layers": 2, "vocab_size": 271, "rope_theta": 1000000, "tie_word_embeddings": true})");
  CHECK(c.architecture == "Qwen3ForCausalLM");
  CHECK(c.qk_norm);
  CHECK_EQ(c.head_dim, 96);
  CHECK(c.tie_word_embeddings);
  CHECK(!model_config_from_json_text(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
    "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10})").qk_norm);
}

RUNNER_TEST(loader, llama3_rope_scaling) {
  ModelConfig c = model_config_from_json_text(R"({"hidden_size": 128, "num_attention_heads": 1, "intermediate_size": 8,
    "num_hidden_layers": 1, "vocab_size": 10, "rope_theta": 500000,
    "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}})");
  std::vector<double> f = rope_inverse_frequencies(c);
  CHECK_EQ(f.size(), 64u);
  CHECK_NEAR(f[0], 1.0, 1e-12);  // high frequencies are kept
  double plain_last = 1.0 / std::pow(500000.0, 126.0 / 128.0);
  CHECK_NEAR(f[63], plain_last / 8, plain_last * 1e-12);  // low frequencies divided by the factor
  for (size_t i = 1; i < f.size(); i++) CHECK(f[i] < f[i - 1]);
}

RUNNER_TEST(loader, safetensors_header_checks) {
  std::string dir = "/tmp/ctxr-loader-test-" + std::to_string(::getpid());
  std::system(("mkdir -p " + dir).c_str());
  auto write = [&](const std::string& header, size_t data_bytes) {
    std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(data_bytes, '\0');
  };
  write(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 24);
  {
    SafetensorsFolder folder(dir);
    CHECK(folder.has("w"));
    CHECK_EQ(folder.get("w", {2, 3}).bytes, 24u);
    bool threw = false;
    try {
      folder.get("w", {3, 2});
    } catch (const std::exception& e) {
      threw = contains(e.what(), "has shape [2, 3], expected [3, 2]");
    }
    CHECK(threw);
  }
  auto load_error = [&]() -> std::string {
    try {
      SafetensorsFolder folder(dir);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  write(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
  CHECK(contains(load_error(), "has 20 bytes for shape [2, 3]"));
  write(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 8);
  CHECK(contains(load_error(), "outside the file"));
  write(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8);
  CHECK(contains(load_error(), "dtype I64"));
  write(R"({"w": )", 0);
  CHECK(contains(load_error(), "header"));
  std::system(("rm -rf " + dir).c_str());
}

RUNNER_TEST(loader, gguf_split_part_names) {
  const auto paths = gguf_split_paths("/m/model-Q4_K_M-00001-of-00003.gguf", 3);
  CHECK_EQ(paths.size(), 3u);
  CHECK(paths[0] == "/m/model-Q4_K_M-00001-of-00003.gguf");
  CHECK(paths[2] == "/m/model-Q4_K_M-00003-of-00003.gguf");
  // The name's count must be the metadata's, and the file the first part.
  CHECK(contains(error_of([] { gguf_split_paths("/m/model-00001-of-00002.gguf", 3); }), "not named as the first of them (PREFIX-00001-of-00003.gguf"));
  CHECK(contains(error_of([] { gguf_split_paths("/m/model-00002-of-00003.gguf", 3); }), "split in 3 parts"));
  CHECK(contains(error_of([] { gguf_split_paths("/m/model.gguf", 2); }), "/m/model.gguf: its split.count says"));
  CHECK(contains(error_of([] { gguf_split_paths("-00001-of-00002.gguf", 2); }), "not named as the first"));
}

RUNNER_TEST(loader, gguf_folder_of_split_parts) {
  char folder[] = "/tmp/ctxr-split-folder-XXXXXX";
  CHECK(mkdtemp(folder) != nullptr);
  const std::string dir = folder;
  auto touch = [&](const std::string& name) { std::ofstream(dir + "/" + name) << "x"; };
  touch("m-00001-of-00003.gguf");
  touch("m-00002-of-00003.gguf");
  touch("m-00003-of-00003.gguf");
  CHECK(gguf_model_path(dir) == dir + "/m-00001-of-00003.gguf");
  touch("other.gguf");
  bool refused = false;
  try {
    gguf_model_path(dir);
  } catch (const std::exception& e) {
    refused = contains(e.what(), "holds 2 .gguf files");
  }
  CHECK(refused);
  for (const char* name : {"m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf", "other.gguf"}) unlink((dir + "/" + name).c_str());
  rmdir(folder);
}
