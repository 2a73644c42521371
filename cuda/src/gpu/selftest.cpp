// CUDA backend self-test (see selftest.h). Host references accumulate in double.
#include "gpu/selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend.h"

namespace ctxr {
namespace {

using Vec = std::vector<float>;
using IVec = std::vector<int32_t>;

struct Ctx {
  Backend* b;
  std::mt19937 rng{12345};
  int failures = 0;

  Vec rand(size_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  float* up(const Vec& v) {
    auto* p = static_cast<float*>(b->alloc(v.size() * 4));
    b->to_device(p, v.data(), v.size() * 4);
    return p;
  }
  int32_t* up(const IVec& v) {
    auto* p = static_cast<int32_t*>(b->alloc(std::max<size_t>(1, v.size()) * 4));
    if (!v.empty()) b->to_device(p, v.data(), v.size() * 4);
    return p;
  }
  Vec down(const float* p, size_t n) {
    Vec v(n);
    b->to_host(v.data(), p, n * 4);
    return v;
  }
  // Max |a-b| relative to max(1, max|ref|).
  bool check(const std::string& what, const Vec& got, const std::vector<double>& ref, double tol) {
    double err = 0, mag = 1;
    size_t at = 0;
    bool nan = false;
    for (size_t i = 0; i < ref.size(); i++) {
      if (!std::isfinite(got[i])) nan = true;
      mag = std::max(mag, std::fabs(ref[i]));
      const double e = std::fabs(got[i] - ref[i]);
      if (e > err) err = e, at = i;
    }
    const double rel = err / mag;
    const bool ok = !nan && rel <= tol && got.size() == ref.size();
    std::fprintf(stderr, "%s %-58s max err %.3g (rel %.3g, tol %.1g)%s\n", ok ? "ok  " : "FAIL", what.c_str(), err,
                 rel, tol, nan ? " non-finite output" : "");
    if (!ok && !ref.empty())
      std::fprintf(stderr, "     at %zu: got %.9g want %.9g\n", at, got[at], ref[at]);
    if (!ok) failures++;
    return ok;
  }
};

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_f16(float f) {  // normal range only (test data is in [-2, 2]); round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffffu;
  if ((u & 0x7fffffffu) == 0 || exp <= 0) return static_cast<uint16_t>(sign);  // tiny -> ±0
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(h);
}
float from_f16(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24) : std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return (h & 0x8000) ? -v : v;
}
// Round-trips a value through the dtype.
float round_to(DType d, float x) {
  return d == DType::F32 ? x : d == DType::F16 ? from_f16(to_f16(x)) : from_bf16(to_bf16(x));
}
// Raw payload of `w` in dtype d, and the values it holds.
std::vector<uint8_t> encode(DType d, Vec& w) {
  std::vector<uint8_t> raw(w.size() * (d == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < w.size(); i++) {
    if (d == DType::F32) {
      std::memcpy(&raw[i * 4], &w[i], 4);
    } else {
      const uint16_t h = d == DType::F16 ? to_f16(w[i]) : to_bf16(w[i]);
      std::memcpy(&raw[i * 2], &h, 2);
      w[i] = d == DType::F16 ? from_f16(h) : from_bf16(h);
    }
  }
  return raw;
}
const char* dname(DType d) { return d == DType::F32 ? "f32" : d == DType::F16 ? "f16" : "bf16"; }

// ---- linear / embed -------------------------------------------------------------------------
void test_linear(Ctx& c, const char* path) {
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    for (auto [n, rows, cols] : {std::tuple{1, 96, 64}, std::tuple{5, 100, 130}, std::tuple{67, 260, 512}}) {
      Vec w = c.rand(static_cast<size_t>(rows) * cols);
      auto raw = encode(d, w);
      Matrix* m = c.b->matrix(raw.data(), d, rows, cols);
      Vec x = c.rand(static_cast<size_t>(n) * cols), bias = c.rand(rows);
      float* dx = c.up(x);
      float* db = c.up(bias);
      float* dy = static_cast<float*>(c.b->alloc(static_cast<size_t>(n) * rows * 4));
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        c.b->linear(dx, n, m, with_bias ? db : nullptr, dy);
        Vec y = c.down(dy, static_cast<size_t>(n) * rows);
        // Reference with f32 activations and with activations rounded to the weight dtype
        // (the cuBLAS half path); the output must match one of them.
        std::vector<double> ref(y.size()), ref_r(y.size());
        for (int i = 0; i < n; i++)
          for (int j = 0; j < rows; j++) {
            double s = 0, sr = 0;
            for (int k = 0; k < cols; k++) {
              const double wv = w[static_cast<size_t>(j) * cols + k];
              s += static_cast<double>(x[static_cast<size_t>(i) * cols + k]) * wv;
              sr += static_cast<double>(round_to(d, x[static_cast<size_t>(i) * cols + k])) * wv;
            }
            const double bb = with_bias ? bias[j] : 0;
            ref[static_cast<size_t>(i) * rows + j] = s + bb;
            ref_r[static_cast<size_t>(i) * rows + j] = sr + bb;
          }
        double e1 = 0, e2 = 0;
        for (size_t i = 0; i < y.size(); i++) {
          e1 = std::max(e1, std::fabs(y[i] - ref[i]));
          e2 = std::max(e2, std::fabs(y[i] - ref_r[i]));
        }
        const std::string what = std::string("linear ") + path + " " + dname(d) + " n=" + std::to_string(n) + " " +
                                 std::to_string(rows) + "x" + std::to_string(cols) + (with_bias ? " +bias" : "");
        c.check(what, y, e1 <= e2 ? ref : ref_r, 2e-5 * std::sqrt(static_cast<double>(cols)));
      }
      c.b->release(dx);
      c.b->release(db);
      c.b->release(dy);
      c.b->free_matrix(m);
    }
  }
}

void test_embed(Ctx& c) {
  const int vocab = 50, hidden = 72;
  for (DType d : {DType::F32, DType::F16, DType::BF16}) {
    Vec w = c.rand(static_cast<size_t>(vocab) * hidden);
    auto raw = encode(d, w);
    Matrix* m = c.b->matrix(raw.data(), d, vocab, hidden);
    IVec tok = {0, 49, 7, 7, 23};
    int32_t* dt = c.up(tok);
    float* out = static_cast<float*>(c.b->alloc(tok.size() * hidden * 4));
    c.b->embed(m, dt, static_cast<int>(tok.size()), out);
    Vec got = c.down(out, tok.size() * hidden);
    std::vector<double> ref(got.size());
    for (size_t i = 0; i < tok.size(); i++)
      for (int j = 0; j < hidden; j++) ref[i * hidden + j] = w[static_cast<size_t>(tok[i]) * hidden + j];
    c.check(std::string("embed ") + dname(d), got, ref, 0);
    c.b->release(dt);
    c.b->release(out);
    c.b->free_matrix(m);
  }
}

// ---- small ops ------------------------------------------------------------------------------
void test_small_ops(Ctx& c) {
  {  // rms_norm, in place
    const int n = 7, d = 2048;
    Vec x = c.rand(static_cast<size_t>(n) * d, -3, 3), w = c.rand(d);
    std::vector<uint16_t> wb(d);
    for (int j = 0; j < d; j++) {
      wb[j] = to_bf16(w[j]);
      w[j] = from_bf16(wb[j]);
    }
    float* dw = c.b->vector(wb.data(), DType::BF16, d);  // also tests vector() widening
    float* dx = c.up(x);
    c.b->rms_norm(dx, dw, 1e-5f, n, d, dx);
    Vec got = c.down(dx, x.size());
    std::vector<double> ref(x.size());
    for (int i = 0; i < n; i++) {
      double ss = 0;
      for (int j = 0; j < d; j++) ss += static_cast<double>(x[i * d + j]) * x[i * d + j];
      const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
      for (int j = 0; j < d; j++) ref[i * d + j] = x[i * d + j] * inv * w[j];
    }
    c.check("rms_norm (in place, bf16 weight via vector())", got, ref, 2e-6);
    c.b->release(dw);
    c.b->release(dx);
  }
  {  // rms_norm_heads: 2 of 3 heads of 96 (not a multiple of 32) in strided rows, in place
    const int n = 5, heads = 2, hd = 96, stride = 3 * hd;
    Vec x = c.rand(static_cast<size_t>(n) * stride, -3, 3), w = c.rand(hd);
    float* dx = c.up(x);
    float* dw = c.up(w);
    c.b->rms_norm_heads(dx, stride, n, heads, hd, dw, 1e-6f);
    Vec got = c.down(dx, x.size());
    std::vector<double> ref(x.begin(), x.end());
    for (int i = 0; i < n; i++)
      for (int h = 0; h < heads; h++) {
        const size_t o = static_cast<size_t>(i) * stride + static_cast<size_t>(h) * hd;
        double ss = 0;
        for (int j = 0; j < hd; j++) ss += static_cast<double>(x[o + j]) * x[o + j];
        const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
        for (int j = 0; j < hd; j++) ref[o + j] = x[o + j] * inv * w[j];
      }
    c.check("rms_norm_heads (strided rows, third head untouched)", got, ref, 2e-6);
    c.b->release(dx);
    c.b->release(dw);
  }
  {  // rope on a strided row, then undo
    const int n = 6, heads = 3, hd = 128, stride = 5 * hd;
    Vec x = c.rand(static_cast<size_t>(n) * stride);
    IVec pos = {0, 1, 17, 4095, 100000, 131071};
    Vec inv(hd / 2);
    for (int j = 0; j < hd / 2; j++) inv[j] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * j / hd));
    float* dx = c.up(x);
    float* di = c.up(inv);
    int32_t* dp = c.up(pos);
    c.b->rope(dx, stride, n, heads, RopeShape{hd, hd}, dp, di, 1);
    Vec got = c.down(dx, x.size());
    std::vector<double> ref(x.begin(), x.end());
    for (int i = 0; i < n; i++)
      for (int h = 0; h < heads; h++)
        for (int j = 0; j < hd / 2; j++) {
          const double a = static_cast<double>(pos[i]) * inv[j];
          const size_t o = static_cast<size_t>(i) * stride + h * hd + j;
          ref[o] = x[o] * std::cos(a) - x[o + hd / 2] * std::sin(a);
          ref[o + hd / 2] = x[o + hd / 2] * std::cos(a) + x[o] * std::sin(a);
        }
    c.check("rope (positions up to 131071, strided rows)", got, ref, 2e-6);
    c.b->rope(dx, stride, n, heads, RopeShape{hd, hd}, dp, di, -1);
    got = c.down(dx, x.size());
    c.check("rope sign -1 undoes it", got, std::vector<double>(x.begin(), x.end()), 4e-6);
    // Partial rotary (Phi-4-mini: 96 of 128) with LongRoPE's scale on cos and sin.
    const int rot = 96;
    const float scale = 1.19f;
    c.b->rope(dx, stride, n, heads, RopeShape{hd, rot, scale}, dp, di, 1);
    got = c.down(dx, x.size());
    ref.assign(x.begin(), x.end());
    for (int i = 0; i < n; i++)
      for (int h = 0; h < heads; h++)
        for (int j = 0; j < rot / 2; j++) {
          const double a = static_cast<double>(pos[i]) * inv[j];
          const size_t o = static_cast<size_t>(i) * stride + h * hd + j;
          ref[o] = scale * (x[o] * std::cos(a) - x[o + rot / 2] * std::sin(a));
          ref[o + rot / 2] = scale * (x[o + rot / 2] * std::cos(a) + x[o] * std::sin(a));
        }
    c.check("rope partial rotary 96 of 128, scale 1.19", got, ref, 4e-6);
    c.b->rope(dx, stride, n, heads, RopeShape{hd, rot, scale}, dp, di, -1);
    got = c.down(dx, x.size());
    c.check("partial rope sign -1 undoes it", got, std::vector<double>(x.begin(), x.end()), 6e-6);
    c.b->release(dx);
    c.b->release(di);
    c.b->release(dp);
  }
  {  // silu_mul, add, gather_rows
    const int n = 5, ff = 333;
    Vec x = c.rand(static_cast<size_t>(n) * 2 * ff, -8, 8);
    float* dx = c.up(x);
    float* dout = static_cast<float*>(c.b->alloc(static_cast<size_t>(n) * ff * 4));
    c.b->silu_mul(dx, n, ff, dout);
    Vec got = c.down(dout, static_cast<size_t>(n) * ff);
    std::vector<double> ref(got.size());
    for (int i = 0; i < n; i++)
      for (int j = 0; j < ff; j++) {
        const double g = x[i * 2 * ff + j], u = x[i * 2 * ff + ff + j];
        ref[i * ff + j] = g / (1 + std::exp(-g)) * u;
      }
    c.check("silu_mul", got, ref, 1e-6);
    Vec y = c.rand(got.size());
    float* dy = c.up(y);
    c.b->add(dout, dy, got.size());
    Vec sum = c.down(dout, got.size());
    for (size_t i = 0; i < ref.size(); i++) ref[i] = static_cast<double>(got[i]) + y[i];
    c.check("add", sum, ref, 1e-7);
    IVec rows = {4, 0, 4, 2};
    int32_t* dr = c.up(rows);
    float* dg = static_cast<float*>(c.b->alloc(rows.size() * ff * 4));
    c.b->gather_rows(dout, dr, static_cast<int>(rows.size()), ff, dg);
    Vec g = c.down(dg, rows.size() * ff);
    std::vector<double> gref(g.size());
    for (size_t i = 0; i < rows.size(); i++)
      for (int j = 0; j < ff; j++) gref[i * ff + j] = sum[rows[i] * ff + j];
    c.check("gather_rows", g, gref, 0);
    for (void* p : {static_cast<void*>(dx), static_cast<void*>(dout), static_cast<void*>(dy),
                    static_cast<void*>(dr), static_cast<void*>(dg)})
      c.b->release(p);
  }
}

// ---- KV cache and attention -----------------------------------------------------------------
struct Seq {
  IVec table;  // block ids
  int len;     // entries written
};

struct AttnCase {
  std::string name;
  int heads, kv_heads, hd;
  // per token: sequence and visible length
  std::vector<int> tok_seq, tok_len;
  bool stats;
};

void run_attention_case(Ctx& c, const AttnCase& ac, int num_blocks, int block_size, std::vector<Seq> seqs) {
  const int layers = 2, layer = 1;
  const int kvw = ac.kv_heads * ac.hd;
  c.b->kv_init(KvGeometry{layers, num_blocks, block_size, kvw});
  // Host copy of the cache for layer 1, written through kv_write.
  const size_t slots_total = static_cast<size_t>(num_blocks) * block_size;
  Vec hk(slots_total * kvw, 0.f), hv(slots_total * kvw, 0.f);
  for (auto& s : seqs) {
    IVec slots(s.len);
    for (int i = 0; i < s.len; i++) slots[i] = s.table[i / block_size] * block_size + i % block_size;
    const int stride = kvw + 8;  // rows wider than kv_width, as in a fused projection
    Vec k = c.rand(static_cast<size_t>(s.len) * stride), v = c.rand(static_cast<size_t>(s.len) * stride);
    for (int i = 0; i < s.len; i++)
      for (int j = 0; j < kvw; j++) {
        hk[static_cast<size_t>(slots[i]) * kvw + j] = k[static_cast<size_t>(i) * stride + j];
        hv[static_cast<size_t>(slots[i]) * kvw + j] = v[static_cast<size_t>(i) * stride + j];
      }
    float* dk = c.up(k);
    float* dv = c.up(v);
    int32_t* ds = c.up(slots);
    c.b->kv_write(layer, dk, dv, stride, ds, s.len);
    c.b->release(dk);
    c.b->release(dv);
    c.b->release(ds);
  }
  const int n = static_cast<int>(ac.tok_seq.size());
  int max_blocks = 0;
  for (auto& s : seqs) max_blocks = std::max<int>(max_blocks, static_cast<int>(s.table.size()));
  IVec tables(seqs.size() * max_blocks, -1);
  for (size_t s = 0; s < seqs.size(); s++)
    std::copy(seqs[s].table.begin(), seqs[s].table.end(), tables.begin() + s * max_blocks);
  const int q_stride = (ac.heads + 2 * ac.kv_heads) * ac.hd;
  Vec q = c.rand(static_cast<size_t>(n) * q_stride, -2, 2);
  IVec tseq(ac.tok_seq.begin(), ac.tok_seq.end()), tlen(ac.tok_len.begin(), ac.tok_len.end());
  const int max_len = *std::max_element(tlen.begin(), tlen.end());
  IVec stat_row(n, -1);
  int n_stat = 0;
  if (ac.stats)
    for (int t = 0; t < n; t++)
      if (t % 3 != 1) stat_row[t] = n_stat++;

  AttentionBatch bt{};
  bt.n_tokens = n;
  bt.heads = ac.heads;
  bt.kv_heads = ac.kv_heads;
  bt.head_dim = ac.hd;
  bt.scale = 1.0f / std::sqrt(static_cast<float>(ac.hd));
  int32_t* d_tables = c.up(tables);
  int32_t* d_seq = c.up(tseq);
  int32_t* d_len = c.up(tlen);
  int32_t* d_stat = c.up(stat_row);
  float* d_stats = nullptr;
  bt.block_tables = d_tables;
  bt.max_blocks = max_blocks;
  bt.token_seq = d_seq;
  bt.token_len = d_len;
  bt.max_len = max_len;
  if (ac.stats) {
    Vec junk(static_cast<size_t>(n_stat) * max_len, 12345.f);  // the zero fill must overwrite it
    d_stats = c.up(junk);
    bt.stat_row = d_stat;
    bt.stats = d_stats;
  }
  float* dq = c.up(q);
  float* dout = static_cast<float*>(c.b->alloc(static_cast<size_t>(n) * ac.heads * ac.hd * 4));
  c.b->attention(layer, dq, q_stride, bt, dout);
  Vec got = c.down(dout, static_cast<size_t>(n) * ac.heads * ac.hd);

  const int G = ac.heads / ac.kv_heads;
  std::vector<double> ref(got.size()), sref(static_cast<size_t>(n_stat) * max_len, 0.0);
  for (int t = 0; t < n; t++) {
    const Seq& s = seqs[tseq[t]];
    const int len = tlen[t];
    for (int h = 0; h < ac.heads; h++) {
      const int kh = h / G;
      std::vector<double> sc(len);
      double mx = -1e300;
      for (int e = 0; e < len; e++) {
        const size_t slot = static_cast<size_t>(s.table[e / block_size]) * block_size + e % block_size;
        double dot = 0;
        for (int d = 0; d < ac.hd; d++)
          dot += static_cast<double>(q[static_cast<size_t>(t) * q_stride + h * ac.hd + d]) * hk[slot * kvw + kh * ac.hd + d];
        sc[e] = dot * bt.scale;
        mx = std::max(mx, sc[e]);
      }
      double sum = 0;
      for (auto& v : sc) sum += (v = std::exp(v - mx));
      for (int d = 0; d < ac.hd; d++) {
        double o = 0;
        for (int e = 0; e < len; e++) {
          const size_t slot = static_cast<size_t>(s.table[e / block_size]) * block_size + e % block_size;
          o += sc[e] * hv[slot * kvw + kh * ac.hd + d];
        }
        ref[(static_cast<size_t>(t) * ac.heads + h) * ac.hd + d] = o / sum;
      }
      if (stat_row[t] >= 0)
        for (int e = 0; e < len; e++) sref[static_cast<size_t>(stat_row[t]) * max_len + e] += sc[e] / sum / ac.heads;
    }
  }
  c.check("attention " + ac.name, got, ref, 2e-5);
  if (ac.stats) c.check("attention stats " + ac.name, c.down(d_stats, sref.size()), sref, 2e-6);
  for (void* p : {static_cast<void*>(d_tables), static_cast<void*>(d_seq), static_cast<void*>(d_len),
                  static_cast<void*>(d_stat), static_cast<void*>(d_stats), static_cast<void*>(dq),
                  static_cast<void*>(dout)})
    c.b->release(p);
}

void test_attention(Ctx& c) {
  const int block_size = 16, num_blocks = 600;
  std::vector<int> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), c.rng);
  auto take = [&](int& next, int entries) {
    IVec t;
    for (int i = 0; i < (entries + block_size - 1) / block_size; i++) t.push_back(perm[next++]);
    return t;
  };
  struct Shape {
    int heads, kv, hd;
  };
  for (Shape sh : {Shape{8, 2, 64}, Shape{4, 4, 128}, Shape{14, 2, 64}, Shape{32, 8, 128}, Shape{6, 2, 80},
                   Shape{8, 1, 64}}) {
    const std::string tag = std::to_string(sh.heads) + "/" + std::to_string(sh.kv) + "/d" + std::to_string(sh.hd);
    {  // prefill of one sequence: tiled path (head_dim 64/128)
      int next = 0;
      std::vector<Seq> seqs = {{take(next, 300), 300}};
      AttnCase ac{"prefill 300 " + tag, sh.heads, sh.kv, sh.hd, {}, {}, true};
      for (int i = 0; i < 300; i++) ac.tok_seq.push_back(0), ac.tok_len.push_back(i + 1);
      run_attention_case(c, ac, num_blocks, block_size, seqs);
    }
    {  // decode of several sequences: per-token path with splits
      int next = 0;
      std::vector<int> lens = {1, 17, 500, 1000, 3000};
      std::vector<Seq> seqs;
      AttnCase ac{"decode x5 " + tag, sh.heads, sh.kv, sh.hd, {}, {}, true};
      for (size_t s = 0; s < lens.size(); s++) {
        seqs.push_back({take(next, lens[s]), lens[s]});
        ac.tok_seq.push_back(static_cast<int>(s));
        ac.tok_len.push_back(lens[s]);
      }
      run_attention_case(c, ac, num_blocks, block_size, seqs);
    }
    {  // mixed: recompute of 70 tokens at indices 30..99 of A, a decode of B, 3 tokens of C
      int next = 0;
      std::vector<Seq> seqs = {{take(next, 100), 100}, {take(next, 257), 257}, {take(next, 40), 40}};
      AttnCase ac{"mixed " + tag, sh.heads, sh.kv, sh.hd, {}, {}, false};
      for (int i = 30; i < 100; i++) ac.tok_seq.push_back(0), ac.tok_len.push_back(i + 1);
      ac.tok_seq.push_back(1), ac.tok_len.push_back(257);
      for (int i = 37; i < 40; i++) ac.tok_seq.push_back(2), ac.tok_len.push_back(i + 1);
      run_attention_case(c, ac, num_blocks, block_size, seqs);
    }
  }
}

void test_kv_copy(Ctx& c) {
  const int layers = 3, blocks = 10, bs = 16, kvw = 64;
  c.b->kv_init(KvGeometry{layers, blocks, bs, kvw});
  const size_t per_layer = static_cast<size_t>(blocks) * bs;
  std::vector<Vec> hk(layers), hv(layers);
  IVec all(per_layer);
  std::iota(all.begin(), all.end(), 0);
  int32_t* dall = c.up(all);
  for (int l = 0; l < layers; l++) {
    hk[l] = c.rand(per_layer * kvw);
    hv[l] = c.rand(per_layer * kvw);
    float* dk = c.up(hk[l]);
    float* dv = c.up(hv[l]);
    c.b->kv_write(l, dk, dv, kvw, dall, static_cast<int>(per_layer));
    c.b->release(dk);
    c.b->release(dv);
  }
  auto copy_host = [&](int s, int d) {
    for (int l = 0; l < layers; l++)
      for (size_t j = 0; j < static_cast<size_t>(bs) * kvw; j++) {
        hk[l][d * bs * kvw + j] = hk[l][s * bs * kvw + j];
        hv[l][d * bs * kvw + j] = hv[l][s * bs * kvw + j];
      }
  };
  auto verify = [&](const std::string& what) {
    float* k = static_cast<float*>(c.b->alloc(per_layer * kvw * 4));
    float* v = static_cast<float*>(c.b->alloc(per_layer * kvw * 4));
    for (int l = 0; l < layers; l++) {
      c.b->kv_read(l, dall, static_cast<int>(per_layer), k, v);
      c.check(what + " K layer " + std::to_string(l), c.down(k, per_layer * kvw),
              std::vector<double>(hk[l].begin(), hk[l].end()), 0);
      c.check(what + " V layer " + std::to_string(l), c.down(v, per_layer * kvw),
              std::vector<double>(hv[l].begin(), hv[l].end()), 0);
    }
    c.b->release(k);
    c.b->release(v);
  };
  verify("kv_write/kv_read");
  IVec s1 = {0, 3, 5}, d1 = {7, 8, 9};  // independent pairs: one kernel
  c.b->kv_copy_blocks(s1.data(), d1.data(), 3);
  for (int i = 0; i < 3; i++) copy_host(s1[i], d1[i]);
  verify("kv_copy_blocks");
  IVec s2 = {1, 2}, d2 = {2, 4};  // chained: block 2 written then read, sequential meaning
  c.b->kv_copy_blocks(s2.data(), d2.data(), 2);
  for (int i = 0; i < 2; i++) copy_host(s2[i], d2[i]);
  verify("kv_copy_blocks chained");
  c.b->release(dall);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(Ctx& c) {
  // Prefill attention: 4096 tokens of one sequence, ~1B-model shapes.
  struct Shape {
    int heads, kv, hd;
  };
  for (Shape sh : {Shape{32, 8, 64}, Shape{32, 8, 128}}) {
    const int n = 4096, bs = 16, nb = n / bs, kvw = sh.kv * sh.hd;
    c.b->kv_init(KvGeometry{1, nb, bs, kvw});
    IVec table(nb);
    std::iota(table.begin(), table.end(), 0);
    IVec seq(n, 0), len(n), slots(n);
    for (int i = 0; i < n; i++) len[i] = i + 1, slots[i] = i;
    Vec kv = c.rand(static_cast<size_t>(n) * kvw);
    float* dkv = c.up(kv);
    int32_t* dslots = c.up(slots);
    c.b->kv_write(0, dkv, dkv, kvw, dslots, n);
    const int q_stride = (sh.heads + 2 * sh.kv) * sh.hd;
    float* dq = c.up(c.rand(static_cast<size_t>(n) * q_stride));
    float* dout = static_cast<float*>(c.b->alloc(static_cast<size_t>(n) * sh.heads * sh.hd * 4));
    int32_t* dt = c.up(table);
    int32_t* ds = c.up(seq);
    int32_t* dl = c.up(len);
    AttentionBatch bt{};
    bt.n_tokens = n;
    bt.heads = sh.heads;
    bt.kv_heads = sh.kv;
    bt.head_dim = sh.hd;
    bt.scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
    bt.block_tables = dt;
    bt.max_blocks = nb;
    bt.token_seq = ds;
    bt.token_len = dl;
    bt.max_len = n;
    float sink;
    c.b->attention(0, dq, q_stride, bt, dout);
    c.b->to_host(&sink, dout, 4);
    const int reps = 5;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; r++) c.b->attention(0, dq, q_stride, bt, dout);
    c.b->to_host(&sink, dout, 4);
    const double s = seconds_since(t0) / reps;
    const double flop = 4.0 * sh.heads * sh.hd * (static_cast<double>(n) * (n + 1) / 2);
    std::fprintf(stderr, "bench attention prefill %d tok, %d/%d heads, d%d: %.2f ms (%.1f TFLOP/s)\n", n, sh.heads,
                 sh.kv, sh.hd, s * 1e3, flop / s / 1e12);
    // Decode: 1 token and 64 tokens attending to 4096 entries.
    for (int batch : {1, 64}) {
      IVec blen(batch, n);
      int32_t* dbl = c.up(blen);
      AttentionBatch b2 = bt;
      b2.n_tokens = batch;
      b2.token_len = dbl;
      // Tokens of one sequence would take the tiled path: every token gets its own sequence
      // (all with the same table, so the K/V reads partly hit L2).
      IVec tables2(static_cast<size_t>(batch) * nb);
      for (int i = 0; i < batch; i++) std::copy(table.begin(), table.end(), tables2.begin() + static_cast<size_t>(i) * nb);
      IVec seq2(batch);
      std::iota(seq2.begin(), seq2.end(), 0);
      int32_t* dt2 = c.up(tables2);
      int32_t* ds2 = c.up(seq2);
      b2.block_tables = dt2;
      b2.token_seq = ds2;
      c.b->attention(0, dq, q_stride, b2, dout);
      c.b->to_host(&sink, dout, 4);
      auto t1 = std::chrono::steady_clock::now();
      for (int r = 0; r < 20; r++) c.b->attention(0, dq, q_stride, b2, dout);
      c.b->to_host(&sink, dout, 4);
      const double s2 = seconds_since(t1) / 20;
      const double bytes = 2.0 * batch * n * kvw * 4;
      std::fprintf(stderr, "bench attention decode x%d over %d entries, d%d: %.3f ms (%.0f GB/s of K/V)\n", batch, n,
                   sh.hd, s2 * 1e3, bytes / s2 / 1e9);
      for (void* p : {static_cast<void*>(dbl), static_cast<void*>(dt2),
                      static_cast<void*>(ds2)})
        c.b->release(p);
    }
    for (void* p : {static_cast<void*>(dkv), static_cast<void*>(dslots), static_cast<void*>(dq),
                    static_cast<void*>(dout), static_cast<void*>(dt), static_cast<void*>(ds), static_cast<void*>(dl)})
      c.b->release(p);
  }
  // GEMMs of a ~1B model's prefill.
  for (DType d : {DType::BF16, DType::F32}) {
    for (auto [n, rows, cols] : {std::tuple{4096, 6144, 2048}, std::tuple{4096, 2048, 8192}, std::tuple{1, 16384, 2048}}) {
      Vec w = c.rand(static_cast<size_t>(rows) * cols, -0.05f, 0.05f);
      auto raw = encode(d, w);
      Matrix* m = c.b->matrix(raw.data(), d, rows, cols);
      float* dx = c.up(c.rand(static_cast<size_t>(n) * cols));
      float* dy = static_cast<float*>(c.b->alloc(static_cast<size_t>(n) * rows * 4));
      float sink;
      c.b->linear(dx, n, m, nullptr, dy);
      c.b->to_host(&sink, dy, 4);
      const int reps = n == 1 ? 50 : 5;
      auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; r++) c.b->linear(dx, n, m, nullptr, dy);
      c.b->to_host(&sink, dy, 4);
      const double s = seconds_since(t0) / reps;
      std::fprintf(stderr, "bench linear %s %dx%dx%d: %.3f ms (%.1f TFLOP/s)\n", dname(d), n, rows, cols, s * 1e3,
                   2.0 * n * rows * cols / s / 1e12);
      c.b->release(dx);
      c.b->release(dy);
      c.b->free_matrix(m);
    }
  }
}

}  // namespace

int cuda_selftest(int device, bool run_bench, const char* only) {
  int failures = 0;
  auto want = [&](const char* group) { return !only || std::strstr(group, only) != nullptr; };
  try {
    std::unique_ptr<Backend> b(make_cuda_backend(device));
    std::fprintf(stderr, "backend %s\n", b->name());
    Ctx c{b.get()};
    if (want("linear")) test_linear(c, "(default path)");
    if (want("embed")) test_embed(c);
    if (want("ops")) test_small_ops(c);
    if (want("kv")) test_kv_copy(c);
    if (want("attention")) test_attention(c);
    failures += c.failures;
    if (want("builtin")) {
      const char* old = std::getenv("CTXR_NO_CUBLAS");
      const std::string saved = old ? old : "";
      setenv("CTXR_NO_CUBLAS", "1", 1);
      std::unique_ptr<Backend> fb(make_cuda_backend(device));
      if (old) setenv("CTXR_NO_CUBLAS", saved.c_str(), 1);
      else unsetenv("CTXR_NO_CUBLAS");
      Ctx fc{fb.get()};
      test_linear(fc, "(built-in GEMM)");
      failures += fc.failures;
    }
    if (run_bench) bench(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "%s: %d check(s) failed\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}

}  // namespace ctxr
