// Paged attention for the CPU backend; see attention_cpu.h for the paths.
#include "cpu/attention_cpu.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cpu/avx2_exp.h"
#include "cpu/avx2_reduce.h"
#include "halfs.h"

namespace ctxr {
namespace {

constexpr int kChunk = 64;     // K/V entries per chunk of a prefill tile
constexpr int kTileRows = 64;  // target query rows (tokens x group) of a prefill tile
// A K/V row of zeros (f32 or f16: both all-zero bits), for entries without a block.
alignas(64) constexpr unsigned char kZeroRow[4096] = {};

// ---------------------------------------------------------------------------------------------
// Lane k of the result is the horizontal sum of a[k].
inline __m256 reduce8(const __m256* a) {
  __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// 8 cache elements widened to f32: the f32 cache as it is, the f16 one through F16C.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// n halves to f32.
inline void widen_halves(const uint16_t* src, int n, float* dst) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(src + i));
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels.

// Scores, transposed: st[k][i] = Σ_d qt[d][i] · krow[k][d] for NK keys and NV*8 rows. qt has row
// stride `qs` (the tile's padded row count), st row stride `ss`.
template <int NK, int NV>
inline void score_kernel(const float* qt, int qs, const float* const* krow, int hd, float* st, int ss) {
  __m256 acc[NK][NV];
  #pragma GCC unroll 8
  for (int k = 0; k < NK; k++)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[k][v] = _mm256_setzero_ps();
  const float* kr[NK];
  #pragma GCC unroll 8
  for (int k = 0; k < NK; k++) kr[k] = krow[k];
  for (int d = 0; d < hd; d++) {
    __m256 q[NV];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) q[v] = _mm256_loadu_ps(qt + static_cast<size_t>(d) * qs + 8 * v);
    #pragma GCC unroll 8
    for (int k = 0; k < NK; k++) {
      __m256 b = _mm256_broadcast_ss(kr[k] + d);
      #pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[k][v] = _mm256_fmadd_ps(q[v], b, acc[k][v]);
    }
  }
  #pragma GCC unroll 8
  for (int k = 0; k < NK; k++)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(st + static_cast<size_t>(k) * ss + 8 * v, acc[k][v]);
}

template <int NV>
inline void score_rows(const float* qt, int qs, const float* const* krow, int n, int hd, float* st, int ss) {
  int k = 0;
  for (; k + 6 <= n; k += 6) score_kernel<6, NV>(qt, qs, krow + k, hd, st + static_cast<size_t>(k) * ss, ss);
  float* s = st + static_cast<size_t>(k) * ss;
  switch (n - k) {
    case 5: score_kernel<5, NV>(qt, qs, krow + k, hd, s, ss); break;
    case 4: score_kernel<4, NV>(qt, qs, krow + k, hd, s, ss); break;
    case 3: score_kernel<3, NV>(qt, qs, krow + k, hd, s, ss); break;
    case 2: score_kernel<2, NV>(qt, qs, krow + k, hd, s, ss); break;
    case 1: score_kernel<1, NV>(qt, qs, krow + k, hd, s, ss); break;
    default: break;
  }
}

// How P·V starts from the accumulator o.
enum class Start { kZero, kLoad, kScaled };  // 0; o; o * alpha[r]

// o[r][d0 .. d0+8*NV) = start(o[r][..]) + Σ_j p(r, j) · vrow[j][..] for NR rows, where
// p(r, j) = p[r * ps_r + j * ps_j].
template <int NR, int NV, class T>
inline void pv_kernel(const float* p, ptrdiff_t ps_r, ptrdiff_t ps_j, const T* const* vrow, int voff, int n, int d0,
                      Start start, const float* alpha, float* o, int os) {
  __m256 acc[NR][NV];
  #pragma GCC unroll 8
  for (int r = 0; r < NR; r++) {
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      if (start == Start::kZero) {
        acc[r][v] = _mm256_setzero_ps();
      } else {
        acc[r][v] = _mm256_loadu_ps(o + static_cast<size_t>(r) * os + d0 + 8 * v);
        if (start == Start::kScaled) acc[r][v] = _mm256_mul_ps(_mm256_broadcast_ss(alpha + r), acc[r][v]);
      }
    }
  }
  const float* pr[NR];
  #pragma GCC unroll 8
  for (int r = 0; r < NR; r++) pr[r] = p + r * ps_r;
  for (int j = 0; j < n; j++) {
    __m256 x[NV];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) x[v] = load8(vrow[j] + voff + d0 + 8 * v);
    const ptrdiff_t off = j * ps_j;
    #pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      __m256 b = _mm256_broadcast_ss(pr[r] + off);
      #pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(b, x[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + static_cast<size_t>(r) * os + d0 + 8 * v, acc[r][v]);
}

template <int NR, class T>
inline void pv_rows(const float* p, ptrdiff_t ps_r, ptrdiff_t ps_j, const T* const* vrow, int voff, int n, int hd, Start start,
                    const float* alpha, float* o, int os) {
  int d0 = 0;
  for (; d0 + 16 <= hd; d0 += 16) pv_kernel<NR, 2, T>(p, ps_r, ps_j, vrow, voff, n, d0, start, alpha, o, os);
  if (d0 < hd) pv_kernel<NR, 1, T>(p, ps_r, ps_j, vrow, voff, n, d0, start, alpha, o, os);
}

// P·V for m rows (blocks of up to 6); o has row stride os; V columns start at voff of each row.
template <class T>
inline void pv_all(const float* p, ptrdiff_t ps_r, ptrdiff_t ps_j, const T* const* vrow, int voff, int n, int hd, Start start,
                   const float* alpha, float* o, int os, int m) {
  for (int r0 = 0; r0 < m; r0 += 6) {
    const float* pp = p + r0 * ps_r;
    const float* a = alpha ? alpha + r0 : nullptr;
    float* oo = o + static_cast<size_t>(r0) * os;
    switch (std::min(6, m - r0)) {
      case 6: pv_rows<6, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
      case 5: pv_rows<5, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
      case 4: pv_rows<4, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
      case 3: pv_rows<3, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
      case 2: pv_rows<2, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
      default: pv_rows<1, T>(pp, ps_r, ps_j, vrow, voff, n, hd, start, a, oo, os); break;
    }
  }
}

// ---------------------------------------------------------------------------------------------

struct Job {
  const float* q;
  int q_stride;
  const AttentionBatch* b;
  const void* kc;  // float, or uint16_t (IEEE half) when `half`
  const void* vc;
  bool half;
  int kv_width, block_size, hd, group;
  float* out;

  const int32_t* table(int t) const { return b->block_tables + static_cast<size_t>(b->token_seq[t]) * b->max_blocks; }
  // The first entry token t sees: 0, or with a sliding window the window's first.
  int first_entry(int t) const { return b->window > 0 ? std::max(0, b->token_len[t] - b->window) : 0; }
  // Head h's sink term in a softmax whose largest raw score (q·k, unscaled) is `max_raw`, in the
  // units of its sum Σ exp((s - max_raw) · scale): exp(sink - max_raw · scale); 0 without sinks.
  float sink_term(int h, float max_raw) const { return b->sinks ? std::exp(b->sinks[h] - max_raw * b->scale) : 0.f; }
  // Statistics (backend.h): chunk mode sums per chunk and keeps heads apart.
  bool chunk_mode() const { return b->stat_chunk_of != nullptr; }
  size_t stat_width() const { return chunk_mode() ? static_cast<size_t>(b->heads) * b->stat_chunks : static_cast<size_t>(b->max_len); }
  float* stat_dst(int t) const { return b->stats + static_cast<size_t>(b->stat_row[t]) * stat_width(); }
  const int32_t* chunk_of(int t) const { return b->stat_chunk_of + static_cast<size_t>(b->token_seq[t]) * b->max_len; }
  // Row pointers (kv head column offset `off`) of entries c0 .. c0+n-1.
  template <class T>
  void rows(const void* cache, const int32_t* tab, int off, int c0, int n, const T** dst) const {
    int s = c0;
    while (s < c0 + n) {
      int blk = s / block_size, within = s % block_size;
      int take = std::min(block_size - within, c0 + n - s);
      if (tab[blk] < 0) {
        // No block (a sliding window's entries freed before a chunk's aligned start): masked
        // entries, read as zeros so that they add exactly 0 (0 · garbage can be NaN).
        for (int j = 0; j < take; j++) dst[s - c0 + j] = reinterpret_cast<const T*>(kZeroRow);
        s += take;
        continue;
      }
      const T* base = static_cast<const T*>(cache) + (static_cast<size_t>(tab[blk]) * block_size + within) * kv_width + off;
      for (int j = 0; j < take; j++) dst[s - c0 + j] = base + static_cast<size_t>(j) * kv_width;
      s += take;
    }
  }
  // f32 row pointers (hd wide) of entries c0 .. c0+n-1: into the cache itself, or for an f16
  // cache into `wide` ([n][hd]) after widening there (the tile paths then run on f32).
  void f32_rows(const void* cache, const int32_t* tab, int off, int c0, int n, float* wide, const float** dst) const {
    if (!half) return rows(cache, tab, off, c0, n, dst);
    for (int j = 0; j < n; j++) {
      const int s = c0 + j;
      dst[j] = wide + static_cast<size_t>(j) * hd;
      if (tab[s / block_size] < 0) {
        std::fill_n(wide + static_cast<size_t>(j) * hd, hd, 0.f);
        continue;
      }
      const uint16_t* src = static_cast<const uint16_t*>(cache) +
                            (static_cast<size_t>(tab[s / block_size]) * block_size + s % block_size) * kv_width + off;
      widen_halves(src, hd, wide + static_cast<size_t>(j) * hd);
    }
  }
};

// Prefetches `width` elements at each of n rows (decode streams K and V from memory).
template <class T>
inline void prefetch_rows(const T* const* rows, int n, int width) {
  constexpr int line = 64 / sizeof(T);
  for (int j = 0; j < n; j++)
    for (int d = 0; d < width; d += line) _mm_prefetch(reinterpret_cast<const char*>(rows[j] + d), _MM_HINT_T0);
}

struct Item {
  enum Kind : int { kTile, kToken, kPlain, kStats, kStatsTile } kind;
  int first, count, kvh;  // tile: tokens first .. first+count-1, kv head kvh; stats tile: count
                          // tokens listed from stat_tokens[first]; others: token first
  int a, e;               // kToken: entries a .. e-1; kTile: a = 1 when it computes chunk statistics
  double cost;
  float* part;            // kToken split into parts: where this part's partial results go
};

// Per-thread scratch, grown as needed and kept across calls (OpenMP threads persist).
struct Scratch {
  std::vector<float> buf;
  std::vector<float> wide_buf;  // K/V rows of an f16 cache widened for the tile and plain paths
  std::vector<const float*> ptrs;
  std::vector<const uint16_t*> half_ptrs;
  static float* aligned(std::vector<float>& v, size_t n) {
    if (v.size() < n + 16) v.resize(n + 16);
    auto addr = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - addr % 64) % 64) / sizeof(float);
  }
  float* floats(size_t n) { return aligned(buf, n); }
  float* wide(size_t n) { return aligned(wide_buf, n); }
  template <class T>
  const T** pointers(size_t n);
};
template <>
const float** Scratch::pointers<float>(size_t n) {
  if (ptrs.size() < n) ptrs.resize(n);
  return ptrs.data();
}
template <>
const uint16_t** Scratch::pointers<uint16_t>(size_t n) {
  if (half_ptrs.size() < n) half_ptrs.resize(n);
  return half_ptrs.data();
}
thread_local Scratch tls_scratch;

inline size_t round8(size_t x) { return (x + 7) & ~static_cast<size_t>(7); }

// Chunk masses of a prefill tile after one K/V chunk: cmass[c][i] = cmass[c][i] * alpha[i] +
// Σ_j p[j][i] over the chunk's entries j (entry c0 + j) of chunk c; entries past a row's length
// add nothing (with `masked`, some rows end inside this chunk).
inline void accumulate_chunk_mass(const float* p, int mp, int n, int c0, bool masked, const int32_t* lens, const int32_t* chunk_of,
                                  const float* alpha, int chunks, float* cmass) {
  if (c0 > 0)
    for (int c = 0; c < chunks; c++)
      for (int i0 = 0; i0 < mp; i0 += 8) {
        float* dst = cmass + static_cast<size_t>(c) * mp + i0;
        _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_loadu_ps(dst), _mm256_loadu_ps(alpha + i0)));
      }
  for (int j = 0; j < n; j++) {
    const int c = chunk_of[c0 + j];
    if (c < 0 || c >= chunks) continue;
    const float* pj = p + static_cast<size_t>(j) * mp;
    float* dst = cmass + static_cast<size_t>(c) * mp;
    for (int i0 = 0; i0 < mp; i0 += 8) {
      __m256 v = _mm256_loadu_ps(pj + i0);
      if (masked) {
        const __m256i lenv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lens + i0));
        v = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(lenv, _mm256_set1_epi32(c0 + j))), v);
      }
      _mm256_storeu_ps(dst + i0, _mm256_add_ps(_mm256_loadu_ps(dst + i0), v));
    }
  }
}

// A tile of `count` consecutive batch tokens (same sequence) x the `group` query heads of kv
// head kvh. Each row sees entries first_entry .. token_len - 1 (its sliding window, if any): the
// K/V chunks start at the tile's lowest first entry and each row is masked at both of its ends. With `chunk_stats` (chunk mode), the tile's statistics tokens also get their chunk
// masses per head from the same probabilities: per row and chunk, the sum of exp(s - running max)
// is rescaled with the accumulator and divided by the row's sum at the end.
void run_tile(const Job& J, int first, int count, int kvh, bool chunk_stats) {
  const AttentionBatch& b = *J.b;
  const int hd = J.hd, group = J.group;
  const int m = count * group;
  const int mp = static_cast<int>(round8(m));
  const float scale = b.scale;
  const int chunks = chunk_stats ? b.stat_chunks : 0;
  // Layout: qt[hd][mp], s[kChunk][mp], o[mp][hd], mrow, lrow, alpha, lens[mp], starts[mp], cmass[chunks][mp].
  Scratch& sc = tls_scratch;
  float* qt = sc.floats(static_cast<size_t>(hd) * mp + static_cast<size_t>(kChunk) * mp + static_cast<size_t>(mp) * hd + 5 * mp +
                        static_cast<size_t>(chunks) * mp + 64);
  float* s = qt + static_cast<size_t>(hd) * mp;
  float* o = s + static_cast<size_t>(kChunk) * mp;
  float* mrow = o + static_cast<size_t>(mp) * hd;
  float* lrow = mrow + mp;
  float* alpha = lrow + mp;
  auto* lens = reinterpret_cast<int32_t*>(alpha + mp);
  auto* starts = reinterpret_cast<int32_t*>(alpha + 2 * mp);
  float* cmass = alpha + 3 * mp;
  const int32_t* chunk_of = chunk_stats ? J.chunk_of(first) : nullptr;
  if (chunk_stats) std::fill(cmass, cmass + static_cast<size_t>(chunks) * mp, 0.f);
  if (sc.ptrs.size() < 2 * kChunk) sc.ptrs.resize(2 * kChunk);
  const float** krow = sc.ptrs.data();
  const float** vrow = krow + kChunk;
  float* kwide = J.half ? sc.wide(2 * static_cast<size_t>(kChunk) * hd) : nullptr;
  float* vwide = J.half ? kwide + static_cast<size_t>(kChunk) * hd : nullptr;

  int maxlen = 0, minlen = 1 << 30, minstart = 1 << 30, maxstart = 0;
  for (int i = 0; i < mp; i++) {
    if (i < m) {
      int t = first + i / group, g = i % group;
      const float* qr = J.q + static_cast<size_t>(t) * J.q_stride + static_cast<size_t>(kvh * group + g) * hd;
      for (int d = 0; d < hd; d++) qt[static_cast<size_t>(d) * mp + i] = qr[d];
      lens[i] = b.token_len[t];
      starts[i] = J.first_entry(t);
      maxlen = std::max(maxlen, lens[i]);
      minlen = std::min(minlen, lens[i]);
      minstart = std::min(minstart, starts[i]);
      maxstart = std::max(maxstart, starts[i]);
    } else {
      for (int d = 0; d < hd; d++) qt[static_cast<size_t>(d) * mp + i] = 0.f;
      // padding rows see the first real row's entries; their results are dropped
      lens[i] = lens[0];
      starts[i] = starts[0];
    }
    mrow[i] = -INFINITY;
    lrow[i] = 0.f;
  }
  const int32_t* tab = J.table(first);
  const int off = kvh * hd;
  const __m256 vscale = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);

  // Chunks are aligned to kChunk (from entry 0) so that a windowed tile reads the same chunks'
  // entries in the same order as an unwindowed one would; masked entries add exactly 0.
  const int c_begin = minstart - minstart % kChunk;
  for (int c0 = c_begin; c0 < maxlen; c0 += kChunk) {
    const int n = std::min(kChunk, maxlen - c0);
    J.f32_rows(J.kc, tab, off, c0, n, kwide, krow);
    J.f32_rows(J.vc, tab, off, c0, n, vwide, vrow);
    // Scores (transposed: s[j][i]).
    int i0 = 0;
    for (; i0 + 16 <= mp; i0 += 16) score_rows<2>(qt + i0, mp, krow, n, hd, s + i0, mp);
    if (i0 < mp) score_rows<1>(qt + i0, mp, krow, n, hd, s + i0, mp);
    // Online softmax, 8 rows per vector.
    const bool masked_end = c0 + n > minlen, masked_start = c0 < maxstart;
    for (i0 = 0; i0 < mp; i0 += 8) {
      __m256 mx = _mm256_loadu_ps(mrow + i0);
      const __m256 m_old = mx;
      if (masked_end || masked_start) {
        const __m256i lenv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lens + i0));
        const __m256i startv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(starts + i0));
        for (int j = 0; j < n; j++) {
          float* sj = s + static_cast<size_t>(j) * mp + i0;
          const __m256i entry = _mm256_set1_epi32(c0 + j);
          // keep: start <= entry < len
          const __m256i keep = _mm256_andnot_si256(_mm256_cmpgt_epi32(startv, entry), _mm256_cmpgt_epi32(lenv, entry));
          __m256 v = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(sj), _mm256_castsi256_ps(keep));
          _mm256_storeu_ps(sj, v);
          mx = _mm256_max_ps(mx, v);
        }
      } else {
        for (int j = 0; j < n; j++) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + static_cast<size_t>(j) * mp + i0));
      }
      // A row whose window starts past this chunk has no entry yet (max -inf): its probabilities
      // and factor are computed against 0 instead (exp(-inf) = 0, not exp(-inf + inf)).
      const __m256 mx_finite = _mm256_blendv_ps(mx, _mm256_setzero_ps(), _mm256_cmp_ps(mx, neg_inf, _CMP_EQ_OQ));
      const __m256 a = exp8(_mm256_mul_ps(_mm256_sub_ps(m_old, mx_finite), vscale));
      const __m256 mxs = _mm256_mul_ps(mx_finite, vscale);
      __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
      int j = 0;
      for (; j + 2 <= n; j += 2) {
        float* s0 = s + static_cast<size_t>(j) * mp + i0;
        float* s1 = s0 + mp;
        __m256 p0 = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s0), vscale, mxs));
        __m256 p1 = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s1), vscale, mxs));
        _mm256_storeu_ps(s0, p0);
        _mm256_storeu_ps(s1, p1);
        sum0 = _mm256_add_ps(sum0, p0);
        sum1 = _mm256_add_ps(sum1, p1);
      }
      if (j < n) {
        float* s0 = s + static_cast<size_t>(j) * mp + i0;
        __m256 p0 = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(s0), vscale, mxs));
        _mm256_storeu_ps(s0, p0);
        sum0 = _mm256_add_ps(sum0, p0);
      }
      __m256 l = _mm256_fmadd_ps(_mm256_loadu_ps(lrow + i0), a, _mm256_add_ps(sum0, sum1));
      _mm256_storeu_ps(lrow + i0, l);
      _mm256_storeu_ps(mrow + i0, mx);
      _mm256_storeu_ps(alpha + i0, a);
    }
    if (chunk_stats) accumulate_chunk_mass(s, mp, n, c0, masked_end, lens, chunk_of, alpha, chunks, cmass);
    // o = o * alpha + P·V (the first chunk starts from zero).
    pv_all(s, 1, mp, vrow, 0, n, hd, c0 == c_begin ? Start::kZero : Start::kScaled, alpha, o, hd, m);
  }
  if (chunk_stats) {
    for (int i = 0; i < m; i++) {
      const int t = first + i / group;
      if (b.stat_row[t] < 0) continue;
      float* dst = J.stat_dst(t) + static_cast<size_t>(kvh * group + i % group) * chunks;
      const float inverse = 1.0f / (lrow[i] + J.sink_term(kvh * group + i % group, mrow[i]));
      for (int c = 0; c < chunks; c++) dst[c] = cmass[static_cast<size_t>(c) * mp + i] * inverse;
    }
  }
  for (int i = 0; i < m; i++) {
    int t = first + i / group, g = i % group;
    float* dst = J.out + static_cast<size_t>(t) * b.heads * hd + static_cast<size_t>(kvh * group + g) * hd;
    const float* src = o + static_cast<size_t>(i) * hd;
    const __m256 inv = _mm256_set1_ps(1.0f / (lrow[i] + J.sink_term(kvh * group + g, mrow[i])));
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(inv, _mm256_loadu_ps(src + d)));
  }
}

// One token, every head, entries [a, e) (the whole range or one part of a split): scores of
// every entry for all heads at once, so K and V rows are read whole (a kv head's slice of a row
// alone streams from memory at a fraction of the bandwidth), softmax, P·V. With a part, writes
// the unnormalized partial (running max, sum, accumulator per head) to `part`
// ([heads][hd + 2]: o, max, sum); otherwise the output row.
template <class T>
void run_token(const Job& J, int t, int a, int e, float* part) {
  const AttentionBatch& b = *J.b;
  const int hd = J.hd, group = J.group, heads = b.heads;
  const int len = e - a;
  const int lp = static_cast<int>(round8(len));
  const float scale = b.scale;
  Scratch& sc = tls_scratch;
  // Layout: s[heads][lp], o[heads][hd], inv[heads].
  float* s = sc.floats(static_cast<size_t>(heads) * lp + static_cast<size_t>(heads) * hd + heads + 16);
  float* o = s + static_cast<size_t>(heads) * lp;
  float* inv = o + static_cast<size_t>(heads) * hd;
  const T** rows = sc.pointers<T>(2 * kChunk);  // and rows + kChunk: the next chunk
  const T** const row_buf = rows;
  const int32_t* tab = J.table(t);
  const float* qbase = J.q + static_cast<size_t>(t) * J.q_stride;

  // Scores, 8 entries at a time for every head; the next chunk's rows are prefetched meanwhile.
  const T** next_rows = rows + kChunk;
  const int width = J.kv_width;
  for (int c0 = 0; c0 < len; c0 += kChunk) {
    const int n = std::min(kChunk, len - c0);
    if (c0 == 0) J.rows<T>(J.kc, tab, 0, a, n, rows);
    else std::swap(rows, next_rows);
    for (int j = n; j < static_cast<int>(round8(n)); j++) rows[j] = rows[0];  // padding lanes, dropped below
    const int next = std::min(kChunk, len - c0 - kChunk);
    if (next > 0) J.rows<T>(J.kc, tab, 0, a + c0 + kChunk, next, next_rows);
    for (int j0 = 0; j0 < n; j0 += 8) {
      if (next > j0) prefetch_rows(next_rows + j0, std::min(8, next - j0), width);
      for (int h = 0; h < heads; h++) {
        const float* qh = qbase + static_cast<size_t>(h) * hd;
        const int off = (h / group) * hd;
        __m256 acc[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
          __m256 qv = _mm256_loadu_ps(qh + d);
#pragma GCC unroll 8
          for (int k = 0; k < 8; k++) acc[k] = _mm256_fmadd_ps(qv, load8(rows[j0 + k] + off + d), acc[k]);
        }
        // s has room for lp >= c0 + j0 + 8 floats per row.
        _mm256_storeu_ps(s + static_cast<size_t>(h) * lp + c0 + j0, reduce8(acc));
      }
    }
  }
  rows = row_buf;
  next_rows = rows + kChunk;
  // Softmax numerators, maxima and sums per head.
  const __m256 vscale = _mm256_set1_ps(scale);
  const int full = len & ~7;
  for (int h = 0; h < heads; h++) {
    float* sh = s + static_cast<size_t>(h) * lp;
    __m256 mxv = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < full; j += 8) mxv = _mm256_max_ps(mxv, _mm256_loadu_ps(sh + j));
    float mx = hmax8(mxv);
    for (int j = full; j < len; j++) mx = std::max(mx, sh[j]);
    for (int j = len; j < lp; j++) sh[j] = -INFINITY;
    const __m256 mxs = _mm256_set1_ps(mx * scale);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < lp; j += 8) {
      __m256 p = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(sh + j), vscale, mxs));
      _mm256_storeu_ps(sh + j, p);
      sum = _mm256_add_ps(sum, p);
    }
    const float total = hsum8(sum);
    if (part) {
      part[static_cast<size_t>(h) * (hd + 2) + hd] = mx;
      part[static_cast<size_t>(h) * (hd + 2) + hd + 1] = total;
    }
    inv[h] = 1.0f / (total + J.sink_term(h, mx));
  }
  // P·V in chunks, a kv head at a time (its group of heads together); the next chunk's rows are
  // prefetched a slice per kv head.
  for (int c0 = 0; c0 < len; c0 += kChunk) {
    const int n = std::min(kChunk, len - c0);
    if (c0 == 0) J.rows<T>(J.vc, tab, 0, a, n, rows);
    else std::swap(rows, next_rows);
    const int next = std::min(kChunk, len - c0 - kChunk);
    if (next > 0) J.rows<T>(J.vc, tab, 0, a + c0 + kChunk, next, next_rows);
    const int slice = (std::max(next, 0) + b.kv_heads - 1) / b.kv_heads;
    for (int kvh = 0; kvh < b.kv_heads; kvh++) {
      const int p0 = kvh * slice, p1 = std::min(next, p0 + slice);
      if (p1 > p0) prefetch_rows(next_rows + p0, p1 - p0, width);
      const int h0 = kvh * group;
      pv_all(s + static_cast<size_t>(h0) * lp + c0, lp, 1, rows, kvh * hd, n, hd, c0 == 0 ? Start::kZero : Start::kLoad, nullptr,
             o + static_cast<size_t>(h0) * hd, hd, group);
    }
  }
  for (int h = 0; h < heads; h++) {
    const float* src = o + static_cast<size_t>(h) * hd;
    if (part) {
      std::memcpy(part + static_cast<size_t>(h) * (hd + 2), src, static_cast<size_t>(hd) * 4);
    } else {
      float* dst = J.out + static_cast<size_t>(t) * heads * hd + static_cast<size_t>(h) * hd;
      const __m256 iv = _mm256_set1_ps(inv[h]);
      for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(dst + d, _mm256_mul_ps(iv, _mm256_loadu_ps(src + d)));
    }
  }
}

// Merges the parts of a split token: o = Σ w_p o_p / Σ w_p l_p, w_p = exp((m_p - max m) · scale).
void combine_parts(const Job& J, int t, const float* parts, int n_parts) {
  const AttentionBatch& b = *J.b;
  const int hd = J.hd;
  const size_t stride = static_cast<size_t>(b.heads) * (hd + 2);
  for (int h = 0; h < b.heads; h++) {
    float mx = -INFINITY;
    for (int p = 0; p < n_parts; p++) mx = std::max(mx, parts[p * stride + static_cast<size_t>(h) * (hd + 2) + hd]);
    float* dst = J.out + static_cast<size_t>(t) * b.heads * hd + static_cast<size_t>(h) * hd;
    float total = 0;
    for (int d = 0; d < hd; d++) dst[d] = 0.f;
    for (int p = 0; p < n_parts; p++) {
      const float* src = parts + p * stride + static_cast<size_t>(h) * (hd + 2);
      const float w = std::exp((src[hd] - mx) * b.scale);
      total += w * src[hd + 1];
      for (int d = 0; d < hd; d++) dst[d] += w * src[d];
    }
    const float inverse = 1.0f / (total + J.sink_term(h, mx));
    for (int d = 0; d < hd; d++) dst[d] *= inverse;
  }
}

// The plain path: one token, every head; scores, softmax (sum in double), and then P·V into out
// when `write_out`, and/or the probabilities added to `stats_row` when not null (head-averaged,
// or per head and chunk in chunk mode).
// Statistics never change the output: with statistics, the output still comes from the path it
// takes without them, and this runs once more for the probabilities only.
void run_plain(const Job& J, int t, bool write_out, float* stats_row) {
  const int32_t* chunk_of = stats_row && J.chunk_mode() ? J.chunk_of(t) : nullptr;
  const AttentionBatch& b = *J.b;
  const int hd = J.hd, first = J.first_entry(t), len = b.token_len[t] - first;  // entries first .. first+len-1
  Scratch& sc = tls_scratch;
  float* scores = sc.floats(static_cast<size_t>(len) + hd);
  float* acc = scores + len;
  if (sc.ptrs.size() < 2 * static_cast<size_t>(len)) sc.ptrs.resize(2 * static_cast<size_t>(len));
  const int32_t* tab = J.table(t);
  const float weight = 1.0f / b.heads;
  const float** krow = sc.ptrs.data();
  const float** vrow = krow + len;
  float* wide = J.half ? sc.wide(static_cast<size_t>(len) * hd) : nullptr;
  for (int h = 0; h < b.heads; h++) {
    const int off = (h / J.group) * hd;
    J.f32_rows(J.kc, tab, off, first, len, wide, krow);
    const float* qh = J.q + static_cast<size_t>(t) * J.q_stride + static_cast<size_t>(h) * hd;
    float best = -INFINITY;
    for (int j = 0; j < len; j++) {
      float dot = 0;
      for (int d = 0; d < hd; d++) dot += qh[d] * krow[j][d];
      scores[j] = dot * b.scale;
      best = std::max(best, scores[j]);
    }
    double total = 0;
    for (int j = 0; j < len; j++) {
      scores[j] = std::exp(scores[j] - best);
      total += scores[j];
    }
    if (b.sinks) total += std::exp(static_cast<double>(b.sinks[h]) - best);
    const float inverse = static_cast<float>(1.0 / total);
    if (chunk_of) {
      float* dst = stats_row + static_cast<size_t>(h) * b.stat_chunks;
      for (int j = 0; j < len; j++)
        if (const int c = chunk_of[first + j]; c >= 0 && c < b.stat_chunks) dst[c] += scores[j] * inverse;
    } else if (stats_row) {
      for (int j = 0; j < len; j++) stats_row[first + j] += scores[j] * inverse * weight;
    }
    if (!write_out) continue;
    J.f32_rows(J.vc, tab, off, first, len, wide, vrow);
    for (int d = 0; d < hd; d++) acc[d] = 0.f;
    for (int j = 0; j < len; j++) {
      const float p = scores[j] * inverse;
      for (int d = 0; d < hd; d++) acc[d] += p * vrow[j][d];
    }
    std::memcpy(J.out + static_cast<size_t>(t) * b.heads * hd + static_cast<size_t>(h) * hd, acc, static_cast<size_t>(hd) * 4);
  }
}

// Statistics for a tile of `count` statistics tokens of one sequence (any order, any lengths:
// each row is masked at its own), all kv heads: per kv head, the scores of the tile's rows
// (tokens x group) against 64-entry K chunks with the prefill micro-GEMM; pass 1 finds each
// row's max and softmax sum, pass 2 recomputes the scores and adds the normalized probabilities
// to the tokens' statistics rows (averaged over heads, or per head and chunk in chunk mode).
// Writes no output (see cpu_attention).
void run_stats_tile(const Job& J, const int* tokens, int count) {
  const AttentionBatch& b = *J.b;
  const int hd = J.hd, group = J.group;
  const int m = count * group;
  const int mp = static_cast<int>(round8(m));
  const float scale = b.scale, weight = J.chunk_mode() ? 1.0f : 1.0f / b.heads;
  const int32_t* chunk_of = J.chunk_mode() ? J.chunk_of(tokens[0]) : nullptr;
  // Layout: qt[hd][mp], s[kChunk][mp], mrow, lrow, lens[mp].
  Scratch& sc = tls_scratch;
  float* qt = sc.floats(static_cast<size_t>(hd) * mp + static_cast<size_t>(kChunk) * mp + 3 * mp + 64);
  float* s = qt + static_cast<size_t>(hd) * mp;
  float* mrow = s + static_cast<size_t>(kChunk) * mp;
  float* lrow = mrow + mp;
  auto* lens = reinterpret_cast<int32_t*>(lrow + mp);
  if (sc.ptrs.size() < kChunk) sc.ptrs.resize(kChunk);
  const float** krow = sc.ptrs.data();
  float* kwide = J.half ? sc.wide(static_cast<size_t>(kChunk) * hd) : nullptr;
  const int32_t* tab = J.table(tokens[0]);
  int maxlen = 0;
  for (int i = 0; i < mp; i++) {
    lens[i] = i < m ? b.token_len[tokens[i / group]] : 0;  // padding rows keep no entry
    maxlen = std::max(maxlen, lens[i]);
  }
  const __m256 vscale = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
  for (int kvh = 0; kvh < b.kv_heads; kvh++) {
    for (int i = 0; i < mp; i++) {
      if (i < m) {
        const float* qr = J.q + static_cast<size_t>(tokens[i / group]) * J.q_stride + static_cast<size_t>(kvh * group + i % group) * hd;
        for (int d = 0; d < hd; d++) qt[static_cast<size_t>(d) * mp + i] = qr[d];
      } else {
        for (int d = 0; d < hd; d++) qt[static_cast<size_t>(d) * mp + i] = 0.f;
      }
      mrow[i] = -INFINITY;
      lrow[i] = 0.f;
    }
    const int off = kvh * hd;
    auto scores_at = [&](int c0, int n) {
      J.f32_rows(J.kc, tab, off, c0, n, kwide, krow);
      int i0 = 0;
      for (; i0 + 16 <= mp; i0 += 16) score_rows<2>(qt + i0, mp, krow, n, hd, s + i0, mp);
      if (i0 < mp) score_rows<1>(qt + i0, mp, krow, n, hd, s + i0, mp);
    };
    // Pass 1: running max and sum per row (masked entries count as -inf).
    for (int c0 = 0; c0 < maxlen; c0 += kChunk) {
      const int n = std::min(kChunk, maxlen - c0);
      scores_at(c0, n);
      for (int i0 = 0; i0 < mp; i0 += 8) {
        const __m256i lenv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lens + i0));
        __m256 mx = _mm256_loadu_ps(mrow + i0);
        const __m256 m_old = mx;
        for (int j = 0; j < n; j++) {
          float* sj = s + static_cast<size_t>(j) * mp + i0;
          __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lenv, _mm256_set1_epi32(c0 + j)));
          __m256 v = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(sj), keep);
          _mm256_storeu_ps(sj, v);
          mx = _mm256_max_ps(mx, v);
        }
        // Rows without any entry yet keep max -inf; their factors are forced to 0 (not NaN).
        const __m256 live = _mm256_cmp_ps(mx, neg_inf, _CMP_GT_OQ);
        const __m256 a = _mm256_and_ps(live, exp8(_mm256_mul_ps(_mm256_sub_ps(m_old, mx), vscale)));
        const __m256 mxs = _mm256_mul_ps(mx, vscale);
        __m256 sum = zero;
        for (int j = 0; j < n; j++) {
          const __m256 v = _mm256_loadu_ps(s + static_cast<size_t>(j) * mp + i0);
          const __m256 kept = _mm256_cmp_ps(v, neg_inf, _CMP_GT_OQ);
          sum = _mm256_add_ps(sum, _mm256_and_ps(kept, exp8(_mm256_fmsub_ps(v, vscale, mxs))));
        }
        _mm256_storeu_ps(lrow + i0, _mm256_and_ps(live, _mm256_fmadd_ps(_mm256_loadu_ps(lrow + i0), a, sum)));
        _mm256_storeu_ps(mrow + i0, mx);
      }
    }
    // Pass 2: probabilities, head-averaged, into the statistics rows.
    for (int i = 0; i < mp; i++)  // now the row's factor
      lrow[i] = lrow[i] > 0.f ? weight / (lrow[i] + (i < m ? J.sink_term(kvh * group + i % group, mrow[i]) : 0.f)) : 0.f;
    for (int c0 = 0; c0 < maxlen; c0 += kChunk) {
      const int n = std::min(kChunk, maxlen - c0);
      scores_at(c0, n);
      for (int i0 = 0; i0 < mp; i0 += 8) {
        const __m256i lenv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lens + i0));
        const __m256 mxs = _mm256_mul_ps(_mm256_loadu_ps(mrow + i0), vscale);
        const __m256 factor = _mm256_loadu_ps(lrow + i0);
        for (int j = 0; j < n; j++) {
          float* sj = s + static_cast<size_t>(j) * mp + i0;
          __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lenv, _mm256_set1_epi32(c0 + j)));
          __m256 p = _mm256_mul_ps(exp8(_mm256_fmsub_ps(_mm256_loadu_ps(sj), vscale, mxs)), factor);
          _mm256_storeu_ps(sj, _mm256_and_ps(keep, p));
        }
      }
      for (int r = 0; r < count; r++) {
        const int len = std::min(n, lens[r * group] - c0);
        if (chunk_of) {
          for (int g = 0; g < group; g++) {
            float* dst = J.stat_dst(tokens[r]) + static_cast<size_t>(kvh * group + g) * b.stat_chunks;
            for (int j = 0; j < len; j++) {
              const int c = chunk_of[c0 + j];
              if (c >= 0 && c < b.stat_chunks) dst[c] += s[static_cast<size_t>(j) * mp + r * group + g];
            }
          }
          continue;
        }
        float* row = J.stat_dst(tokens[r]) + c0;
        for (int j = 0; j < len; j++) {
          const float* sj = s + static_cast<size_t>(j) * mp + r * group;
          float add = 0.f;
          for (int g = 0; g < group; g++) add += sj[g];
          row[j] += add;
        }
      }
    }
  }
}

void run_attention(const Job& J, int threads) {
  const AttentionBatch& b = *J.b;
  const int n = b.n_tokens;
  if (n <= 0) return;
  const bool stats = b.stat_row != nullptr;
  const bool fast = J.hd % 8 == 0;
  auto has_stats = [&](int t) { return stats && b.stat_row[t] >= 0; };

  if (stats)
    for (int t = 0; t < n; t++)
      if (has_stats(t)) std::memset(J.stat_dst(t), 0, J.stat_width() * 4);
  // In chunk mode the prefill tiles compute their tokens' statistics themselves.
  std::vector<uint8_t> tiled(n, 0);

  // Work items: runs of consecutive tokens of one sequence become tiles (x kv heads) when they
  // give at least 8 query rows; other tokens are per-token items (x kv heads); every token is a
  // plain item when head_dim is not a multiple of 8. Tokens with a statistics row add a
  // statistics item (the outputs do not depend on whether statistics are asked for).
  std::vector<Item> items;
  std::vector<int> singles;
  const int tile_tokens = std::max(1, kTileRows / J.group);
  const int spread = 2 * kChunk;  // a tile's lengths stay within this of each other
  // Tiles of a sliding-window layer read only their rows' windows; their chunk statistics are
  // left to the statistics items (which honour the window).
  const bool windowed = b.window > 0;
  for (int t = 0; t < n;) {
    if (!fast) {
      items.push_back({Item::kPlain, t, 1, 0, 0, 0, 2.0 * b.token_len[t] * b.heads, nullptr});
      t++;
      continue;
    }
    int end = t + 1;
    int lo = b.token_len[t], hi = lo;
    while (end < n && end - t < tile_tokens && b.token_seq[end] == b.token_seq[t]) {
      const int len = b.token_len[end];
      if (std::max(hi, len) - std::min(lo, len) > spread) break;
      lo = std::min(lo, len);
      hi = std::max(hi, len);
      end++;
    }
    const int count = end - t;
    if (count >= 2 && count * J.group >= 8) {
      bool tile_stats = false;
      if (stats && J.chunk_mode() && !windowed)
        for (int u = t; u < end; u++) tile_stats |= has_stats(u);
      if (tile_stats) std::fill(tiled.begin() + t, tiled.begin() + end, 1);
      for (int h = 0; h < b.kv_heads; h++)
        items.push_back({Item::kTile, t, count, h, tile_stats ? 1 : 0, 0, static_cast<double>(hi - (windowed ? J.first_entry(t) : 0)) * count * J.group, nullptr});
      t = end;
    } else {
      singles.push_back(t);
      t++;
    }
  }
  // Single tokens: all heads at once; with few of them, long ones are split into parts of at
  // least kMinPart entries (the split depends on the batch only, never on the thread count, so
  // results are the same on any number of threads).
  constexpr int kMinPart = 256, kTargetItems = 8;
  std::vector<float> parts;
  std::vector<int> part_first;  // per single: index of its first part in `parts` (-1: not split)
  std::vector<int> part_count;
  {
    const int want = singles.empty() ? 1 : (kTargetItems + static_cast<int>(singles.size()) - 1) / static_cast<int>(singles.size());
    size_t total_parts = 0;
    for (int t : singles) {
      const int np = std::max(1, std::min(want, (b.token_len[t] - J.first_entry(t)) / kMinPart));
      part_first.push_back(np > 1 ? static_cast<int>(total_parts) : -1);
      part_count.push_back(np);
      if (np > 1) total_parts += np;
    }
    const size_t part_floats = static_cast<size_t>(b.heads) * (J.hd + 2);
    parts.resize(total_parts * part_floats);
    for (size_t i = 0; i < singles.size(); i++) {
      const int t = singles[i], first = J.first_entry(t), len = b.token_len[t] - first, np = part_count[i];
      for (int p = 0; p < np; p++) {
        const int a = first + static_cast<int>(static_cast<long>(len) * p / np), e = first + static_cast<int>(static_cast<long>(len) * (p + 1) / np);
        float* dst = np > 1 ? parts.data() + (part_first[i] + p) * part_floats : nullptr;
        items.push_back({Item::kToken, t, 1, 0, a, e, static_cast<double>(e - a) * b.heads, dst});
      }
    }
  }
  // Statistics tokens of one sequence, in batch order, form tiles like the prefill's (lengths
  // within `spread`); head_dim not a multiple of 8 takes the plain path.
  std::vector<int> stat_tokens;
  if (stats) {
    for (int t = 0; t < n; t++)
      if (has_stats(t) && !tiled[t]) stat_tokens.push_back(t);
    const int n_stat = static_cast<int>(stat_tokens.size());
    for (int i = 0; i < n_stat;) {
      const int t = stat_tokens[i];
      if (!fast || windowed) {
        items.push_back({Item::kStats, t, 1, 0, 0, 0, 1.0 * b.token_len[t] * b.heads, nullptr});
        i++;
        continue;
      }
      int end = i + 1, lo = b.token_len[t], hi = lo;
      while (end < n_stat && end - i < tile_tokens && b.token_seq[stat_tokens[end]] == b.token_seq[t]) {
        const int len = b.token_len[stat_tokens[end]];
        if (std::max(hi, len) - std::min(lo, len) > spread) break;
        lo = std::min(lo, len);
        hi = std::max(hi, len);
        end++;
      }
      items.push_back({Item::kStatsTile, i, end - i, 0, 0, 0, 2.0 * hi * (end - i) * b.heads, nullptr});
      i = end;
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& c) { return a.cost > c.cost; });

  const int n_items = static_cast<int>(items.size());
  const int team = std::max(1, std::min(threads > 0 ? threads : omp_get_max_threads(), n_items));
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int i = 0; i < n_items; i++) {
    const Item& it = items[i];
    switch (it.kind) {
      case Item::kTile: run_tile(J, it.first, it.count, it.kvh, it.a != 0); break;
      case Item::kToken:
        if (J.half) run_token<uint16_t>(J, it.first, it.a, it.e, it.part);
        else run_token<float>(J, it.first, it.a, it.e, it.part);
        break;
      case Item::kPlain: run_plain(J, it.first, true, nullptr); break;
      case Item::kStats: run_plain(J, it.first, false, J.stat_dst(it.first)); break;
      case Item::kStatsTile: run_stats_tile(J, stat_tokens.data() + it.first, it.count); break;
    }
  }
  const size_t part_floats = static_cast<size_t>(b.heads) * (J.hd + 2);
  for (size_t i = 0; i < singles.size(); i++)
    if (part_count[i] > 1) combine_parts(J, singles[i], parts.data() + part_first[i] * part_floats, part_count[i]);
}

}  // namespace

void cpu_attention(const float* q, int q_stride, const AttentionBatch& b, const float* k_cache, const float* v_cache,
                   int kv_width, int block_size, int threads, float* out) {
  run_attention(Job{q, q_stride, &b, k_cache, v_cache, false, kv_width, block_size, b.head_dim, b.heads / b.kv_heads, out}, threads);
}

void cpu_attention(const float* q, int q_stride, const AttentionBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                   int kv_width, int block_size, int threads, float* out) {
  run_attention(Job{q, q_stride, &b, k_cache, v_cache, true, kv_width, block_size, b.head_dim, b.heads / b.kv_heads, out}, threads);
}

}  // namespace ctxr
