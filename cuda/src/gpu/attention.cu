// Paged attention of the CUDA backend, float32 throughout.
//
// Three kernels share the work of one call; each query token is handled by exactly one of the
// first two, decided on the device by the same predicate (tile_uniform):
//
//  * attn_tiled_kernel<D> (D = 64 or 128): the batch's tokens are cut into tiles of T
//    consecutive tokens, T = 64 / G (G = heads / kv_heads, the query heads sharing a kv head).
//    A tile whose tokens (at least two) all belong to one sequence is one thread block per kv
//    head: its T·G ≤ 64 query rows share every K/V chunk of 64 entries staged in shared memory,
//    and each row keeps an online softmax (running max, running sum, rescaled accumulator) in
//    registers. This is the prefill / recompute path: K/V traffic is divided by 64 rows.
//  * attn_rows_kernel: one block per (token, kv head, split) for every other token (decode
//    steps of many sequences, lone tokens, tiles mixing sequences, other head sizes). Its G
//    query heads share each staged K/V chunk. When there are too few (token, kv head) pairs to
//    fill the GPU, the entries are split into `nsplit` ranges (flash-decoding) whose partial
//    (max, sum, accumulator) triples attn_combine_kernel merges.
//  * attn_stats_kernel (only when statistics are asked for): for each token with a stat row,
//    per head a first pass for the softmax max and sum and a second for the probabilities,
//    averaged over heads into the row.
//
// Masking: a token sees entries 0 .. token_len-1 of its sequence; entry s lives in slot
// block_tables[seq][s / block_size] * block_size + s % block_size.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/cuda_util.h"
#include "gpu/kernels.h"

namespace ctxr::gpu {
namespace {

struct Common {
  const float* q;
  int q_stride;
  const float* kc;  // this layer's K cache [num_slots][kvw]
  const float* vc;
  int kvw;
  const int32_t* block_tables;
  int max_blocks;
  int block_size;
  int cap;  // max_blocks * block_size: no token sees more entries than its table can address
  const int32_t* token_seq;
  const int32_t* token_len;
  int n_tokens;
  int heads;
  int group;  // heads / kv_heads
  int head_dim;
  float scale;
  int tile_tokens;  // T of the tiled kernel; 0 when it is not launched
  float* out;
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// True when the tiled kernel handles the tokens of `tile` (tiles of T consecutive tokens).
__device__ bool tile_uniform(const Common& c, int tile) {
  const int T = c.tile_tokens;
  if (T < 2) return false;
  const int start = tile * T;
  const int end = min(start + T, c.n_tokens);
  if (end - start < 2) return false;
  const int s0 = c.token_seq[start];
  for (int i = start + 1; i < end; i++)
    if (c.token_seq[i] != s0) return false;
  return true;
}

__device__ __forceinline__ int visible_len(const Common& c, int t) {
  return max(0, min(c.token_len[t], c.cap));
}

__device__ __forceinline__ int slot_of(const Common& c, int seq, int s) {
  const int blk = c.block_tables[static_cast<size_t>(seq) * c.max_blocks + s / c.block_size];
  return blk * c.block_size + s % c.block_size;
}

// ---------------------------------------------------------------------------------------------
// Tiled kernel. 256 threads as a 16×16 grid (ty, tx): thread (ty, tx) owns query rows
// ty*4 .. ty*4+3 and, of each 64-entry chunk, the scores of entries tx*4 .. tx*4+3; of the
// output it owns columns jj*64 + tx*4 .. +3 for jj < D/64. A row's 16 owners are lanes of one
// half-warp, so row max and sum are 4 xor-shuffles.
constexpr int kTileRows = 64;
constexpr int kTileKeys = 64;
constexpr int kTileThreads = 256;
constexpr int kQS = kTileRows + 4;  // row stride of Qt [D][kQS] and Pt [kTileKeys][kQS]
constexpr int kKS = kTileKeys + 4;  // row stride of Kt [D][kKS]

template <int D>
__host__ __device__ constexpr int tiled_buf_floats() {
  return D * kKS > kTileKeys * (D + 4) ? D * kKS : kTileKeys * (D + 4);
}
template <int D>
constexpr size_t tiled_smem_bytes() {
  return sizeof(float) * (static_cast<size_t>(D) * kQS + tiled_buf_floats<D>() + kTileKeys * kQS);
}

// Entry e of a chunk load (e over kTileKeys * D/4 float4s) -> (key, d4): a warp covers 8 keys ×
// 4 consecutive float4s, so each key's 64 bytes are contiguous in global memory and the
// transposed shared-memory stores conflict at most 2-way.
template <int D>
__device__ __forceinline__ void chunk_coord(int e, int* key, int* d4) {
  constexpr int D4 = D / 4;
  const int w = e >> 5, lane = e & 31;
  *key = (w / (D4 / 4)) * 8 + (lane >> 2);
  *d4 = (w % (D4 / 4)) * 4 + (lane & 3);
}

template <int D>
__global__ void __launch_bounds__(kTileThreads, 2) attn_tiled_kernel(const Common c) {
  static_assert(D % 64 == 0, "tiled attention needs head_dim a multiple of 64");
  constexpr int VS = D + 4;                          // row stride of Vs [kTileKeys][VS]
  constexpr int NV = kTileKeys * D / 4 / kTileThreads;  // float4s per thread per chunk
  constexpr int DC = D / 64;                         // output column groups per thread
  extern __shared__ __align__(16) float smem[];
  float* Qt = smem;                            // [D][kQS]
  float* buf = Qt + D * kQS;                   // Kt [D][kKS], then Vs [kTileKeys][VS]
  float* Pt = buf + tiled_buf_floats<D>();     // [kTileKeys][kQS]
  __shared__ int slot_sh[kTileKeys];
  __shared__ int len_sh[kTileRows];
  __shared__ int info[2];  // uniform flag, largest len of the tile

  const int tid = threadIdx.x;
  const int G = c.group, T = c.tile_tokens;
  const int rows = T * G;  // ≤ kTileRows
  const int t0 = blockIdx.x * T;
  const int kh = blockIdx.y;

  if (tid == 0) info[0] = tile_uniform(c, blockIdx.x) ? 1 : 0;
  if (tid < kTileRows) {
    int len = 0;
    if (tid < rows) {
      const int t = t0 + tid / G;
      if (t < c.n_tokens) len = visible_len(c, t);
    }
    len_sh[tid] = len;
  }
  __syncthreads();
  if (!info[0]) return;  // block-uniform
  if (tid == 0) {
    int mx = 0;
    for (int r = 0; r < rows; r++) mx = max(mx, len_sh[r]);
    info[1] = mx;
  }
  // Q, transposed: Qt[d][r] (rows past the tile's end are zero and fully masked).
  for (int e = tid; e < kTileRows * D; e += kTileThreads) {
    const int r = e / D, d = e % D;
    float v = 0.f;
    if (r < rows) {
      const int t = t0 + r / G;
      if (t < c.n_tokens) {
        const int h = kh * G + r % G;
        v = c.q[static_cast<size_t>(t) * c.q_stride + static_cast<size_t>(h) * D + d];
      }
    }
    Qt[d * kQS + r] = v;
  }
  __syncthreads();

  const int tx = tid % 16, ty = tid / 16;
  const int seq = c.token_seq[t0];
  const int max_len = info[1];
  float m_run[4], l_run[4], acc[4][DC * 4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m_run[i] = neg_inf();
    l_run[i] = 0.f;
#pragma unroll
    for (int j = 0; j < DC * 4; j++) acc[i][j] = 0.f;
  }
  const float* kbase = c.kc + static_cast<size_t>(kh) * D;
  const float* vbase = c.vc + static_cast<size_t>(kh) * D;

  for (int k0 = 0; k0 < max_len; k0 += kTileKeys) {
    if (tid < kTileKeys) {
      const int s = k0 + tid;
      slot_sh[tid] = s < max_len ? slot_of(c, seq, s) : -1;
    }
    __syncthreads();
    // K -> Kt (transposed) now; V -> registers, stored once the scores are done.
    float4 vreg[NV];
#pragma unroll
    for (int u = 0; u < NV; u++) {
      int key, d4;
      chunk_coord<D>(tid + u * kTileThreads, &key, &d4);
      const int slot = slot_sh[key];
      float4 kv4 = make_float4(0.f, 0.f, 0.f, 0.f), vv4 = kv4;
      if (slot >= 0) {
        const size_t off = static_cast<size_t>(slot) * c.kvw + d4 * 4;
        kv4 = *reinterpret_cast<const float4*>(kbase + off);
        vv4 = *reinterpret_cast<const float4*>(vbase + off);
      }
      vreg[u] = vv4;
      buf[(d4 * 4 + 0) * kKS + key] = kv4.x;
      buf[(d4 * 4 + 1) * kKS + key] = kv4.y;
      buf[(d4 * 4 + 2) * kKS + key] = kv4.z;
      buf[(d4 * 4 + 3) * kKS + key] = kv4.w;
    }
    __syncthreads();

    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) s[i][j] = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; d++) {
      const float4 a = *reinterpret_cast<const float4*>(&Qt[d * kQS + ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&buf[d * kKS + tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
      float mx = neg_inf();
      const int row_len = len_sh[ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int key = k0 + tx * 4 + j;
        s[i][j] = key < row_len ? s[i][j] * c.scale : neg_inf();
        mx = fmaxf(mx, s[i][j]);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run[i], mx);
      const float m_use = m_new == neg_inf() ? 0.f : m_new;  // row still fully masked
      const float alpha = expf(m_run[i] - m_use);             // 0 while m_run is -inf
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        s[i][j] = expf(s[i][j] - m_use);  // masked: exp(-inf) = 0
        sum += s[i][j];
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l_run[i] = l_run[i] * alpha + sum;
      m_run[i] = m_new;
#pragma unroll
      for (int j = 0; j < DC * 4; j++) acc[i][j] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
      *reinterpret_cast<float4*>(&Pt[(tx * 4 + j) * kQS + ty * 4]) =
          make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
    __syncthreads();  // scores read Kt for the last time; P complete

#pragma unroll
    for (int u = 0; u < NV; u++) {
      int key, d4;
      chunk_coord<D>(tid + u * kTileThreads, &key, &d4);
      *reinterpret_cast<float4*>(&buf[key * VS + d4 * 4]) = vreg[u];
    }
    __syncthreads();

#pragma unroll 4
    for (int key = 0; key < kTileKeys; key++) {
      const float4 p4 = *reinterpret_cast<const float4*>(&Pt[key * kQS + ty * 4]);
      const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int jj = 0; jj < DC; jj++) {
        const float4 v4 = *reinterpret_cast<const float4*>(&buf[key * VS + jj * 64 + tx * 4]);
        const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int k = 0; k < 4; k++) acc[i][jj * 4 + k] = fmaf(pv[i], vv[k], acc[i][jj * 4 + k]);
      }
    }
    __syncthreads();  // before the next chunk overwrites slot_sh, buf and Pt
  }

#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = ty * 4 + i;
    if (r >= rows) continue;
    const int t = t0 + r / G;
    if (t >= c.n_tokens) continue;
    const int h = kh * G + r % G;
    const float inv = l_run[i] > 0.f ? 1.0f / l_run[i] : 0.f;
    float* o = c.out + static_cast<size_t>(t) * c.heads * D + static_cast<size_t>(h) * D;
#pragma unroll
    for (int jj = 0; jj < DC; jj++)
#pragma unroll
      for (int k = 0; k < 4; k++) o[jj * 64 + tx * 4 + k] = acc[i][jj * 4 + k] * inv;
  }
}

// ---------------------------------------------------------------------------------------------
// Per-token kernel: block (token, kv head, split), 128 threads, chunks of 32 entries. Shared
// memory: q [G][D], K and V chunks [32][D+1], scores [G][32], accumulators [G][D], and per head
// running max, running sum and the chunk's rescale factor.
constexpr int kRowThreads = 128;
constexpr int kRowKeys = 32;

size_t rows_smem_bytes(int G, int D) {
  return sizeof(float) * (static_cast<size_t>(G) * D * 2 + 2 * static_cast<size_t>(kRowKeys) * (D + 1) +
                          static_cast<size_t>(G) * kRowKeys + 3 * static_cast<size_t>(G));
}

__global__ void __launch_bounds__(kRowThreads) attn_rows_kernel(const Common c, int nsplit, int span,
                                                                float* part_acc, float* part_ml) {
  const int t = blockIdx.x, kh = blockIdx.y, sp = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int G = c.group, D = c.head_dim;
  __shared__ int skip;
  __shared__ int slot_sh[kRowKeys];
  if (tid == 0) skip = (c.tile_tokens > 0 && tile_uniform(c, t / c.tile_tokens)) ? 1 : 0;
  __syncthreads();
  if (skip) return;  // block-uniform: the tiled kernel has this token

  extern __shared__ float sm[];
  float* qs = sm;                         // [G][D]
  float* ks = qs + G * D;                 // [kRowKeys][D+1]
  float* vs = ks + kRowKeys * (D + 1);    // [kRowKeys][D+1]
  float* sc = vs + kRowKeys * (D + 1);    // [G][kRowKeys]
  float* acc = sc + G * kRowKeys;         // [G][D]
  float* m_run = acc + G * D;             // [G]
  float* l_run = m_run + G;               // [G]
  float* alpha = l_run + G;               // [G]

  const int seq = c.token_seq[t];
  const int len = visible_len(c, t);
  const int begin = sp * span;
  // The last split runs to the token's end even if max_len understated it.
  const int end = sp == nsplit - 1 ? len : min(len, begin + span);

  for (int e = tid; e < G * D; e += kRowThreads) {
    const int g = e / D, d = e % D;
    qs[e] = c.q[static_cast<size_t>(t) * c.q_stride + static_cast<size_t>(kh * G + g) * D + d];
    acc[e] = 0.f;
  }
  for (int g = tid; g < G; g += kRowThreads) {
    m_run[g] = neg_inf();
    l_run[g] = 0.f;
  }
  const float* kbase = c.kc + static_cast<size_t>(kh) * D;
  const float* vbase = c.vc + static_cast<size_t>(kh) * D;

  for (int k0 = begin; k0 < end; k0 += kRowKeys) {
    const int nk = min(kRowKeys, end - k0);
    if (tid < kRowKeys) slot_sh[tid] = tid < nk ? slot_of(c, seq, k0 + tid) : -1;
    __syncthreads();  // also orders the q/acc/m/l initialisation before first use
    for (int e = tid; e < kRowKeys * D; e += kRowThreads) {
      const int key = e / D, d = e % D;
      const int slot = slot_sh[key];
      float kv = 0.f, vv = 0.f;
      if (slot >= 0) {
        const size_t off = static_cast<size_t>(slot) * c.kvw + d;
        kv = kbase[off];
        vv = vbase[off];
      }
      ks[key * (D + 1) + d] = kv;
      vs[key * (D + 1) + d] = vv;
    }
    __syncthreads();
    for (int e = tid; e < G * kRowKeys; e += kRowThreads) {
      const int g = e / kRowKeys, key = e % kRowKeys;
      float s = neg_inf();
      if (key < nk) {
        const float* qr = qs + g * D;
        const float* kr = ks + key * (D + 1);
        float dot = 0.f;
        for (int d = 0; d < D; d++) dot = fmaf(qr[d], kr[d], dot);
        s = dot * c.scale;
      }
      sc[e] = s;
    }
    __syncthreads();
    for (int g = warp; g < G; g += kRowThreads / 32) {  // one warp per head, one lane per entry
      const float v = sc[g * kRowKeys + lane];
      float mx = v;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m_run[g];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == neg_inf() ? 0.f : m_new;
      const float p = expf(v - m_use);
      float sum = p;
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      sc[g * kRowKeys + lane] = p;
      __syncwarp();
      if (lane == 0) {
        const float a = expf(m_old - m_use);
        alpha[g] = a;
        l_run[g] = l_run[g] * a + sum;
        m_run[g] = m_new;
      }
    }
    __syncthreads();
    for (int e = tid; e < G * D; e += kRowThreads) {
      const int g = e / D, d = e % D;
      const float* pr = sc + g * kRowKeys;
      float a = acc[e] * alpha[g];
      for (int key = 0; key < nk; key++) a = fmaf(pr[key], vs[key * (D + 1) + d], a);
      acc[e] = a;
    }
    __syncthreads();  // before the next chunk overwrites slot_sh, ks, vs, sc, alpha
  }
  __syncthreads();  // when no chunk ran: the initialisation is complete

  for (int e = tid; e < G * D; e += kRowThreads) {
    const int g = e / D, d = e % D;
    const int h = kh * G + g;
    if (nsplit == 1) {
      const float l = l_run[g];
      c.out[static_cast<size_t>(t) * c.heads * D + static_cast<size_t>(h) * D + d] = l > 0.f ? acc[e] / l : 0.f;
    } else {
      part_acc[((static_cast<size_t>(t) * c.heads + h) * nsplit + sp) * D + d] = acc[e];
    }
  }
  if (nsplit > 1) {
    for (int g = tid; g < G; g += kRowThreads) {
      const size_t i = (static_cast<size_t>(t) * c.heads + kh * G + g) * nsplit + sp;
      part_ml[2 * i] = m_run[g];
      part_ml[2 * i + 1] = l_run[g];
    }
  }
}

// Merges the splits of attn_rows_kernel: block (token, head).
constexpr int kMaxSplits = 64;

__global__ void attn_combine_kernel(const Common c, int nsplit, const float* part_acc,
                                    const float* part_ml) {
  const int t = blockIdx.x, h = blockIdx.y, D = c.head_dim;
  __shared__ int skip;
  __shared__ float w[kMaxSplits];
  __shared__ float inv_l;
  if (threadIdx.x == 0) skip = (c.tile_tokens > 0 && tile_uniform(c, t / c.tile_tokens)) ? 1 : 0;
  __syncthreads();
  if (skip) return;  // block-uniform: the tiled kernel has this token
  if (threadIdx.x == 0) {
    const float* ml = part_ml + (static_cast<size_t>(t) * c.heads + h) * nsplit * 2;
    float m = neg_inf();
    for (int i = 0; i < nsplit; i++)
      if (ml[2 * i + 1] > 0.f) m = fmaxf(m, ml[2 * i]);
    float l = 0.f;
    for (int i = 0; i < nsplit; i++) {
      w[i] = ml[2 * i + 1] > 0.f ? expf(ml[2 * i] - m) : 0.f;  // empty split: weight 0
      l += ml[2 * i + 1] * w[i];
    }
    inv_l = l > 0.f ? 1.0f / l : 0.f;
  }
  __syncthreads();
  const float* pa = part_acc + (static_cast<size_t>(t) * c.heads + h) * nsplit * D;
  float* o = c.out + static_cast<size_t>(t) * c.heads * D + static_cast<size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0.f;
    for (int i = 0; i < nsplit; i++) v = fmaf(pa[static_cast<size_t>(i) * D + d], w[i], v);
    o[d] = v * inv_l;
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics: block per token (256 threads, 8 warps); warp w takes entries w, w+8, ...; the
// lanes split head_dim for each dot product.
constexpr int kStatThreads = 256;

__device__ __forceinline__ float warp_dot(const float* q, const float* k, int D, int lane) {
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s = fmaf(q[d], k[d], s);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

__global__ void __launch_bounds__(kStatThreads) attn_stats_kernel(const Common c, const int32_t* stat_row,
                                                                  float* stats, int max_len) {
  const int t = blockIdx.x;
  const int row = stat_row[t];
  if (row < 0) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int NW = kStatThreads / 32;
  const int D = c.head_dim, G = c.group;
  extern __shared__ float qsh[];  // [D]
  __shared__ float red_m[NW], red_l[NW];

  const int seq = c.token_seq[t];
  const int len = min(visible_len(c, t), max_len);
  float* srow = stats + static_cast<size_t>(row) * max_len;
  for (int s = tid; s < max_len; s += kStatThreads) srow[s] = 0.f;
  const float inv_heads = 1.0f / static_cast<float>(c.heads);

  for (int h = 0; h < c.heads; h++) {
    __syncthreads();  // previous head done with qsh / red_*; zero fill done
    for (int d = tid; d < D; d += kStatThreads)
      qsh[d] = c.q[static_cast<size_t>(t) * c.q_stride + static_cast<size_t>(h) * D + d];
    __syncthreads();
    const float* kbase = c.kc + static_cast<size_t>(h / G) * D;
    float m = neg_inf(), l = 0.f;
    for (int s = warp; s < len; s += NW) {
      const int slot = slot_of(c, seq, s);
      const float sc = warp_dot(qsh, kbase + static_cast<size_t>(slot) * c.kvw, D, lane) * c.scale;
      const float m_new = fmaxf(m, sc);
      l = l * expf(m - m_new) + expf(sc - m_new);
      m = m_new;
    }
    if (lane == 0) {
      red_m[warp] = m;
      red_l[warp] = l;
    }
    __syncthreads();
    float M = neg_inf();
    for (int w = 0; w < NW; w++)
      if (red_l[w] > 0.f) M = fmaxf(M, red_m[w]);
    float L = 0.f;
    for (int w = 0; w < NW; w++)
      if (red_l[w] > 0.f) L += red_l[w] * expf(red_m[w] - M);
    const float scale_p = L > 0.f ? inv_heads / L : 0.f;
    for (int s = warp; s < len; s += NW) {
      const int slot = slot_of(c, seq, s);
      const float sc = warp_dot(qsh, kbase + static_cast<size_t>(slot) * c.kvw, D, lane) * c.scale;
      if (lane == 0) srow[s] += expf(sc - M) * scale_p;  // entry s is always this warp's
    }
  }
}

// ---------------------------------------------------------------------------------------------
struct Plan {
  int group;
  int tile_tokens;  // 0: no tiled kernel
  int nsplit;
  int span;
};

template <int D>
bool tiled_fits(const AttnDevice& dev) {
  return tiled_smem_bytes<D>() + 1024 <= dev.smem_optin;  // + the kernel's static shared memory
}

Plan make_plan(const AttnArgs& a, const AttnDevice& dev) {
  const AttentionBatch& b = *a.batch;
  if (b.heads <= 0 || b.kv_heads <= 0 || b.heads % b.kv_heads != 0)
    throw std::runtime_error("attention: heads must be a positive multiple of kv_heads");
  if (b.head_dim <= 0 || b.kv_heads * b.head_dim != a.kv_width)
    throw std::runtime_error("attention: kv_heads * head_dim must equal the cache's kv_width");
  Plan p{};
  p.group = b.heads / b.kv_heads;
  const bool tiled_ok = p.group * 2 <= kTileRows &&
                        ((b.head_dim == 64 && tiled_fits<64>(dev)) || (b.head_dim == 128 && tiled_fits<128>(dev)));
  p.tile_tokens = tiled_ok ? kTileRows / p.group : 0;
  // Split the entries when (token, kv head) blocks alone would leave most of the GPU idle.
  p.nsplit = 1;
  const long long work = static_cast<long long>(b.n_tokens) * b.kv_heads;
  const long long want = 4LL * (dev.sm_count > 0 ? dev.sm_count : 1);
  if (work < want && b.max_len > 256) {
    long long ns = (want + work - 1) / work;
    ns = std::min<long long>(ns, (b.max_len + 127) / 128);
    ns = std::min<long long>(ns, kMaxSplits);
    p.nsplit = static_cast<int>(std::max<long long>(ns, 1));
  }
  const int len = std::max(b.max_len, 1);
  int span = (len + p.nsplit - 1) / p.nsplit;
  span = (span + kRowKeys - 1) / kRowKeys * kRowKeys;
  p.span = p.nsplit == 1 ? (1 << 30) : span;
  if (p.nsplit > 1) p.nsplit = (len + span - 1) / span;  // no split starts past max_len
  return p;
}

Common make_common(const AttnArgs& a, const Plan& p) {
  const AttentionBatch& b = *a.batch;
  Common c{};
  c.q = a.q;
  c.q_stride = a.q_stride;
  c.kc = a.k_layer;
  c.vc = a.v_layer;
  c.kvw = a.kv_width;
  c.block_tables = b.block_tables;
  c.max_blocks = b.max_blocks;
  c.block_size = a.block_size;
  c.cap = b.max_blocks * a.block_size;
  c.token_seq = b.token_seq;
  c.token_len = b.token_len;
  c.n_tokens = b.n_tokens;
  c.heads = b.heads;
  c.group = p.group;
  c.head_dim = b.head_dim;
  c.scale = b.scale;
  c.tile_tokens = p.tile_tokens;
  c.out = a.out;
  return c;
}

template <int D>
void launch_tiled(const Common& c, int kv_heads, cudaStream_t stream) {
  const size_t bytes = tiled_smem_bytes<D>();
  static bool attr_set = false;  // one device per process
  if (!attr_set) {
    CTXR_CUDA_CHECK(cudaFuncSetAttribute(attn_tiled_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
    attr_set = true;
  }
  const int tiles = (c.n_tokens + c.tile_tokens - 1) / c.tile_tokens;
  attn_tiled_kernel<D><<<dim3(tiles, kv_heads), kTileThreads, bytes, stream>>>(c);
  CTXR_CUDA_LAUNCH_CHECK("attn_tiled_kernel");
}

}  // namespace

size_t attention_scratch_bytes(const AttnArgs& a, const AttnDevice& dev) {
  const Plan p = make_plan(a, dev);
  if (p.nsplit <= 1) return 0;
  const AttentionBatch& b = *a.batch;
  return sizeof(float) * static_cast<size_t>(b.n_tokens) * b.heads * p.nsplit * (b.head_dim + 2);
}

void launch_attention(const AttnArgs& a, const AttnDevice& dev, void* scratch, cudaStream_t stream) {
  const AttentionBatch& b = *a.batch;
  if (b.n_tokens <= 0) return;
  if (b.kv_heads > 65535) throw std::runtime_error("attention: too many kv heads");
  const Plan p = make_plan(a, dev);
  const Common c = make_common(a, p);

  if (p.tile_tokens > 0) {
    if (b.head_dim == 64) launch_tiled<64>(c, b.kv_heads, stream);
    else launch_tiled<128>(c, b.kv_heads, stream);
  }

  const size_t rows_bytes = rows_smem_bytes(p.group, b.head_dim);
  if (rows_bytes + 1024 > dev.smem_optin)
    throw std::runtime_error("attention: heads per kv head × head_dim too large for shared memory (" +
                             std::to_string(rows_bytes) + " bytes)");
  if (rows_bytes > 48 * 1024)
    CTXR_CUDA_CHECK(cudaFuncSetAttribute(attn_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(rows_bytes)));
  float* part_acc = nullptr;
  float* part_ml = nullptr;
  if (p.nsplit > 1) {
    if (!scratch) throw std::logic_error("attention: split-KV scratch missing");
    part_acc = static_cast<float*>(scratch);
    part_ml = part_acc + static_cast<size_t>(b.n_tokens) * b.heads * p.nsplit * b.head_dim;
  }
  attn_rows_kernel<<<dim3(b.n_tokens, b.kv_heads, p.nsplit), kRowThreads, rows_bytes, stream>>>(
      c, p.nsplit, p.span, part_acc, part_ml);
  CTXR_CUDA_LAUNCH_CHECK("attn_rows_kernel");
  if (p.nsplit > 1) {
    const int threads = b.head_dim >= 128 ? 128 : 64;
    attn_combine_kernel<<<dim3(b.n_tokens, b.heads), threads, 0, stream>>>(c, p.nsplit, part_acc, part_ml);
    CTXR_CUDA_LAUNCH_CHECK("attn_combine_kernel");
  }

  if (b.stat_row && b.stats && b.max_len > 0) {
    const size_t qbytes = sizeof(float) * b.head_dim;
    attn_stats_kernel<<<b.n_tokens, kStatThreads, qbytes, stream>>>(c, b.stat_row, b.stats, b.max_len);
    CTXR_CUDA_LAUNCH_CHECK("attn_stats_kernel");
  }
}

}  // namespace ctxr::gpu
