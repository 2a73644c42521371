// Packed single-precision GEMM (GotoBLAS/BLIS structure) with an AVX2/FMA 6×16 micro-kernel.
//
// B[n][k] is packed once into NR-column panels per k block: for k block kb (columns
// k0..k0+kc of B's rows) and panel p (B rows p·NR .. p·NR+NR-1, zero-padded past n) the packed
// micro-panel is kc × NR floats, element [t][j] = B[p·NR + j][k0 + t]. Blocks are stored
// kb-major, so the micro-panel (kb, p) starts at k0·npanels·NR + p·kc·NR.
//
// Large m: C is cut into tasks of about MC rows × 512 columns, taken by the threads from a
// shared counter. A task runs over the k blocks: it packs its rows' A block into MR-row
// micro-panels (L2-resident), and for each B micro-panel (L1-resident) the micro-kernel sweeps
// the row micro-panels.
// m ≤ 2 (decode of one or two sequences): no A packing; each B panel is streamed once,
// accumulating over the whole of k in registers.
#include "gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "halfs.h"

namespace ctxr {

namespace {

constexpr int MR = 6;
constexpr int NR = 16;
constexpr int KC = 256;          // B micro-panel 16 KB + A micro-panel 6 KB in the 32 KB L1d
constexpr int MC = 144;          // A block MC × KC (144 KB) in the 1 MB L2
constexpr int TASK_PANELS = 32;  // columns per task: 512 (a 512 KB slice of B per k block)
constexpr int SMALL_M = 2;       // m up to this takes the unpacked streaming path

float* alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
}

// Equal k blocks of at most KC, so that no block is a short remainder: kblocks + 1 boundaries.
std::vector<int> k_blocks(int k) {
  const int kblocks = (k + KC - 1) / KC;
  std::vector<int> k0{0};
  for (int i = 1; i <= kblocks; i++) k0.push_back(static_cast<int>(static_cast<int64_t>(k) * i / kblocks));
  return k0;
}

}  // namespace

struct PackedB {
  int n = 0, k = 0;
  int npanels = 0;
  std::vector<int> k0;  // k block boundaries, kblocks + 1 entries
  float* data = nullptr;
  ~PackedB() { std::free(data); }
  const float* panel(int kb, int p) const {
    return data + static_cast<size_t>(k0[kb]) * npanels * NR + static_cast<size_t>(p) * (k0[kb + 1] - k0[kb]) * NR;
  }
};

PackedB* pack_b(const float* b, int n, int k) {
  auto* pb = new PackedB;
  pb->n = n;
  pb->k = k;
  pb->npanels = (n + NR - 1) / NR;
  pb->k0 = k_blocks(k);
  const int kblocks = static_cast<int>(pb->k0.size()) - 1;
  pb->data = alloc_floats(static_cast<size_t>(k) * pb->npanels * NR);
  const int np = pb->npanels;
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(n) * k >= (1 << 20))
  for (int p = 0; p < np; p++) {
    for (int kb = 0; kb < kblocks; kb++) {
      const int k0 = pb->k0[kb], kc = pb->k0[kb + 1] - k0;
      float* dst = const_cast<float*>(pb->panel(kb, p));
      for (int j = 0; j < NR; j++) {
        const int row = p * NR + j;
        if (row < n) {
          const float* src = b + static_cast<size_t>(row) * k + k0;
          for (int t = 0; t < kc; t++) dst[t * NR + j] = src[t];
        } else {
          for (int t = 0; t < kc; t++) dst[t * NR + j] = 0.f;
        }
      }
    }
  }
  return pb;
}

void free_packed_b(PackedB* p) { delete p; }
int packed_b_rows(const PackedB* p) { return p->n; }
int packed_b_cols(const PackedB* p) { return p->k; }

namespace {

// Writes an mr × nr tile of accumulators `acc` (MR × NR, row-major) into C. first: the
// first k block (C = acc + bias); otherwise C += acc.
inline void store_edge(const float* acc, float* c, size_t ldc, int mr, int nr, bool first, const float* bias) {
  for (int i = 0; i < mr; i++) {
    float* cr = c + i * ldc;
    if (first) {
      for (int j = 0; j < nr; j++) cr[j] = acc[i * NR + j] + (bias ? bias[j] : 0.f);
    } else {
      for (int j = 0; j < nr; j++) cr[j] += acc[i * NR + j];
    }
  }
}

// C tile (mr ≤ 6 rows, nr ≤ 16 columns) from a packed A micro-panel (kc × MR) and a packed B
// micro-panel (kc × NR). Rows past mr of the A micro-panel are zero padding.
void kernel_6x16(int kc, const float* __restrict a, const float* __restrict b, float* c, size_t ldc, int mr, int nr,
                 bool first, const float* bias) {
  for (int i = 0; i < mr; i++) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int t = 0; t < kc; t++) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
    __m256 ai;
    ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
    a += MR;
    b += NR;
  }
  if (mr == MR && nr == NR) {
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (first && bias) {
      bias0 = _mm256_loadu_ps(bias);
      bias1 = _mm256_loadu_ps(bias + 8);
    }
    auto row = [&](float* cr, __m256 lo, __m256 hi) {
      if (first) {
        _mm256_storeu_ps(cr, _mm256_add_ps(lo, bias0));
        _mm256_storeu_ps(cr + 8, _mm256_add_ps(hi, bias1));
      } else {
        _mm256_storeu_ps(cr, _mm256_add_ps(lo, _mm256_loadu_ps(cr)));
        _mm256_storeu_ps(cr + 8, _mm256_add_ps(hi, _mm256_loadu_ps(cr + 8)));
      }
    };
    row(c, c00, c01);
    row(c + ldc, c10, c11);
    row(c + 2 * ldc, c20, c21);
    row(c + 3 * ldc, c30, c31);
    row(c + 4 * ldc, c40, c41);
    row(c + 5 * ldc, c50, c51);
    return;
  }
  alignas(32) float acc[MR * NR];
  _mm256_store_ps(acc + 0 * NR, c00);
  _mm256_store_ps(acc + 0 * NR + 8, c01);
  _mm256_store_ps(acc + 1 * NR, c10);
  _mm256_store_ps(acc + 1 * NR + 8, c11);
  _mm256_store_ps(acc + 2 * NR, c20);
  _mm256_store_ps(acc + 2 * NR + 8, c21);
  _mm256_store_ps(acc + 3 * NR, c30);
  _mm256_store_ps(acc + 3 * NR + 8, c31);
  _mm256_store_ps(acc + 4 * NR, c40);
  _mm256_store_ps(acc + 4 * NR + 8, c41);
  _mm256_store_ps(acc + 5 * NR, c50);
  _mm256_store_ps(acc + 5 * NR + 8, c51);
  store_edge(acc, c, ldc, mr, nr, first, bias);
}

// Packs rows [0, mc) × columns [0, kc) of A (row stride lda) into MR-row micro-panels,
// kc × MR each, zero-padding the last one.
void pack_a(const float* a, size_t lda, int mc, int kc, float* dst) {
  for (int i0 = 0; i0 < mc; i0 += MR) {
    const int mr = std::min(MR, mc - i0);
    if (mr == MR) {
      const float* r0 = a + (i0 + 0) * lda;
      const float* r1 = a + (i0 + 1) * lda;
      const float* r2 = a + (i0 + 2) * lda;
      const float* r3 = a + (i0 + 3) * lda;
      const float* r4 = a + (i0 + 4) * lda;
      const float* r5 = a + (i0 + 5) * lda;
      for (int t = 0; t < kc; t++) {
        dst[0] = r0[t];
        dst[1] = r1[t];
        dst[2] = r2[t];
        dst[3] = r3[t];
        dst[4] = r4[t];
        dst[5] = r5[t];
        dst += MR;
      }
    } else {
      for (int t = 0; t < kc; t++) {
        for (int i = 0; i < MR; i++) dst[i] = i < mr ? a[(i0 + i) * lda + t] : 0.f;
        dst += MR;
      }
    }
  }
}

// Per-thread A block buffer, kept between calls.
float* a_buffer() {
  struct Buf {
    float* p = nullptr;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf buf;
  if (!buf.p) buf.p = alloc_floats(static_cast<size_t>(MC + MR) * KC);
  return buf.p;
}

// One task: C rows [r0, r1) (at most MC + MR - 1) × panels [p0, p1), over all of k. Per k
// block the rows' A block is packed (L2) and each B micro-panel (L1) meets every A micro-panel;
// the C tile stays in L2 between k blocks.
void gemm_task(const float* a, const PackedB& pb, const float* bias, float* c, int r0, int r1, int p0, int p1) {
  const int n = pb.n, k = pb.k;
  const int kblocks = static_cast<int>(pb.k0.size()) - 1;
  const int mc = r1 - r0;
  float* abuf = a_buffer();
  for (int kb = 0; kb < kblocks; kb++) {
    const int k0 = pb.k0[kb], kc = pb.k0[kb + 1] - k0;
    pack_a(a + static_cast<size_t>(r0) * k + k0, k, mc, kc, abuf);
    for (int p = p0; p < p1; p++) {
      const float* bp = pb.panel(kb, p);
      const int nr = std::min(NR, n - p * NR);
      const float* bias_p = bias ? bias + p * NR : nullptr;
      // The next B micro-panel comes from L3; prefetch it into L2 a few lines per kernel call,
      // so the first call on it does not wait.
      const char* next = p + 1 < p1 ? reinterpret_cast<const char*>(pb.panel(kb, p + 1)) : nullptr;
      const int lines = kc * NR * static_cast<int>(sizeof(float)) / 64;
      const int per_call = (lines + (mc + MR - 1) / MR - 1) / ((mc + MR - 1) / MR);
      for (int ir = 0, line = 0; ir < mc; ir += MR) {
        if (next)
          for (const int end = std::min(lines, line + per_call); line < end; line++)
            _mm_prefetch(next + line * 64, _MM_HINT_T1);
        kernel_6x16(kc, abuf + static_cast<size_t>(ir) * kc, bp, c + static_cast<size_t>(r0 + ir) * n + p * NR, n,
                    std::min(MR, mc - ir), nr, kb == 0, bias_p);
      }
    }
  }
}

// M rows of A (unpacked, row stride k) times one B panel over all of k, written to C with
// bias. For M ≤ 3 two accumulator sets (even and odd t) keep enough FMA chains in flight.
// (For m ≥ 3 the packed path measured faster, so only M = 1, 2 are used.)
template <int M>
void kernel_small(const float* a, const PackedB& pb, int p, const float* bias, float* c) {
  const int n = pb.n, k = pb.k;
  const int kblocks = static_cast<int>(pb.k0.size()) - 1;
  constexpr int SETS = M <= 3 ? 2 : 1;
  __m256 acc[SETS][M][2];
  for (int s = 0; s < SETS; s++)
    #pragma GCC unroll 6
    for (int i = 0; i < M; i++) acc[s][i][0] = acc[s][i][1] = _mm256_setzero_ps();
  for (int kb = 0; kb < kblocks; kb++) {
    const int k0 = pb.k0[kb], kc = pb.k0[kb + 1] - k0;
    const float* b = pb.panel(kb, p);
    const float* ak = a + k0;
    int t = 0;
    if constexpr (SETS == 2) {
      for (; t + 1 < kc; t += 2) {
        const __m256 b0 = _mm256_load_ps(b + t * NR), b1 = _mm256_load_ps(b + t * NR + 8);
        const __m256 b2 = _mm256_load_ps(b + t * NR + NR), b3 = _mm256_load_ps(b + t * NR + NR + 8);
        #pragma GCC unroll 6
        for (int i = 0; i < M; i++) {
          const __m256 x = _mm256_broadcast_ss(ak + static_cast<size_t>(i) * k + t);
          acc[0][i][0] = _mm256_fmadd_ps(x, b0, acc[0][i][0]);
          acc[0][i][1] = _mm256_fmadd_ps(x, b1, acc[0][i][1]);
          const __m256 y = _mm256_broadcast_ss(ak + static_cast<size_t>(i) * k + t + 1);
          acc[SETS - 1][i][0] = _mm256_fmadd_ps(y, b2, acc[SETS - 1][i][0]);
          acc[SETS - 1][i][1] = _mm256_fmadd_ps(y, b3, acc[SETS - 1][i][1]);
        }
      }
    }
    for (; t < kc; t++) {
      const __m256 b0 = _mm256_load_ps(b + t * NR), b1 = _mm256_load_ps(b + t * NR + 8);
      #pragma GCC unroll 6
      for (int i = 0; i < M; i++) {
        const __m256 x = _mm256_broadcast_ss(ak + static_cast<size_t>(i) * k + t);
        acc[0][i][0] = _mm256_fmadd_ps(x, b0, acc[0][i][0]);
        acc[0][i][1] = _mm256_fmadd_ps(x, b1, acc[0][i][1]);
      }
    }
  }
  if constexpr (SETS == 2) {
    #pragma GCC unroll 6
    for (int i = 0; i < M; i++) {
      acc[0][i][0] = _mm256_add_ps(acc[0][i][0], acc[SETS - 1][i][0]);
      acc[0][i][1] = _mm256_add_ps(acc[0][i][1], acc[SETS - 1][i][1]);
    }
  }
  const int nr = std::min(NR, n - p * NR);
  const float* bias_p = bias ? bias + p * NR : nullptr;
  float* cp = c + p * NR;
  if (nr == NR) {
    const __m256 bias0 = bias_p ? _mm256_loadu_ps(bias_p) : _mm256_setzero_ps();
    const __m256 bias1 = bias_p ? _mm256_loadu_ps(bias_p + 8) : _mm256_setzero_ps();
    #pragma GCC unroll 6
    for (int i = 0; i < M; i++) {
      _mm256_storeu_ps(cp + static_cast<size_t>(i) * n, _mm256_add_ps(acc[0][i][0], bias0));
      _mm256_storeu_ps(cp + static_cast<size_t>(i) * n + 8, _mm256_add_ps(acc[0][i][1], bias1));
    }
  } else {
    alignas(32) float tmp[MR * NR];
    #pragma GCC unroll 6
    for (int i = 0; i < M; i++) {
      _mm256_store_ps(tmp + i * NR, acc[0][i][0]);
      _mm256_store_ps(tmp + i * NR + 8, acc[0][i][1]);
    }
    store_edge(tmp, cp, n, M, nr, true, bias_p);
  }
}

// C[0..m) × panels [p0..p1) for m ≤ 2: B is streamed once, A read in place.
void gemm_small(const float* a, int m, const PackedB& pb, const float* bias, float* c, int p0, int p1) {
  for (int p = p0; p < p1; p++) {
    if (m == 1) kernel_small<1>(a, pb, p, bias, c);
    else kernel_small<2>(a, pb, p, bias, c);
  }
}

// Runs task(r0, r1, p0, p1) over C rows [0, m) × B panels [0, np) on `threads` threads: tasks of
// about MC rows × TASK_PANELS panels, at least 4 per thread where the shape allows, handed out
// through a shared counter rather than statically, so that a thread slowed down by other
// processes on its core does not hold up the others.
template <typename Task>
void run_tasks(int m, int np, int threads, const Task& task) {
  const int mpanels = (m + MR - 1) / MR;
  int rblocks = (mpanels + MC / MR - 1) / (MC / MR);
  int cblocks = std::max((np + TASK_PANELS - 1) / TASK_PANELS, std::min(np, (4 * threads + rblocks - 1) / rblocks));
  if (rblocks * cblocks < 4 * threads) rblocks = std::min(mpanels, (4 * threads + cblocks - 1) / cblocks);
  const int tasks = rblocks * cblocks;
  std::atomic<int> next{0};
#pragma omp parallel num_threads(std::min(threads, tasks))
  for (int t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
    // Consecutive tasks share a column block, so that concurrent ones read the same B from L3.
    const int cb = t / rblocks, rb = t % rblocks;
    const int r0 = std::min(m, static_cast<int>(static_cast<int64_t>(mpanels) * rb / rblocks) * MR);
    const int r1 = std::min(m, static_cast<int>(static_cast<int64_t>(mpanels) * (rb + 1) / rblocks) * MR);
    const int p0 = static_cast<int>(static_cast<int64_t>(np) * cb / cblocks);
    const int p1 = static_cast<int>(static_cast<int64_t>(np) * (cb + 1) / cblocks);
    if (r0 < r1 && p0 < p1) task(r0, r1, p0, p1);
  }
}

template <bool BF16>
inline __m256 widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}

// r[i] becomes column i of the 8 × 8 block whose rows were r[0..8).
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The packed micro-panel (kc × NR, as pack_b lays it out) of B rows [row0, row0 + NR) ×
// columns [k0, k0 + kc), widened from halves; rows past n are zeros.
template <bool BF16>
void widen_panel(const uint16_t* b, int n, int k, int row0, int k0, int kc, float* dst) {
  const uint16_t* rows[NR];
  for (int j = 0; j < NR; j++) rows[j] = row0 + j < n ? b + static_cast<size_t>(row0 + j) * k + k0 : nullptr;
  int t = 0;
  for (; t + 8 <= kc; t += 8)
    for (int jb = 0; jb < NR; jb += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++) r[i] = rows[jb + i] ? widen8<BF16>(rows[jb + i] + t) : _mm256_setzero_ps();
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_store_ps(dst + (t + i) * NR + jb, r[i]);
    }
  for (; t < kc; t++)
    for (int j = 0; j < NR; j++) dst[t * NR + j] = rows[j] ? (BF16 ? bf16_to_f32(rows[j][t]) : f16_to_f32(rows[j][t])) : 0.f;
}

float* b_panel_buffer() {
  struct Buf {
    float* p = nullptr;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf buf;
  if (!buf.p) buf.p = alloc_floats(static_cast<size_t>(KC) * NR);
  return buf.p;
}

// gemm_task with B in halves: each B micro-panel is widened once per task and k block, then
// meets every A micro-panel of the task's rows from L1.
template <bool BF16>
void gemm_half_task(const float* a, const uint16_t* b, int n, int k, const std::vector<int>& k0s, const float* bias, float* c, size_t ldc,
                    int r0, int r1, int p0, int p1) {
  const int kblocks = static_cast<int>(k0s.size()) - 1;
  const int mc = r1 - r0;
  float* abuf = a_buffer();
  float* bbuf = b_panel_buffer();
  for (int kb = 0; kb < kblocks; kb++) {
    const int k0 = k0s[kb], kc = k0s[kb + 1] - k0;
    pack_a(a + static_cast<size_t>(r0) * k + k0, k, mc, kc, abuf);
    for (int p = p0; p < p1; p++) {
      widen_panel<BF16>(b, n, k, p * NR, k0, kc, bbuf);
      const int nr = std::min(NR, n - p * NR);
      const float* bias_p = bias ? bias + p * NR : nullptr;
      for (int ir = 0; ir < mc; ir += MR)
        kernel_6x16(kc, abuf + static_cast<size_t>(ir) * kc, bbuf, c + static_cast<size_t>(r0 + ir) * ldc + p * NR, ldc,
                    std::min(MR, mc - ir), nr, kb == 0, bias_p);
    }
  }
}

}  // namespace

void sgemm_packed(const float* a, int m, const PackedB* b, const float* bias, float* c, int threads) {
  const PackedB& pb = *b;
  if (m <= 0 || pb.n <= 0) return;
  if (pb.k <= 0) {
    for (int i = 0; i < m; i++)
      for (int j = 0; j < pb.n; j++) c[static_cast<size_t>(i) * pb.n + j] = bias ? bias[j] : 0.f;
    return;
  }
  const int np = pb.npanels;
  // Below ~1 MFLOP the fork/join costs more than it saves.
  if (threads <= 0) threads = omp_get_max_threads();
  if (2.0 * m * pb.n * pb.k < 1e6) threads = 1;

  // Every element is computed the same way whichever thread runs its task (see run_tasks).
  if (m <= SMALL_M) {
    std::atomic<int> next{0};
    const int chunks = std::min(np, threads == 1 ? 1 : 8 * threads);
#pragma omp parallel num_threads(std::min(threads, chunks))
    for (int t; (t = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
      gemm_small(a, m, pb, bias, c, static_cast<int>(static_cast<int64_t>(np) * t / chunks),
                 static_cast<int>(static_cast<int64_t>(np) * (t + 1) / chunks));
    return;
  }

  run_tasks(m, np, threads, [&](int r0, int r1, int p0, int p1) { gemm_task(a, pb, bias, c, r0, r1, p0, p1); });
}

void sgemm_half(const float* a, int m, const uint16_t* b, bool bf16, int n, int k, const float* bias, float* c, size_t ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) c[static_cast<size_t>(i) * ldc + j] = bias ? bias[j] : 0.f;
    return;
  }
  if (threads <= 0) threads = omp_get_max_threads();
  if (2.0 * m * n * k < 1e6) threads = 1;
  const std::vector<int> k0 = k_blocks(k);
  run_tasks(m, (n + NR - 1) / NR, threads, [&](int r0, int r1, int p0, int p1) {
    if (bf16) gemm_half_task<true>(a, b, n, k, k0, bias, c, ldc, r0, r1, p0, p1);
    else gemm_half_task<false>(a, b, n, k, k0, bias, c, ldc, r0, r1, p0, p1);
  });
}

}  // namespace ctxr
