// CPU paged attention (cpu/attention_cpu.cpp) against a double-precision reference: random
// paged layouts (shuffled block tables, ragged lengths), GQA groups 1/3/4, head_dim 16/64/128 and
// odd ones, prefill tiles with partial tiles, chunked prefill, decode, mixed batches, recomputed
// scattered tokens, statistics on and off, 1 and 2 threads, and the Backend wiring.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend.h"
#include "cpu/attention_cpu.h"
#include "halfs.h"
#include "runner_test.h"

namespace {

// New tokens of one sequence: the sequence indices they sit at (any order).
struct SeqSpec {
  int len;                   // entries the sequence has (max index + 1 at least)
  std::vector<int> indices;  // new tokens, in batch order
};

struct Layout {
  int heads, kv_heads, hd, block_size, num_blocks;
  int q_stride;
  std::vector<SeqSpec> seqs;
  std::vector<float> k, v;  // [num_blocks*block_size][kv_width]
  std::vector<int32_t> tables, token_seq, token_len, stat_row;
  int max_blocks = 1, max_len = 0, n = 0, stat_rows = 0;
  int window = 0;  // sliding window (AttentionBatch::window); 0: none
  std::vector<float> sinks;  // per-head sink logits (AttentionBatch::sinks); empty: none
  int first_entry(int t) const { return window > 0 ? std::max(0, token_len[t] - window) : 0; }
  std::vector<float> q;  // [n][q_stride]
  int kv_width() const { return kv_heads * hd; }
};

// Builds caches, shuffled block tables and queries. q_gain > 1 makes the softmax peaky.
Layout make_layout(int heads, int kv_heads, int hd, int block_size, std::vector<SeqSpec> seqs, bool with_stats, uint32_t seed,
                   float q_gain = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Layout L;
  L.heads = heads;
  L.kv_heads = kv_heads;
  L.hd = hd;
  L.block_size = block_size;
  L.seqs = std::move(seqs);
  int needed = 0;
  for (const auto& s : L.seqs) {
    int blocks = (s.len + block_size - 1) / block_size;
    needed += blocks;
    L.max_blocks = std::max(L.max_blocks, blocks);
  }
  L.num_blocks = needed + 5;  // a few blocks nobody uses
  std::vector<int> ids(L.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  L.tables.assign(L.seqs.size() * L.max_blocks, 0);
  int next = 0;
  for (size_t s = 0; s < L.seqs.size(); s++) {
    int blocks = (L.seqs[s].len + block_size - 1) / block_size;
    for (int b = 0; b < blocks; b++) L.tables[s * L.max_blocks + b] = ids[next++];
  }
  const size_t cache = static_cast<size_t>(L.num_blocks) * block_size * L.kv_width();
  L.k.resize(cache);
  L.v.resize(cache);
  for (auto& x : L.k) x = u(rng);
  for (auto& x : L.v) x = u(rng);
  for (size_t s = 0; s < L.seqs.size(); s++) {
    for (int idx : L.seqs[s].indices) {
      L.token_seq.push_back(static_cast<int32_t>(s));
      L.token_len.push_back(idx + 1);
      L.max_len = std::max(L.max_len, idx + 1);
      L.stat_row.push_back(-1);
    }
  }
  L.n = static_cast<int>(L.token_seq.size());
  if (with_stats) {
    // Every other token gets a statistics row (in reverse order), the rest none.
    for (int t = L.n - 1; t >= 0; t--)
      if ((t + static_cast<int>(seed)) % 2 == 0) L.stat_row[t] = L.stat_rows++;
  }
  L.q_stride = heads * hd + 2 * L.kv_width() + 3;  // like the fused q|k|v rows, plus odd padding
  L.q.resize(static_cast<size_t>(L.n) * L.q_stride);
  for (auto& x : L.q) x = q_gain * u(rng);
  return L;
}

ctxr::AttentionBatch batch_of(const Layout& L, std::vector<float>* stats) {
  ctxr::AttentionBatch b{};
  b.n_tokens = L.n;
  b.heads = L.heads;
  b.kv_heads = L.kv_heads;
  b.head_dim = L.hd;
  b.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.hd)));
  b.block_tables = L.tables.data();
  b.max_blocks = L.max_blocks;
  b.token_seq = L.token_seq.data();
  b.token_len = L.token_len.data();
  b.max_len = L.max_len;
  b.window = L.window;
  b.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
  if (stats) {
    stats->assign(static_cast<size_t>(std::max(1, L.stat_rows)) * L.max_len, std::numeric_limits<float>::quiet_NaN());
    b.stat_row = L.stat_row.data();
    b.stats = stats->data();
  }
  return b;
}

// Double-precision reference: out [n][heads*hd], stats [stat_rows][max_len].
void reference(const Layout& L, std::vector<double>& out, std::vector<double>& stats) {
  const int group = L.heads / L.kv_heads, w = L.kv_width();
  const double scale = 1.0 / std::sqrt(static_cast<double>(L.hd));
  out.assign(static_cast<size_t>(L.n) * L.heads * L.hd, 0.0);
  stats.assign(static_cast<size_t>(std::max(1, L.stat_rows)) * L.max_len, 0.0);
  std::vector<double> p;
  for (int t = 0; t < L.n; t++) {
    const int len = L.token_len[t], first = L.first_entry(t);
    const int32_t* table = L.tables.data() + static_cast<size_t>(L.token_seq[t]) * L.max_blocks;
    auto slot = [&](int s) { return static_cast<size_t>(table[s / L.block_size]) * L.block_size + s % L.block_size; };
    for (int h = 0; h < L.heads; h++) {
      const float* qh = L.q.data() + static_cast<size_t>(t) * L.q_stride + static_cast<size_t>(h) * L.hd;
      const int off = (h / group) * L.hd;
      p.assign(len, 0.0);
      double best = -INFINITY;
      for (int s = first; s < len; s++) {
        const float* kr = L.k.data() + slot(s) * w + off;
        double dot = 0;
        for (int d = 0; d < L.hd; d++) dot += static_cast<double>(qh[d]) * kr[d];
        p[s] = dot * scale;
        best = std::max(best, p[s]);
      }
      double total = 0;
      for (int s = first; s < len; s++) total += (p[s] = std::exp(p[s] - best));
      if (!L.sinks.empty()) total += std::exp(L.sinks[h] - best);  // an entry without a value
      for (int s = first; s < len; s++) p[s] /= total;
      double* o = out.data() + static_cast<size_t>(t) * L.heads * L.hd + static_cast<size_t>(h) * L.hd;
      for (int s = first; s < len; s++) {
        const float* vr = L.v.data() + slot(s) * w + off;
        for (int d = 0; d < L.hd; d++) o[d] += p[s] * vr[d];
      }
      if (L.stat_row[t] >= 0)
        for (int s = 0; s < len; s++) stats[static_cast<size_t>(L.stat_row[t]) * L.max_len + s] += p[s] / L.heads;
    }
  }
}

void check(const Layout& L, const std::vector<float>& out, const std::vector<float>* stats, const char* what) {
  std::vector<double> ref, ref_stats;
  reference(L, ref, ref_stats);
  const size_t width = static_cast<size_t>(L.heads) * L.hd;
  for (int t = 0; t < L.n; t++) {
    for (size_t c = 0; c < width; c++) {
      const double got = out[t * width + c], want = ref[t * width + c];
      CHECK_MSG(std::fabs(got - want) <= 2e-5 + 2e-5 * std::fabs(want),
                what << ": token " << t << " (len " << L.token_len[t] << ") head " << c / L.hd << " dim " << c % L.hd << ": got " << got
                     << ", want " << want);
    }
  }
  if (!stats) return;
  for (int t = 0; t < L.n; t++) {
    if (L.stat_row[t] < 0) continue;
    const size_t row = static_cast<size_t>(L.stat_row[t]) * L.max_len;
    for (int s = 0; s < L.max_len; s++) {
      const double got = (*stats)[row + s], want = s < L.token_len[t] ? ref_stats[row + s] : 0.0;
      CHECK_MSG(std::fabs(got - want) <= 1e-6, what << ": stats of token " << t << " entry " << s << ": got " << got << ", want " << want);
    }
  }
}

// Runs cpu_attention (NaN-filled output with guards); returns the output.
std::vector<float> run_once(const Layout& L, bool with_stats, int threads, std::vector<float>* stats, const char* what) {
  const size_t size = static_cast<size_t>(L.n) * L.heads * L.hd;
  const float guard = -777.25f;
  std::vector<float> buf(size + 32, guard);
  std::fill(buf.begin() + 16, buf.begin() + 16 + size, std::numeric_limits<float>::quiet_NaN());
  ctxr::AttentionBatch b = batch_of(L, with_stats ? stats : nullptr);
  ctxr::cpu_attention(L.q.data(), L.q_stride, b, L.k.data(), L.v.data(), L.kv_width(), L.block_size, threads, buf.data() + 16);
  for (int i = 0; i < 16; i++) CHECK_MSG(buf[i] == guard && buf[16 + size + i] == guard, what << ": wrote outside out");
  return std::vector<float>(buf.begin() + 16, buf.begin() + 16 + size);
}

// Checks 1 and 2 threads against the reference; the output must be bitwise the same for both
// thread counts and with or without statistics.
void run_and_check(const Layout& L, bool with_stats, const char* what) {
  std::vector<float> stats, none;
  std::vector<float> first = run_once(L, with_stats, 1, &stats, what);
  check(L, first, with_stats ? &stats : nullptr, what);
  std::vector<float> second = run_once(L, with_stats, 2, &stats, what);
  check(L, second, with_stats ? &stats : nullptr, what);
  std::vector<float> other = run_once(L, !with_stats, 2, &none, what);
  for (size_t i = 0; i < first.size(); i++) {
    CHECK_MSG(std::memcmp(&first[i], &second[i], 4) == 0, what << ": 1 and 2 threads differ at " << i);
    CHECK_MSG(std::memcmp(&first[i], &other[i], 4) == 0, what << ": statistics changed the output at " << i);
  }
}

std::vector<int> range(int a, int b) {
  std::vector<int> r;
  for (int i = a; i < b; i++) r.push_back(i);
  return r;
}

// A mixed batch: decode tokens, a fresh prefill (partial last tile), a chunked-prefill
// continuation, a 2-token run, and a recompute of scattered tokens.
std::vector<SeqSpec> mixed_seqs() {
  return {
      {301, {300}},                       // decode
      {100, range(0, 100)},               // prefill, 100 tokens (partial tiles)
      {170, range(37, 170)},              // chunked prefill continuing at 37
      {1, {0}},                           // the very first token
      {66, {64, 65}},                     // two tokens
      {513, {512}},                       // decode at a block boundary + 1
      {260, {5, 70, 71, 72, 200, 259}},   // recompute of scattered tokens
  };
}

}  // namespace

RUNNER_TEST(attention, gqa_and_head_dims) {
  for (int group : {1, 3, 4}) {
    for (int hd : {16, 64, 128}) {
      Layout L = make_layout(2 * group, 2, hd, 16, mixed_seqs(), false, 100 + group * 7 + hd);
      run_and_check(L, false, "gqa/head_dim");
    }
  }
}

RUNNER_TEST(attention, statistics) {
  for (int group : {1, 3}) {
    for (int hd : {16, 64}) {
      Layout L = make_layout(4 * group, 4, hd, 16, mixed_seqs(), true, 200 + group + hd);
      run_and_check(L, true, "statistics");
      run_and_check(L, false, "statistics off");
    }
  }
}

RUNNER_TEST(attention, block_sizes_and_odd_head_dims) {
  // Odd block sizes cut chunks mid-block; head_dim 24 takes the 8-wide P·V tail; 12 and 20 are
  // not multiples of 8 (plain path).
  const int cases[][3] = {{32, 64, 3}, {5, 64, 3}, {7, 24, 4}, {16, 12, 2}, {3, 20, 1}, {1, 32, 4}};
  uint32_t seed = 300;
  for (const auto& c : cases) {
    Layout L = make_layout(2 * c[2], 2, c[1], c[0], mixed_seqs(), (seed & 1) != 0, seed);
    run_and_check(L, (seed & 1) != 0, "block sizes / odd head_dim");
    seed++;
  }
}

RUNNER_TEST(attention, long_prefill_peaky) {
  // A long prefill with large scores (softmax dominated by few entries, running max changes
  // between chunks), plus a decode of another sequence in the same batch.
  for (float gain : {1.f, 12.f}) {
    Layout L = make_layout(12, 4, 64, 16, {{700, range(0, 700)}, {450, {449}}}, false, 400 + static_cast<uint32_t>(gain), gain);
    run_and_check(L, false, "long prefill");
    // With statistics rows: the statistics tiles' two passes over many chunks.
    Layout S = make_layout(12, 4, 64, 16, {{700, range(0, 700)}, {450, {449}}}, true, 410 + static_cast<uint32_t>(gain), gain);
    run_and_check(S, true, "long prefill with statistics");
  }
}

RUNNER_TEST(attention, unordered_runs) {
  // Tokens of one sequence in decreasing and shuffled index order, and lengths far apart inside
  // what would be one tile.
  std::vector<int> down = range(0, 90);
  std::reverse(down.begin(), down.end());
  std::vector<int> shuffled = range(10, 120);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(5));
  std::vector<int> far = {0, 1, 2, 400, 401, 3, 402, 4, 5, 6, 7, 8, 9};
  Layout L = make_layout(6, 2, 64, 16, {{90, down}, {120, shuffled}, {403, far}}, false, 500);
  run_and_check(L, false, "unordered");
  Layout S = make_layout(6, 2, 64, 16, {{90, down}, {120, shuffled}, {403, far}}, true, 501);
  run_and_check(S, true, "unordered with statistics");
}

RUNNER_TEST(attention, many_decodes) {
  std::vector<SeqSpec> seqs;
  std::mt19937 rng(7);
  for (int i = 0; i < 9; i++) {
    int len = 1 + static_cast<int>(rng() % 600);
    seqs.push_back({len, {len - 1}});
  }
  for (int group : {1, 3, 4}) {
    Layout L = make_layout(4 * group, 4, 64, 16, seqs, false, 600 + group);
    run_and_check(L, false, "decodes");
  }
  // Few long decodes: their entries are split into parts that are merged afterwards (3 and 2
  // parts here, one too short to split, and 5 parts alone), with and without statistics, peaky or not.
  for (float gain : {1.f, 12.f}) {
    Layout L = make_layout(12, 4, 64, 16, {{2000, {1999}}, {700, {699}}, {100, {99}}}, gain > 1.f, 650, gain);
    run_and_check(L, gain > 1.f, "split decodes");
    Layout M = make_layout(8, 1, 128, 32, {{1500, {1499}}}, false, 651, gain);
    run_and_check(M, false, "one split decode");
  }
}

RUNNER_TEST(attention, backend_wiring) {
  // The same through the CPU Backend: kv_write into the paged cache, then attention.
  Layout L = make_layout(12, 4, 64, 16, mixed_seqs(), true, 700);
  std::unique_ptr<ctxr::Backend> cpu(ctxr::make_cpu_backend(2));
  ctxr::KvGeometry g{2, L.num_blocks, L.block_size, L.kv_width()};
  cpu->kv_init(g);
  const int slots = L.num_blocks * L.block_size;
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  cpu->kv_write(1, L.k.data(), L.v.data(), L.kv_width(), all.data(), slots);
  std::vector<float> stats;
  ctxr::AttentionBatch b = batch_of(L, &stats);
  std::vector<float> out(static_cast<size_t>(L.n) * L.heads * L.hd, std::numeric_limits<float>::quiet_NaN());
  cpu->attention(1, L.q.data(), L.q_stride, b, out.data());
  check(L, out, &stats, "backend");
}

namespace {

// Chunk mode: entry e of sequence s is in chunk chunk_of[s][e] (-1: none): 3 entries outside
// any chunk first, then chunks of 37 entries with every 50th entry left out, the last chunk
// taking the rest.
std::vector<int32_t> chunk_layout(const Layout& L, int chunks) {
  std::vector<int32_t> chunk_of(L.seqs.size() * L.max_len, -1);
  for (size_t s = 0; s < L.seqs.size(); s++)
    for (int e = 3; e < L.max_len; e++)
      if (e % 50 != 49) chunk_of[s * L.max_len + e] = std::min((e - 3) / 37, chunks - 1);
  return chunk_of;
}

// Runs cpu_attention in chunk mode on `threads` threads and checks, for every statistics token
// and head, each chunk's mass against a double-precision reference; returns the output.
std::vector<float> run_chunk_mode(const Layout& L, int chunks, int threads, const char* what) {
  const std::vector<int32_t> chunk_of = chunk_layout(L, chunks);
  std::vector<float> stats(static_cast<size_t>(std::max(1, L.stat_rows)) * L.heads * chunks, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> out(static_cast<size_t>(L.n) * L.heads * L.hd);
  ctxr::AttentionBatch b = batch_of(L, nullptr);
  b.stat_row = L.stat_row.data();
  b.stats = stats.data();
  b.stat_chunk_of = chunk_of.data();
  b.stat_chunks = chunks;
  ctxr::cpu_attention(L.q.data(), L.q_stride, b, L.k.data(), L.v.data(), L.kv_width(), L.block_size, threads, out.data());

  const int group = L.heads / L.kv_heads, w = L.kv_width();
  const double scale = 1.0 / std::sqrt(static_cast<double>(L.hd));
  std::vector<double> p, want(chunks);
  for (int t = 0; t < L.n; t++) {
    if (L.stat_row[t] < 0) continue;
    const int len = L.token_len[t];
    const int32_t* table = L.tables.data() + static_cast<size_t>(L.token_seq[t]) * L.max_blocks;
    const int32_t* of = chunk_of.data() + static_cast<size_t>(L.token_seq[t]) * L.max_len;
    for (int h = 0; h < L.heads; h++) {
      const float* qh = L.q.data() + static_cast<size_t>(t) * L.q_stride + static_cast<size_t>(h) * L.hd;
      p.assign(len, 0.0);
      double best = -INFINITY, total = 0;
      for (int s = 0; s < len; s++) {
        const float* kr = L.k.data() + (static_cast<size_t>(table[s / L.block_size]) * L.block_size + s % L.block_size) * w + (h / group) * L.hd;
        double dot = 0;
        for (int d = 0; d < L.hd; d++) dot += static_cast<double>(qh[d]) * kr[d];
        best = std::max(best, p[s] = dot * scale);
      }
      for (int s = 0; s < len; s++) total += (p[s] = std::exp(p[s] - best));
      if (!L.sinks.empty()) total += std::exp(L.sinks[h] - best);
      std::fill(want.begin(), want.end(), 0.0);
      for (int s = 0; s < len; s++)
        if (of[s] >= 0) want[of[s]] += p[s] / total;
      const float* got = stats.data() + (static_cast<size_t>(L.stat_row[t]) * L.heads + h) * chunks;
      for (int c = 0; c < chunks; c++)
        CHECK_MSG(std::fabs(got[c] - want[c]) <= 2e-6, what << ": token " << t << " (len " << len << ") head " << h << " chunk " << c
                                                           << ": got " << got[c] << ", want " << want[c]);
    }
  }
  return out;
}

// Chunk mode on 1 and 2 threads; the output is bitwise that of a run without statistics.
void check_chunk_mode(const Layout& L, int chunks, const char* what) {
  std::vector<float> none;
  const std::vector<float> plain = run_once(L, false, 2, &none, what);
  for (int threads : {1, 2}) {
    const std::vector<float> out = run_chunk_mode(L, chunks, threads, what);
    for (size_t i = 0; i < out.size(); i++) CHECK_MSG(std::memcmp(&out[i], &plain[i], 4) == 0, what << ": chunk statistics changed the output at " << i);
  }
}

}  // namespace

RUNNER_TEST(attention, chunk_statistics) {
  // Prefill tiles (their statistics come from the tile itself), single tokens, split decodes and
  // the plain path (head_dim 12), grouped or not; every other token has a statistics row.
  for (int group : {1, 3}) {
    for (int hd : {16, 64, 12}) {
      Layout L = make_layout(2 * group, 2, hd, 16, mixed_seqs(), true, 700 + group + hd);
      check_chunk_mode(L, 5, "chunk statistics");
    }
  }
  for (float gain : {1.f, 12.f}) {
    Layout L = make_layout(12, 4, 64, 16, {{700, range(0, 700)}, {2000, {1999}}, {450, {449}}}, true, 710 + static_cast<uint32_t>(gain), gain);
    check_chunk_mode(L, 14, "chunk statistics, long");
  }
}

// ---------------------------------------------------------------------------------------------
// f16 KV cache: cpu_attention over IEEE-half K/V widens every element exactly, so it must give
// bitwise the f32 path's results on the same (half-representable) values, and stay within half
// precision of the f32 path on the unrounded cache.

namespace {

struct HalfCache {
  std::vector<uint16_t> k, v;
};

// Rounds L's caches to halves; `L` itself then holds the widened values.
HalfCache round_to_halves(Layout& L) {
  HalfCache h;
  for (auto* pair : {&L.k, &L.v}) {
    std::vector<uint16_t>& dst = pair == &L.k ? h.k : h.v;
    dst.resize(pair->size());
    for (size_t i = 0; i < pair->size(); i++) {
      dst[i] = ctxr::f32_to_f16((*pair)[i]);
      (*pair)[i] = ctxr::f16_to_f32(dst[i]);
    }
  }
  return h;
}

std::vector<float> run_half(const Layout& L, const HalfCache& h, ctxr::AttentionBatch b, int threads) {
  std::vector<float> out(static_cast<size_t>(L.n) * L.heads * L.hd, std::numeric_limits<float>::quiet_NaN());
  ctxr::cpu_attention(L.q.data(), L.q_stride, b, h.k.data(), h.v.data(), L.kv_width(), L.block_size, threads, out.data());
  return out;
}

void same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  CHECK_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) CHECK_MSG(std::memcmp(&a[i], &b[i], 4) == 0, what << ": differs at " << i << ": " << a[i] << " vs " << b[i]);
}

// f16 against f32: outputs (and statistics) bitwise equal to f32 on the rounded cache, for 1 and
// 2 threads; against f32 on the unrounded cache within `tolerance`.
void check_half(Layout L, bool with_stats, double tolerance, const char* what) {
  std::vector<float> stats_exact, stats_rounded, stats_half;
  const std::vector<float> exact = run_once(L, with_stats, 1, &stats_exact, what);
  HalfCache h = round_to_halves(L);
  const std::vector<float> rounded = run_once(L, with_stats, 1, &stats_rounded, what);
  for (int threads : {1, 2}) {
    stats_half.assign(stats_rounded.size(), std::numeric_limits<float>::quiet_NaN());
    ctxr::AttentionBatch b = batch_of(L, nullptr);
    if (with_stats) {
      b.stat_row = L.stat_row.data();
      b.stats = stats_half.data();
    }
    same_bits(run_half(L, h, b, threads), rounded, what);
    if (with_stats) same_bits(stats_half, stats_rounded, what);
  }
  double worst = 0;
  for (size_t i = 0; i < exact.size(); i++) worst = std::max(worst, std::fabs(static_cast<double>(exact[i]) - rounded[i]));
  CHECK_MSG(worst <= tolerance, what << ": f16 cache differs from f32 by " << worst);
  if (with_stats)
    for (size_t i = 0; i < stats_exact.size(); i++)
      if (!std::isnan(stats_exact[i]) || !std::isnan(stats_rounded[i])) CHECK_NEAR(stats_exact[i], stats_rounded[i], tolerance);
}

}  // namespace

RUNNER_TEST(attention, f16_rounding_matches_f16c) {
  std::mt19937 rng(11);
  std::vector<float> xs = {0.f, -0.f, 1.f, 65504.f, 65519.f, 65520.f, 1e6f, -1e-8f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 6.103515625e-05f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int i = 0; i < 100000; i++) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) xs.push_back(f);
    xs.push_back(u(rng) * std::ldexp(1.f, static_cast<int>(rng() % 40) - 30));
  }
  for (float x : xs) {
    const uint16_t want = static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
    CHECK_MSG(ctxr::f32_to_f16(x) == want, "f32_to_f16(" << x << ") = " << ctxr::f32_to_f16(x) << ", F16C says " << want);
  }
}

RUNNER_TEST(attention, f16_cache_decode_and_prefill) {
  // Decode, prefill tiles, chunked prefill, scattered recomputes (mixed_seqs), GQA groups, the
  // plain path (head_dim 12, 20), odd block sizes, statistics on and off.
  uint32_t seed = 800;
  for (int group : {1, 3, 4})
    for (int hd : {16, 64, 128}) {
      const bool with_stats = (seed & 1) != 0;
      check_half(make_layout(2 * group, 2, hd, 16, mixed_seqs(), with_stats, seed++), with_stats, 3e-3, "f16 mixed");
    }
  const int cases[][3] = {{5, 64, 3}, {7, 24, 4}, {16, 12, 2}, {3, 20, 1}};
  for (const auto& c : cases) check_half(make_layout(2 * c[2], 2, c[1], c[0], mixed_seqs(), true, seed++), true, 3e-3, "f16 block sizes / head_dim");
  // Long prefill and split decodes, peaky softmax too (larger scores magnify K's rounding).
  for (float gain : {1.f, 12.f}) {
    const double tol = gain > 1.f ? 2e-2 : 3e-3;
    check_half(make_layout(12, 4, 64, 16, {{700, range(0, 700)}, {450, {449}}}, false, seed++, gain), false, tol, "f16 long prefill");
    check_half(make_layout(12, 4, 64, 16, {{2000, {1999}}, {700, {699}}, {100, {99}}}, true, seed++, gain), true, tol, "f16 split decodes");
  }
}

RUNNER_TEST(attention, f16_cache_chunk_statistics) {
  for (int hd : {64, 12}) {
    Layout L = make_layout(6, 2, hd, 16, mixed_seqs(), true, 900 + hd);
    HalfCache h = round_to_halves(L);
    const std::vector<int32_t> chunk_of = chunk_layout(L, 5);
    const size_t n_stats = static_cast<size_t>(std::max(1, L.stat_rows)) * L.heads * 5;
    std::vector<float> want_stats(n_stats), got_stats(n_stats);
    std::vector<float> want(static_cast<size_t>(L.n) * L.heads * L.hd);
    ctxr::AttentionBatch b = batch_of(L, nullptr);
    b.stat_row = L.stat_row.data();
    b.stat_chunk_of = chunk_of.data();
    b.stat_chunks = 5;
    b.stats = want_stats.data();
    ctxr::cpu_attention(L.q.data(), L.q_stride, b, L.k.data(), L.v.data(), L.kv_width(), L.block_size, 2, want.data());
    b.stats = got_stats.data();
    same_bits(run_half(L, h, b, 2), want, "f16 chunk mode output");
    same_bits(got_stats, want_stats, "f16 chunk mode statistics");
  }
}

RUNNER_TEST(attention, f16_backend_cache) {
  // The CPU Backend with an f16 cache: kv_write rounds to halves, kv_read widens them back,
  // kv_copy_blocks copies halves, attention reads them.
  Layout L = make_layout(12, 4, 64, 16, mixed_seqs(), true, 950);
  std::unique_ptr<ctxr::Backend> cpu(ctxr::make_cpu_backend(2));
  CHECK(cpu->supports_kv_dtype(ctxr::KvDtype::F16));
  cpu->kv_init(ctxr::KvGeometry{2, L.num_blocks + 1, L.block_size, L.kv_width(), ctxr::KvDtype::F16});
  const int slots = L.num_blocks * L.block_size;
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  cpu->kv_write(1, L.k.data(), L.v.data(), L.kv_width(), all.data(), slots);
  Layout R = L;
  HalfCache h = round_to_halves(R);
  std::vector<float> k(L.k.size()), v(L.v.size());
  cpu->kv_read(1, all.data(), slots, k.data(), v.data());
  same_bits(k, R.k, "kv_read K");
  same_bits(v, R.v, "kv_read V");
  std::vector<float> stats;
  ctxr::AttentionBatch b = batch_of(L, &stats);
  std::vector<float> out(static_cast<size_t>(L.n) * L.heads * L.hd);
  cpu->attention(1, L.q.data(), L.q_stride, b, out.data());
  std::vector<float> want_stats;
  const std::vector<float> want = run_once(R, true, 2, &want_stats, "f16 backend");
  same_bits(out, want, "f16 backend attention");
  same_bits(stats, want_stats, "f16 backend statistics");
  // Block 0 copied to the spare block: its rows read back the same.
  const int32_t src = 0, dst = L.num_blocks;
  cpu->kv_copy_blocks(&src, &dst, 1);
  std::vector<int32_t> from(L.block_size), to(L.block_size);
  for (int i = 0; i < L.block_size; i++) from[i] = i, to[i] = dst * L.block_size + i;
  std::vector<float> k0(static_cast<size_t>(L.block_size) * L.kv_width()), v0(k0.size()), k1(k0.size()), v1(k0.size());
  cpu->kv_read(1, from.data(), L.block_size, k0.data(), v0.data());
  cpu->kv_read(1, to.data(), L.block_size, k1.data(), v1.data());
  same_bits(k0, k1, "kv_copy_blocks K");
  same_bits(v0, v1, "kv_copy_blocks V");
}

RUNNER_TEST(attention, sliding_window) {
  // Gemma 3's local layers: token t sees entries token_len - window .. token_len - 1 only (one
  // entry with window 1; the whole sequence when the window is longer), on every path: per token
  // (head_dim 64, tokens that would otherwise form prefill tiles), plain (head_dim 20), statistics.
  uint32_t seed = 900;
  for (int window : {1, 7, 64, 300}) {
    for (int hd : {64, 20}) {
      for (bool stats : {false, true}) {
        Layout L = make_layout(6, 2, hd, 16, mixed_seqs(), stats, seed++);
        L.window = window;
        run_and_check(L, stats, "sliding window");
      }
    }
  }
}

// A sliding group frees the blocks wholly before every token's window (its table holds -1 there)
// and gives their memory to others: the prefill tiles, whose K/V chunks start 64-aligned below the
// window, must neither read outside the pool nor let the masked garbage there (NaN) through.
RUNNER_TEST(attention, sliding_window_freed_blocks) {
  uint32_t seed = 950;
  for (int window : {7, 40}) {
    for (int hd : {64, 20}) {
      Layout L = make_layout(6, 2, hd, 16, mixed_seqs(), false, seed++);
      L.window = window;
      const size_t row = static_cast<size_t>(L.kv_width());
      for (size_t s = 0; s < L.seqs.size(); s++) {
        int first = INT32_MAX;
        for (int t = 0; t < L.n; t++)
          if (L.token_seq[t] == static_cast<int>(s)) first = std::min(first, std::max(0, L.token_len[t] - window));
        for (int b = 0; (b + 1) * L.block_size <= first; b++) {
          int32_t& id = L.tables[s * L.max_blocks + b];
          std::fill_n(L.k.begin() + static_cast<size_t>(id) * L.block_size * row, L.block_size * row, NAN);
          std::fill_n(L.v.begin() + static_cast<size_t>(id) * L.block_size * row, L.block_size * row, NAN);
          id = -1;
        }
      }
      run_and_check(L, false, "sliding window, freed blocks");
    }
  }
}

// gpt-oss's attention sinks: each head's softmax sum gains exp(sink) of an entry without a value,
// on every path (prefill tiles, per token and split decodes, plain, statistics tiles, chunk mode,
// sliding windows, an f16 cache). Sinks from far below to far above the scores: a sink of +8
// takes most of a head's mass (its output shrinks towards 0), one of -30 almost none.
namespace {
std::vector<float> sink_logits(int heads, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<float> sinks(heads);
  for (float& s : sinks) s = u(rng);
  sinks[0] = 8.f;
  if (heads > 1) sinks[heads - 1] = -30.f;
  return sinks;
}
}  // namespace

RUNNER_TEST(attention, sinks) {
  uint32_t seed = 1100;
  for (int group : {1, 3}) {
    for (int hd : {64, 20}) {
      for (int window : {0, 40}) {
        Layout L = make_layout(2 * group, 2, hd, 16, mixed_seqs(), true, seed++);
        L.window = window;
        L.sinks = sink_logits(L.heads, seed);
        run_and_check(L, true, "sinks");
        if (window == 0) check_chunk_mode(L, 5, "sinks, chunk statistics");
        check_half(L, true, 2e-3, "sinks, f16 cache");
      }
    }
  }
  // Long: split decodes (parts merged) and many prefill chunks with peaky scores.
  Layout L = make_layout(12, 4, 64, 16, {{700, range(0, 700)}, {2000, {1999}}}, true, seed, 12.f);
  L.sinks = sink_logits(L.heads, seed);
  run_and_check(L, true, "sinks, long");
  check_chunk_mode(L, 14, "sinks, long, chunk statistics");
}

RUNNER_TEST(attention, sinks_change_the_softmax_as_an_extra_entry) {
  // Not vacuous: with sinks every head's output is its sinkless output times
  // Σ exp(s) / (Σ exp(s) + exp(sink)) — a sink of +8 on head 0 must shrink it by far.
  Layout L = make_layout(4, 2, 64, 16, {{200, range(0, 200)}, {300, {299}}}, false, 1200);
  std::vector<float> none;
  const std::vector<float> plain = run_once(L, false, 2, &none, "no sinks");
  L.sinks = {8.f, 0.f, -2.f, -30.f};
  const std::vector<float> sunk = run_once(L, false, 2, &none, "sinks");
  const int width = L.heads * L.hd;
  const double scale = 1.0 / std::sqrt(static_cast<double>(L.hd));
  for (int t = 0; t < L.n; t++) {
    const int32_t* table = L.tables.data() + static_cast<size_t>(L.token_seq[t]) * L.max_blocks;
    for (int h = 0; h < L.heads; h++) {
      const float* qh = L.q.data() + static_cast<size_t>(t) * L.q_stride + static_cast<size_t>(h) * L.hd;
      double lse_terms = 0;
      for (int s = 0; s < L.token_len[t]; s++) {
        const float* kr = L.k.data() + (static_cast<size_t>(table[s / L.block_size]) * L.block_size + s % L.block_size) * L.kv_width() + (h / 2) * L.hd;
        double dot = 0;
        for (int d = 0; d < L.hd; d++) dot += static_cast<double>(qh[d]) * kr[d];
        lse_terms += std::exp(dot * scale);
      }
      const double keep = lse_terms / (lse_terms + std::exp(static_cast<double>(L.sinks[h])));
      if (h == 0) CHECK_MSG(keep < 0.5, "token " << t << ": a sink of +8 keeps " << keep);
      if (h == 3) CHECK_MSG(keep > 1 - 1e-9, "token " << t << ": a sink of -30 keeps " << keep);
      for (int d = 0; d < L.hd; d++) {
        const size_t i = static_cast<size_t>(t) * width + static_cast<size_t>(h) * L.hd + d;
        CHECK_NEAR(sunk[i], plain[i] * keep, 2e-5 + 2e-5 * std::fabs(plain[i]));
      }
    }
  }
}
