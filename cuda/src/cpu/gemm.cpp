// Packed single-precision GEMM (GotoBLAS/BLIS structure) with an AVX2/FMA 6×16 micro-kernel.
//
// B[n][k] is packed once into NR-column panels per k block: for k block kb (columns
// k0..k0+kc of B's rows) and panel p (B rows p·NR .. p·NR+NR-1, zero-padded past n) the packed
// micro-panel is kc × NR floats, element [t][j] = B[p·NR + j][k0 + t]. Blocks are stored
// kb-major, so the micro-panel (kb, p) starts at k0·npanels·NR + p·kc·NR.
//
// Large m: each thread takes a rectangle of C (rows split when that balances, else columns)
// and runs the usual loops over it: column blocks of NC_PANELS panels, k blocks, row blocks of
// about MC rows whose A block is packed into MR-row micro-panels (L2-resident); for each B
// micro-panel (L1-resident) the micro-kernel sweeps the row micro-panels.
// Small m (decode): no A packing; each B panel is streamed once for all rows, accumulating
// over the whole of k in registers.
#include "gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace ctxr {

namespace {

constexpr int MR = 6;
constexpr int NR = 16;
constexpr int KC = 256;         // B micro-panel 16 KB + A micro-panel 6 KB in the 32 KB L1d
constexpr int MC = 144;         // A block MC × KC (144 KB) in the 1 MB L2
constexpr int NC_PANELS = 128;  // B block KC × 2048 columns (2 MB) in L3
constexpr int SMALL_M = 12;     // m up to this takes the unpacked streaming path

float* alloc_floats(size_t n) {
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
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
  // Equal k blocks of at most KC, so that no block is a short remainder.
  const int kblocks = (k + KC - 1) / KC;
  for (int i = 0; i <= kblocks; i++) pb->k0.push_back(static_cast<int>(static_cast<int64_t>(k) * i / kblocks));
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

// C[r0..r1) × panels [p0..p1) for m large enough to pack A.
void gemm_block(const float* a, const PackedB& pb, const float* bias, float* c, int r0, int r1, int p0, int p1) {
  const int n = pb.n, k = pb.k;
  const int kblocks = static_cast<int>(pb.k0.size()) - 1;
  float* abuf = a_buffer();
  // Row blocks of equal size (a multiple of MR) of at most about MC rows.
  const int rows = r1 - r0;
  const int mblocks = (rows + MC - 1) / MC;
  const int mc_step = ((rows + mblocks - 1) / mblocks + MR - 1) / MR * MR;
  for (int jc = p0; jc < p1; jc += NC_PANELS) {
    const int jc1 = std::min(p1, jc + NC_PANELS);
    for (int kb = 0; kb < kblocks; kb++) {
      const int k0 = pb.k0[kb], kc = pb.k0[kb + 1] - k0;
      const bool first = kb == 0;
      for (int ic = r0; ic < r1; ic += mc_step) {
        const int mc = std::min(mc_step, r1 - ic);
        pack_a(a + static_cast<size_t>(ic) * k + k0, k, mc, kc, abuf);
        for (int p = jc; p < jc1; p++) {
          const float* bp = pb.panel(kb, p);
          const int nr = std::min(NR, n - p * NR);
          const float* bias_p = bias ? bias + p * NR : nullptr;
          for (int ir = 0; ir < mc; ir += MR) {
            kernel_6x16(kc, abuf + static_cast<size_t>(ir) * kc, bp, c + static_cast<size_t>(ic + ir) * n + p * NR, n,
                        std::min(MR, mc - ir), nr, first, bias_p);
          }
        }
      }
    }
  }
}

// M rows of A (unpacked, row stride k) times one B panel over all of k, written to C with
// bias. For M ≤ 3 two accumulator sets (even and odd t) keep enough FMA chains in flight.
template <int M>
void kernel_small(const float* a, const PackedB& pb, int p, const float* bias, float* c) {
  const int n = pb.n, k = pb.k;
  const int kblocks = static_cast<int>(pb.k0.size()) - 1;
  constexpr int SETS = M <= 3 ? 2 : 1;
  __m256 acc[SETS][M][2];
  for (int s = 0; s < SETS; s++)
    for (int i = 0; i < M; i++) acc[s][i][0] = acc[s][i][1] = _mm256_setzero_ps();
  for (int kb = 0; kb < kblocks; kb++) {
    const int k0 = pb.k0[kb], kc = pb.k0[kb + 1] - k0;
    const float* b = pb.panel(kb, p);
    const float* ak = a + k0;
    int t = 0;
    if (SETS == 2) {
      for (; t + 1 < kc; t += 2) {
        const __m256 b0 = _mm256_load_ps(b + t * NR), b1 = _mm256_load_ps(b + t * NR + 8);
        const __m256 b2 = _mm256_load_ps(b + t * NR + NR), b3 = _mm256_load_ps(b + t * NR + NR + 8);
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
      for (int i = 0; i < M; i++) {
        const __m256 x = _mm256_broadcast_ss(ak + static_cast<size_t>(i) * k + t);
        acc[0][i][0] = _mm256_fmadd_ps(x, b0, acc[0][i][0]);
        acc[0][i][1] = _mm256_fmadd_ps(x, b1, acc[0][i][1]);
      }
    }
  }
  if (SETS == 2) {
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
    for (int i = 0; i < M; i++) {
      _mm256_storeu_ps(cp + static_cast<size_t>(i) * n, _mm256_add_ps(acc[0][i][0], bias0));
      _mm256_storeu_ps(cp + static_cast<size_t>(i) * n + 8, _mm256_add_ps(acc[0][i][1], bias1));
    }
  } else {
    alignas(32) float tmp[MR * NR];
    for (int i = 0; i < M; i++) {
      _mm256_store_ps(tmp + i * NR, acc[0][i][0]);
      _mm256_store_ps(tmp + i * NR + 8, acc[0][i][1]);
    }
    store_edge(tmp, cp, n, M, nr, true, bias_p);
  }
}

void small_rows(const float* a, int rows, const PackedB& pb, int p, const float* bias, float* c) {
  switch (rows) {
    case 1: kernel_small<1>(a, pb, p, bias, c); break;
    case 2: kernel_small<2>(a, pb, p, bias, c); break;
    case 3: kernel_small<3>(a, pb, p, bias, c); break;
    case 4: kernel_small<4>(a, pb, p, bias, c); break;
    case 5: kernel_small<5>(a, pb, p, bias, c); break;
    default: kernel_small<6>(a, pb, p, bias, c); break;
  }
}

// C[0..m) × panels [p0..p1) for small m: each panel is read from memory once (by the first
// row group) and stays in L2 for the others.
void gemm_small(const float* a, int m, const PackedB& pb, const float* bias, float* c, int p0, int p1) {
  const size_t k = pb.k, n = pb.n;
  for (int p = p0; p < p1; p++)
    for (int i = 0; i < m; i += MR) small_rows(a + i * k, std::min(MR, m - i), pb, p, bias, c + i * n);
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
  const int mpanels = (m + MR - 1) / MR;
  // Below ~1 MFLOP the fork/join costs more than it saves.
  const double flops = 2.0 * m * pb.n * pb.k;
  threads = std::max(1, flops < 1e6 ? 1 : threads);
  threads = std::min(threads, std::max(np, mpanels));

  if (m <= SMALL_M) {
    threads = std::min(threads, np);
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      gemm_small(a, m, pb, bias, c, static_cast<int>(static_cast<int64_t>(np) * t / nt),
                 static_cast<int>(static_cast<int64_t>(np) * (t + 1) / nt));
    }
    return;
  }

  // Thread grid tm × tn: the least padded work per thread; ties go to splitting rows, which
  // keeps each thread's column range long and shares B blocks through L3.
  int tm = 1, tn = threads;
  int64_t best = INT64_MAX;
  for (int f = threads; f >= 1; f--) {
    if (threads % f) continue;
    const int g = threads / f;
    const int64_t cost = static_cast<int64_t>((mpanels + f - 1) / f) * ((np + g - 1) / g);
    if (cost < best) {
      best = cost;
      tm = f;
      tn = g;
    }
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // A smaller team than asked for: the threads present share the whole grid.
    for (int cell = t; cell < tm * tn; cell += nt) {
      const int ti = cell / tn, tj = cell % tn;
      const int r0 = std::min(m, static_cast<int>(static_cast<int64_t>(mpanels) * ti / tm) * MR);
      const int r1 = std::min(m, static_cast<int>(static_cast<int64_t>(mpanels) * (ti + 1) / tm) * MR);
      const int p0 = static_cast<int>(static_cast<int64_t>(np) * tj / tn);
      const int p1 = static_cast<int>(static_cast<int64_t>(np) * (tj + 1) / tn);
      if (r0 < r1 && p0 < p1) gemm_block(a, pb, bias, c, r0, r1, p0, p1);
    }
  }
}

}  // namespace ctxr
