#include "expert_routes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"
#include "oracle_common.h"

using namespace oracle;

namespace {

struct Captured {
  std::map<int, std::vector<std::vector<int32_t>>> topk;  // layer -> position -> k experts
  std::map<int, std::vector<std::vector<float>>> probs;   // layer -> position -> E probabilities
};

// The layer of a tensor named PREFIX-N, or -1.
int layer_of(const char* name, const char* prefix) {
  const size_t n = strlen(prefix);
  if (strncmp(name, prefix, n) != 0 || name[n] != '-' || name[n + 1] == 0) return -1;
  for (const char* c = name + n + 1; *c; c++)
    if (*c < '0' || *c > '9') return -1;  // not a view of it ("ffn_moe_probs-0 (reshaped)")
  return atoi(name + n + 1);
}

// Row by row (a top-k view of the argsort is not contiguous): ne[0] values of ne[1] rows.
template <typename T>
std::vector<std::vector<T>> rows_of(ggml_tensor* t) {
  std::vector<std::vector<T>> rows(t->ne[1], std::vector<T>(t->ne[0]));
  for (int64_t r = 0; r < t->ne[1]; r++) ggml_backend_tensor_get(t, rows[r].data(), r * t->nb[1], t->ne[0] * sizeof(T));
  return rows;
}

bool capture(ggml_tensor* t, bool ask, void* user) {
  auto* c = static_cast<Captured*>(user);
  const int topk = layer_of(t->name, "ffn_moe_topk"), probs = layer_of(t->name, "ffn_moe_probs");
  if (ask) return topk >= 0 || probs >= 0;
  if (topk >= 0 && t->type == GGML_TYPE_I32) c->topk[topk] = rows_of<int32_t>(t);
  if (probs >= 0 && t->type == GGML_TYPE_F32) c->probs[probs] = rows_of<float>(t);
  return true;
}

}  // namespace

int expert_routes_mode(const std::string& model_path, const std::string& ids_path) {
  const std::vector<llama_token> ids = parse_ids(read_file(ids_path));
  if (ids.empty()) fail("ids file " + ids_path + " holds no ids");
  llama_model* model = load_model(model_path);
  const int n = (int)ids.size();
  Captured captured;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n + 16;
  cp.n_batch = cp.n_ubatch = n;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.cb_eval = capture;
  cp.cb_eval_user_data = &captured;
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
  if (captured.topk.empty()) fail(model_path + ": no ffn_moe_topk tensors were computed (not a mixture-of-experts model?)");
  int k = 0, experts = 0;
  std::string layers;
  for (const auto& [layer, topk] : captured.topk) {
    const auto& probs = captured.probs[layer];
    if ((int)topk.size() != n || (int)probs.size() != n) fail("layer " + std::to_string(layer) + ": routes of " + std::to_string(topk.size()) + " positions, not " + std::to_string(n));
    k = (int)topk[0].size();
    experts = (int)probs[0].size();
    // ffn_moe_probs holds probabilities where the router takes a softmax over every expert first
    // (qwen3moe) and the raw logits where it takes the top k first (gpt-oss's softmax over the chosen).
    bool logits = false;
    for (const auto& row : probs) {
      double sum = 0;
      for (float v : row) {
        if (v < 0) logits = true;
        sum += v;
      }
      if (std::fabs(sum - 1.0) > 1e-3) logits = true;
    }
    std::string chosen = "[", margins = "[", gaps = "[";
    for (int p = 0; p < n; p++) {
      chosen += (p ? "," : "") + json_ids(topk[p]);
      std::vector<float> sorted = probs[p];
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const float margin = k < experts ? sorted[k - 1] - sorted[k] : 1.f;
      // The same gap in router logits (softmax's log ratio): comparable across expert counts.
      const double gap = k >= experts ? 1e9 : logits ? (double)sorted[k - 1] - (double)sorted[k] : std::log((double)sorted[k - 1]) - std::log((double)sorted[k]);
      char buf[32];
      snprintf(buf, sizeof buf, "%.9g", margin);
      margins += (p ? "," : "") + std::string(buf);
      snprintf(buf, sizeof buf, "%.9g", gap);
      gaps += (p ? "," : "") + std::string(buf);
    }
    layers += (layers.empty() ? "" : ",") + std::string("{\"topk\":") + chosen + "],\"margin\":" + margins + "],\"logit_gap\":" + gaps + "]}";
  }
  printf("{\"positions\":%d,\"k\":%d,\"experts\":%d,\"layers\":[%s]}\n", n, k, experts, layers.c_str());
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
