// llama-oracle: llama.cpp (libllama of node-llama-cpp 3.22.1) as the reference that ctxr's tests
// compare against. Built by setup.sh; every mode prints one JSON line on stdout, errors on stderr
// with a non-zero exit.
//
//   llama-oracle quantize IN.gguf OUT.gguf FTYPE   llama_model_quantize (FTYPE: llama.h's llama_ftype number)
//   llama-oracle logits MODEL.gguf IDS_FILE OUT    one decode of the ids (f32 KV cache, 2 threads); OUT gets
//                                                  the log-softmax of every position's logits, n_ids rows of
//                                                  n_vocab little-endian f32; prints {"positions","vocab"}
//   llama-oracle tokenize MODEL.gguf TEXT_FILE     {"plain":[ids],"special":[ids]}: the UTF-8 text tokenized
//                                                  with parse_special false and true (no BOS/EOS added)
//   llama-oracle tensor-types MODEL.gguf           {"name":"ggml type name",...} of every tensor
//   llama-oracle expert-routes MODEL.gguf IDS_FILE one decode of the ids; per layer and position, the
//                                                  experts llama.cpp's router chose and the margin of its
//                                                  k-th over its (k+1)-th probability (expert_routes.cpp)
//   llama-oracle conversation MODEL.gguf TURNS_FILE [options]
//                                                  a multi-turn conversation through one llama-server
//                                                  slot's prompt cache: per turn, the prompt tokens it
//                                                  reuses and re-processes (conversation.cpp)
//
// IDS_FILE: token ids as decimal integers separated by commas or white space.
// LLAMA_ORACLE_VERBOSE=1 shows llama.cpp's log (why a file fails to load); LLAMA_LIB_DIR names the
// folder of the ggml backends (default: the one this binary was linked against, see setup.sh).
#ifndef LLAMA_ORACLE_LIB_DIR
#error "build with -DLLAMA_ORACLE_LIB_DIR=\"<folder of libllama and the ggml backends>\" (setup.sh does)"
#endif
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"
#include "conversation.h"
#include "expert_routes.h"
#include "oracle_common.h"

using namespace oracle;

namespace {

void quiet_log(ggml_log_level, const char*, void*) {}

int quantize(const std::string& in, const std::string& out, const std::string& ftype) {
  llama_model_quantize_params params = llama_model_quantize_default_params();
  params.ftype = (llama_ftype)std::stoi(ftype);
  params.nthread = 2;
  const uint32_t rc = llama_model_quantize(in.c_str(), out.c_str(), &params);
  if (rc != 0) fail("llama_model_quantize " + in + " to ftype " + ftype + " failed (" + std::to_string(rc) + ")");
  printf("{\"quantized\":%s,\"ftype\":%d}\n", json_string(out).c_str(), (int)params.ftype);
  return 0;
}

int logits(const std::string& model_path, const std::string& ids_path, const std::string& out_path) {
  const std::vector<llama_token> ids = parse_ids(read_file(ids_path));
  if (ids.empty()) fail("ids file " + ids_path + " holds no ids");
  llama_model* model = load_model(model_path);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (llama_token id : ids)
    if (id < 0 || id >= n_vocab) fail("id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n_vocab));
  const int n = (int)ids.size();
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n + 16;
  cp.n_batch = cp.n_ubatch = n;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) fail("cannot create a llama.cpp context for " + std::to_string(n) + " tokens");
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; i++) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) fail("llama_decode failed");
  FILE* out = fopen(out_path.c_str(), "wb");
  if (!out) fail("cannot write " + out_path);
  std::vector<float> row(n_vocab);
  for (int i = 0; i < n; i++) {
    const float* lg = llama_get_logits_ith(ctx, i);
    double top = lg[0];
    for (int v = 1; v < n_vocab; v++) top = std::max(top, (double)lg[v]);
    double sum = 0;
    for (int v = 0; v < n_vocab; v++) sum += std::exp((double)lg[v] - top);
    const double log_sum = std::log(sum);
    for (int v = 0; v < n_vocab; v++) row[v] = (float)((double)lg[v] - top - log_sum);
    if (fwrite(row.data(), sizeof(float), n_vocab, out) != (size_t)n_vocab) fail("short write to " + out_path);
  }
  if (fclose(out) != 0) fail("cannot write " + out_path);
  printf("{\"positions\":%d,\"vocab\":%d}\n", n, n_vocab);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}

std::vector<llama_token> tokenize_text(const llama_vocab* vocab, const std::string& text, bool parse_special) {
  std::vector<llama_token> ids(text.size() + 8);
  int n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(), false, parse_special);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(), false, parse_special);
    if (n < 0) fail("llama_tokenize failed");
  }
  ids.resize(n);
  return ids;
}

int tokenize(const std::string& model_path, const std::string& text_path) {
  const std::string text = read_file(text_path);
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), params);
  if (!model) fail("llama.cpp cannot load the vocabulary of " + model_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  printf("{\"plain\":%s,\"special\":%s}\n", json_ids(tokenize_text(vocab, text, false)).c_str(), json_ids(tokenize_text(vocab, text, true)).c_str());
  llama_model_free(model);
  return 0;
}

int tensor_types(const std::string& model_path) {
  gguf_init_params params = {true, nullptr};
  gguf_context* gguf = gguf_init_from_file(model_path.c_str(), params);
  if (!gguf) fail("ggml cannot read " + model_path + " as GGUF");
  std::string out = "{";
  for (int64_t i = 0; i < gguf_get_n_tensors(gguf); i++)
    out += (i ? "," : "") + json_string(gguf_get_tensor_name(gguf, i)) + ":" + json_string(ggml_type_name(gguf_get_tensor_type(gguf, i)));
  printf("%s}\n", out.c_str());
  gguf_free(gguf);
  return 0;
}

void usage() {
  fprintf(stderr,
          "usage: llama-oracle quantize IN.gguf OUT.gguf FTYPE\n"
          "       llama-oracle logits MODEL.gguf IDS_FILE OUT_FILE\n"
          "       llama-oracle tokenize MODEL.gguf TEXT_FILE\n"
          "       llama-oracle tensor-types MODEL.gguf\n"
          "       llama-oracle expert-routes MODEL.gguf IDS_FILE\n"
          "       llama-oracle conversation MODEL.gguf TURNS_FILE [--swa-full] [--ctx-checkpoints N] [--checkpoint-min-step N]\n"
          "                                 [--parallel N] [--ctx N] [--threads N]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) usage();
  const std::string mode = argv[1];
  if (mode == "tensor-types" && argc == 3) return tensor_types(argv[2]);
  if (!getenv("LLAMA_ORACLE_VERBOSE")) llama_log_set(quiet_log, nullptr);
  const char* lib_dir = getenv("LLAMA_LIB_DIR");
  ggml_backend_load_all_from_path(lib_dir ? lib_dir : LLAMA_ORACLE_LIB_DIR);
  llama_backend_init();
  try {
    if (mode == "quantize" && argc == 5) return quantize(argv[2], argv[3], argv[4]);
    if (mode == "logits" && argc == 5) return logits(argv[2], argv[3], argv[4]);
    if (mode == "tokenize" && argc == 4) return tokenize(argv[2], argv[3]);
    if (mode == "expert-routes" && argc == 4) return expert_routes_mode(argv[2], argv[3]);
    if (mode == "conversation" && argc >= 4) return conversation_mode(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    fail(std::string(mode) + ": " + e.what());
  }
  usage();
}
