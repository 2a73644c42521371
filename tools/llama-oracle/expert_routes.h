// llama-oracle's expert-routes mode (expert_routes.cpp).
#pragma once
#include <string>

// One decode of the ids (f32 KV cache, 2 threads) with an eval callback that reads every layer's
// ffn_moe_probs-N (the router's softmax over all experts) and ffn_moe_topk-N (the chosen experts,
// llama-graph.cpp's build_moe_ffn); prints one JSON line:
//   {"positions":n,"k":k,"experts":E,"layers":[{"topk":[[e,...] per position],"margin":[p_k - p_(k+1) per position],
//                         "logit_gap":[log p_k - log p_(k+1) per position]}]}
int expert_routes_mode(const std::string& model_path, const std::string& ids_path);
