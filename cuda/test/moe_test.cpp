// Mixture-of-experts pieces (moe_router.h, moe_activation.h, moe_ffn.h): both gatings in
// llama.cpp's order of operations, renormalised and scaled weights, the margin that marks a
// near-tie, tokens grouped by expert, gpt-oss's clamped SwiGLU, and the CPU backend's expert FFN
// (F32 and Q8_0 experts read as slices of 3-D tensors, with router and expert biases) against a
// double-precision reference of every token through its experts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "backend.h"
#include "halfs.h"
#include "moe_activation.h"
#include "moe_ffn.h"
#include "moe_router.h"
#include "quant.h"
#include "runner_test.h"
#include "safetensors.h"

using namespace ctxr;

namespace {

MoeConfig qwen3moe_like(int experts, int k) {
  MoeConfig c;
  c.experts = experts;
  c.experts_used = k;
  c.expert_ff = 8;
  c.normalize_topk = true;
  return c;
}

std::vector<double> softmax_of(const std::vector<double>& x) {
  double top = *std::max_element(x.begin(), x.end()), sum = 0;
  std::vector<double> p(x.size());
  for (size_t i = 0; i < x.size(); i++) sum += p[i] = std::exp(x[i] - top);
  for (double& v : p) v /= sum;
  return p;
}

}  // namespace

RUNNER_TEST(moe, softmax_then_topk_renormalised) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 3.0f};
  MoeConfig c = qwen3moe_like(6, 2);
  std::vector<ExpertRoute> r(2);
  route_tokens(logits.data(), 1, c, r.data());
  CHECK_EQ(r[0].expert, 5);
  CHECK_EQ(r[1].expert, 1);
  // Renormalised over the two: e^3 / (e^3 + e^2), whatever the other experts' mass.
  CHECK_NEAR(r[0].weight, std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  CHECK_NEAR(r[0].weight + r[1].weight, 1.0, 1e-6);
  c.normalize_topk = false;  // the plain softmax probabilities of all six
  route_tokens(logits.data(), 1, c, r.data());
  std::vector<double> p = softmax_of({0.5, 2.0, -1.0, 1.5, 0.0, 3.0});
  CHECK_NEAR(r[0].weight, p[5], 1e-6);
  CHECK_NEAR(r[1].weight, p[1], 1e-6);
  c.weights_scale = 2.5f;  // llama.cpp's expert_weights_scale, after the normalisation
  route_tokens(logits.data(), 1, c, r.data());
  CHECK_NEAR(r[0].weight, 2.5 * p[5], 1e-6);
}

RUNNER_TEST(moe, topk_then_softmax) {
  // gpt-oss: the k largest logits (a bias already added), weights a softmax over those k only.
  const std::vector<float> logits = {0.1f, 4.0f, 1.0f, 3.0f, -2.0f, 2.0f, 0.0f, 3.5f};
  MoeConfig c;
  c.experts = 8;
  c.experts_used = 4;
  c.gating = ExpertGating::TopKThenSoftmax;
  std::vector<ExpertRoute> r(4);
  route_tokens(logits.data(), 1, c, r.data());
  const int expected[] = {1, 7, 3, 5};
  std::vector<double> p = softmax_of({4.0, 3.5, 3.0, 2.0});
  for (int j = 0; j < 4; j++) {
    CHECK_EQ(r[j].expert, expected[j]);
    CHECK_NEAR(r[j].weight, p[j], 1e-6);
  }
  // The margin is in logits here, in probabilities with a softmax router.
  CHECK_NEAR(topk_margin(logits.data(), c), 2.0f - 1.0f, 1e-6);
  MoeConfig s = qwen3moe_like(8, 4);
  std::vector<double> all = softmax_of({0.1, 4.0, 1.0, 3.0, -2.0, 2.0, 0.0, 3.5});
  CHECK_NEAR(topk_margin(logits.data(), s), all[5] - all[2], 1e-6);
  s.experts_used = 8;
  CHECK(std::isinf(topk_margin(logits.data(), s)));
}

RUNNER_TEST(moe, ties_go_to_the_lower_id_and_groups_are_by_expert) {
  const std::vector<float> logits = {1, 1, 1, 1,   0, 2, 2, 0,   5, 0, 0, 5};
  MoeConfig c = qwen3moe_like(4, 2);
  std::vector<ExpertRoute> r(6);
  route_tokens(logits.data(), 3, c, r.data());
  CHECK(r[0].expert == 0 && r[1].expert == 1);
  CHECK(r[2].expert == 1 && r[3].expert == 2);
  CHECK(r[4].expert == 0 && r[5].expert == 3);
  CHECK_NEAR(topk_margin(logits.data(), c), 0.0f, 0);
  ExpertGroups g = group_by_expert(r.data(), 3, 2, 4);
  CHECK(g.first == std::vector<int32_t>({0, 2, 4, 5, 6}));
  CHECK(g.token == std::vector<int32_t>({0, 2, 0, 1, 1, 2}));
  CHECK_NEAR(g.weight[0], 0.5f, 1e-6);
  CHECK_EQ(g.tokens_of(3), 1);
}

RUNNER_TEST(moe, clamped_swiglu) {
  MoeConfig c;
  c.activation = ExpertActivation::SwiGLUClamped;
  const float gate[] = {-3.f, 0.5f, 9.f, 7.f}, up[] = {10.f, -0.5f, -20.f, 2.f};
  float out[4];
  expert_activation_row(gate, up, 4, c, out);
  auto ref = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::clamp(u, -7.0, 7.0);
    return g / (1 + std::exp(-1.702 * g)) * (u + 1);
  };
  for (int j = 0; j < 4; j++) CHECK_NEAR(out[j], ref(gate[j], up[j]), 1e-5);
  CHECK_NEAR(out[2], 7.0 / (1 + std::exp(-1.702 * 7.0)) * -6.0, 1e-4);  // gate clamped to 7, up to -7
  c.activation = ExpertActivation::SwiGLU;
  expert_activation_row(gate, up, 4, c, out);
  for (int j = 0; j < 4; j++) CHECK_NEAR(out[j], gate[j] / (1 + std::exp(-gate[j])) * up[j], 1e-4);
}

namespace {

// Tensors of a fake mixture-of-experts layer, kept as TensorViews over owned bytes.
class FakeWeights final : public WeightSource {
 public:
  bool has(const std::string& name) const override { return views_.count(name) != 0; }
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const override {
    const TensorView& v = views_.at(name);
    if (v.shape != shape) throw std::runtime_error("shape of " + name);
    return v;
  }
  // Stores `values` (row-major, `shape`) as F32 or Q8_0 (rows of whole 32-blocks), and returns
  // what a reader of the stored bytes sees (the Q8_0 rounding included).
  std::vector<float> add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values, DType dtype) {
    std::vector<uint8_t>& bytes = storage_[name];
    std::vector<float> seen = values;
    if (dtype == DType::F32) {
      bytes.resize(values.size() * 4);
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else {
      const size_t blocks = values.size() / 32;
      bytes.resize(blocks * sizeof(BlockQ8_0));
      auto* b = reinterpret_cast<BlockQ8_0*>(bytes.data());
      for (size_t i = 0; i < blocks; i++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(values[i * 32 + j]));
        const float d = amax / 127;
        b[i].d = f32_to_f16_bits(d);
        const float dr = f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) {
          b[i].qs[j] = static_cast<int8_t>(d == 0 ? 0 : std::lround(values[i * 32 + j] / d));
          seen[i * 32 + j] = dr * b[i].qs[j];
        }
      }
    }
    views_[name] = TensorView{name, dtype, shape, bytes.data(), bytes.size(), "fake.gguf"};
    return seen;
  }

 private:
  std::map<std::string, std::vector<uint8_t>> storage_;
  std::map<std::string, TensorView> views_;
};

void check_expert_ffn(DType dtype, const MoeConfig& m, bool biases, int n, uint32_t seed) {
  const int hidden = 64, ff = m.expert_ff, experts = m.experts, k = m.experts_used;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto draw = [&](size_t count, float scale) {
    std::vector<float> v(count);
    for (float& x : v) x = normal(rng) * scale;
    return v;
  };
  FakeWeights w;
  // The router stays F32, as llama.cpp's quantizer keeps ffn_gate_inp.
  std::vector<float> router = w.add("l.mlp.gate.weight", {experts, hidden}, draw(static_cast<size_t>(experts) * hidden, 0.5f), DType::F32);
  std::vector<float> gate = w.add("l.mlp.experts.gate_exps.weight", {experts, ff, hidden}, draw(static_cast<size_t>(experts) * ff * hidden, 0.125f), dtype);
  std::vector<float> up = w.add("l.mlp.experts.up_exps.weight", {experts, ff, hidden}, draw(static_cast<size_t>(experts) * ff * hidden, 0.125f), dtype);
  std::vector<float> down = w.add("l.mlp.experts.down_exps.weight", {experts, hidden, ff}, draw(static_cast<size_t>(experts) * hidden * ff, 0.125f), dtype);
  std::vector<float> router_b, gate_b, up_b, down_b;
  if (biases) {
    router_b = w.add("l.mlp.gate.bias", {experts}, draw(experts, 0.5f), DType::F32);
    gate_b = w.add("l.mlp.experts.gate_exps.bias", {experts, ff}, draw(static_cast<size_t>(experts) * ff, 0.5f), DType::F32);
    up_b = w.add("l.mlp.experts.up_exps.bias", {experts, ff}, draw(static_cast<size_t>(experts) * ff, 0.5f), DType::F32);
    down_b = w.add("l.mlp.experts.down_exps.bias", {experts, hidden}, draw(static_cast<size_t>(experts) * hidden, 0.5f), DType::F32);
  }
  std::unique_ptr<Backend> cpu(make_cpu_backend(2));
  ModelConfig c;
  c.hidden = hidden;
  c.moe = m;
  std::map<std::string, size_t> elements;
  bool in_place = false;
  std::vector<std::vector<uint8_t>> copies;
  MoeLayer layer = load_moe_layer({w, cpu.get(), elements, in_place, copies}, "l.", c);
  CHECK(in_place == (dtype != DType::F32));
  CHECK(copies.empty() == (dtype != DType::F32));  // quantized experts are read where they are
  std::vector<float> x = draw(static_cast<size_t>(n) * hidden, 1.f), residual = draw(static_cast<size_t>(n) * hidden, 1.f), out = residual;
  MoeFfn ffn(cpu.get(), m, hidden);
  std::vector<int32_t> routes;
  ffn.forward(layer, x.data(), n, out.data(), &routes);
  CHECK_EQ(routes.size(), static_cast<size_t>(n) * k);
  // Reference: every token through its experts in double, with the runner's routes (the
  // router's own check is above; here a near-tie must not fail the sums).
  std::vector<float> logits(static_cast<size_t>(n) * experts);
  for (int t = 0; t < n; t++)
    for (int e = 0; e < experts; e++) {
      double s = biases ? router_b[e] : 0;
      for (int j = 0; j < hidden; j++) s += static_cast<double>(router[static_cast<size_t>(e) * hidden + j]) * x[static_cast<size_t>(t) * hidden + j];
      logits[static_cast<size_t>(t) * experts + e] = static_cast<float>(s);
    }
  std::vector<ExpertRoute> expected(static_cast<size_t>(n) * k);
  route_tokens(logits.data(), n, m, expected.data());
  double worst = 0, scale = 0;
  for (int t = 0; t < n; t++) {
    const float* xt = x.data() + static_cast<size_t>(t) * hidden;
    std::vector<double> y(hidden, 0.0);
    for (int j = 0; j < k; j++) {
      const int e = routes[static_cast<size_t>(t) * k + j];
      if (topk_margin(logits.data() + static_cast<size_t>(t) * experts, m) > 1e-3f) CHECK_EQ(e, expected[static_cast<size_t>(t) * k + j].expert);
      const float weight = expected[static_cast<size_t>(t) * k + j].weight;
      std::vector<float> g(ff), u(ff), a(ff);
      for (int r = 0; r < ff; r++) {
        double sg = biases ? gate_b[static_cast<size_t>(e) * ff + r] : 0, su = biases ? up_b[static_cast<size_t>(e) * ff + r] : 0;
        for (int i = 0; i < hidden; i++) {
          sg += static_cast<double>(gate[(static_cast<size_t>(e) * ff + r) * hidden + i]) * xt[i];
          su += static_cast<double>(up[(static_cast<size_t>(e) * ff + r) * hidden + i]) * xt[i];
        }
        g[r] = static_cast<float>(sg), u[r] = static_cast<float>(su);
      }
      expert_activation_row(g.data(), u.data(), ff, m, a.data());
      for (int o = 0; o < hidden; o++) {
        double s = biases ? down_b[static_cast<size_t>(e) * hidden + o] : 0;
        for (int r = 0; r < ff; r++) s += static_cast<double>(down[(static_cast<size_t>(e) * hidden + o) * ff + r]) * a[r];
        y[o] += weight * s;
      }
    }
    for (int o = 0; o < hidden; o++) {
      const double want = residual[static_cast<size_t>(t) * hidden + o] + y[o];
      worst = std::max(worst, std::fabs(out[static_cast<size_t>(t) * hidden + o] - want));
      scale = std::max(scale, std::fabs(y[o]));
    }
  }
  // F32: summation order only. Q8_0: the activations are rounded to int8 blocks as well.
  const double tolerance = (dtype == DType::F32 ? 1e-4 : 2e-2) * std::max(1.0, scale);
  CHECK_MSG(worst <= tolerance, dtype_name(dtype) << " n=" << n << " worst " << worst << " (outputs up to " << scale << ")");
  free_moe_layer(cpu.get(), layer);
}

}  // namespace

RUNNER_TEST(moe, expert_ffn_matches_reference) {
  MoeConfig q = qwen3moe_like(8, 2);
  q.expert_ff = 64;
  for (DType dtype : {DType::F32, DType::Q8_0})
    for (int n : {1, 3, 37}) check_expert_ffn(dtype, q, false, n, 11 + n);
  // A top-8-of-16 router over a prefill-sized batch: every expert runs over many tokens.
  MoeConfig wide = qwen3moe_like(16, 8);
  wide.expert_ff = 96;
  check_expert_ffn(DType::Q8_0, wide, false, 200, 5);
  // gpt-oss's pieces: top-4 then softmax, biases everywhere, the clamped SwiGLU.
  MoeConfig oss;
  oss.experts = 8;
  oss.experts_used = 4;
  oss.expert_ff = 64;
  oss.gating = ExpertGating::TopKThenSoftmax;
  oss.activation = ExpertActivation::SwiGLUClamped;
  for (DType dtype : {DType::F32, DType::Q8_0}) check_expert_ffn(dtype, oss, true, 9, 3);
}

RUNNER_TEST(moe, linear_jobs_equal_one_linear_at_a_time) {
  // The CPU backend's decode-sized jobs share one parallel region: bit for bit the same outputs.
  std::unique_ptr<Backend> cpu(make_cpu_backend(2));
  FakeWeights w;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 0.2f);
  std::vector<Matrix*> matrices;
  std::vector<std::vector<float>> inputs, together, alone;
  const int cols = 96;
  const int rows_of[] = {40, 7, 64, 33};
  const int n_of[] = {1, 3, 16, 2};
  for (int j = 0; j < 4; j++) {
    std::vector<float> values(static_cast<size_t>(rows_of[j]) * cols);
    for (float& v : values) v = normal(rng);
    w.add("m" + std::to_string(j), {rows_of[j], cols}, values, DType::Q8_0);
    matrices.push_back(cpu->matrix(w.get("m" + std::to_string(j), {rows_of[j], cols}).data, DType::Q8_0, rows_of[j], cols));
    inputs.emplace_back(static_cast<size_t>(n_of[j]) * cols);
    for (float& v : inputs.back()) v = normal(rng) * 5;
    together.emplace_back(static_cast<size_t>(n_of[j]) * rows_of[j]);
    alone.emplace_back(static_cast<size_t>(n_of[j]) * rows_of[j]);
  }
  std::vector<Backend::LinearJob> jobs;
  for (int j = 0; j < 4; j++) jobs.push_back({inputs[j].data(), n_of[j], matrices[j], nullptr, together[j].data()});
  cpu->linear_jobs(jobs);
  for (int j = 0; j < 4; j++) {
    cpu->linear(inputs[j].data(), n_of[j], matrices[j], nullptr, alone[j].data());
    CHECK_MSG(together[j] == alone[j], "job " << j);
    cpu->free_matrix(matrices[j]);
  }
}
