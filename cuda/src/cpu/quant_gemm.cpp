#include "cpu/quant_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "cpu/quant_gemm32.h"
#include "cpu/quant_unpack_superblock.h"
#include "cpu/quantize_activations.h"
#include "halfs.h"
#include "quant.h"
#include "quant_superblock.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define CTXR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace ctxr {

namespace {

constexpr int kNr = 16;         // weight rows per panel (one 512-bit register of int32)
constexpr int kTileRows = 64;   // weight rows unpacked per job (4 panels; 256 KB at k = 4096)
constexpr int kMr512 = 8;       // activation rows per AVX-512 micro-kernel call
constexpr int kMr256 = 2;       // per AVX2 call (two 256-bit halves of a panel each)

struct Format {
  int group;    // elements per scale
  int zero;     // z of w = s·(u − z)
  bool offset;  // Q4_K, Q5_K, Q2_K: per-group additive offset
};

Format format_of(DType t) {
  switch (t) {
    case DType::Q8_0: return {32, 128, false};
    case DType::Q4_0: return {32, 8, false};
    case DType::Q4_K: return {32, 0, true};
    case DType::Q6_K: return {16, 32, false};
    default: {
      SuperblockGemmFormat sf;
      if (superblock_gemm_format(t, sf)) return {sf.group, sf.zero, sf.offset};
      Format f{32, 0, false};
      if (!gemm32_format(t, f.zero, f.offset)) throw std::invalid_argument("quant_gemm: not a quantized dtype");
      return f;
    }
  }
}

// One weight row to unsigned bytes u[k], scales s[k / group] and (Q4_K) offsets o[k / 32].
void unpack_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o) {
  switch (t) {
    case DType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (int i = 0; i < k / 32; i++, u += 32) {
        s[i] = f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) u[j] = static_cast<uint8_t>(b[i].qs[j]) ^ 0x80;
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
      for (int i = 0; i < k / 32; i++, u += 32) {
        s[i] = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
          u[j] = b[i].qs[j] & 15;
          u[j + 16] = b[i].qs[j] >> 4;
        }
      }
      return;
    }
    case DType::Q4_K: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row);
      for (int i = 0; i < k / 256; i++) {
        const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
          int sc, m;
          q4k_scale_min(b[i].scales, j, sc, m);
          s[8 * i + j] = d * sc;
          o[8 * i + j] = -dmin * m;
        }
        for (int c = 0; c < 4; c++, u += 64) {
          const uint8_t* q = b[i].qs + 32 * c;
          for (int l = 0; l < 32; l++) {
            u[l] = q[l] & 15;
            u[l + 32] = q[l] >> 4;
          }
        }
      }
      return;
    }
    case DType::Q6_K: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
      for (int i = 0; i < k / 256; i++) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) s[16 * i + j] = d * b[i].scales[j];
        for (int h = 0; h < 2; h++, u += 128) {
          const uint8_t* ql = b[i].ql + 64 * h;
          const uint8_t* qh = b[i].qh + 32 * h;
          for (int l = 0; l < 32; l++) {
            u[l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
            u[l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
            u[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            u[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
          }
        }
      }
      return;
    }
    default:
      if (dtype_is_superblock(t)) return unpack_superblock_row(t, row, k, u, s, o);
      return gemm32_unpack_row(t, row, k, u, s, o);
  }
}

// A panel of kNr weight rows: q [k/4][kNr][4] bytes, scale [k/group][kNr], offset [k/group][kNr].
struct Panel {
  uint8_t* q;
  float* scale;
  float* offset;
};

// The activations of one GEMM call as a micro-kernel reads them (rows from i0 on).
struct Acts {
  const ActBlock* act;  // [n][nb]
  int nb;
  const int32_t* zs;    // [n][k / group]: −z·Σa over each group, or null when z = 0
  const float* adsum;   // [n][k / group]: d_a·Σa over each group (the offsets'), or null
};

inline int32_t act4(const ActBlock& a, int at) {
  int32_t v;
  std::memcpy(&v, a.q + at, 4);
  return v;
}

template <int MR, int G, bool OFF>
CTXR_AVX512 void kernel_avx512(const Panel& p, int k, const Acts& a, int i0, float* y, int ldy, int valid) {
  __m512 fa[MR];
  for (int i = 0; i < MR; i++) fa[i] = _mm512_setzero_ps();
  const int groups = k / G, zs_ld = k / G;
  const ActBlock* act = a.act + static_cast<size_t>(i0) * a.nb;
  for (int g = 0; g < groups; g++) {
    const int b = g * G / 32, off = (g * G) % 32;
    __m512i ia[MR];
    for (int i = 0; i < MR; i++) ia[i] = a.zs ? _mm512_set1_epi32(a.zs[static_cast<size_t>(i0 + i) * zs_ld + g]) : _mm512_setzero_si512();
    const uint8_t* wq = p.q + static_cast<size_t>(g) * G * kNr;
    for (int t = 0; t < G / 4; t++) {
      const __m512i w = _mm512_loadu_si512(wq + 64 * t);
      for (int i = 0; i < MR; i++) ia[i] = _mm512_dpbusd_epi32(ia[i], w, _mm512_set1_epi32(act4(act[static_cast<size_t>(i) * a.nb + b], off + 4 * t)));
    }
    const __m512 s = _mm512_loadu_ps(p.scale + static_cast<size_t>(g) * kNr);
    for (int i = 0; i < MR; i++)
      fa[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i]), _mm512_mul_ps(s, _mm512_set1_ps(act[static_cast<size_t>(i) * a.nb + b].d)), fa[i]);
    if (OFF) {
      const __m512 o = _mm512_loadu_ps(p.offset + static_cast<size_t>(g) * kNr);
      for (int i = 0; i < MR; i++) fa[i] = _mm512_fmadd_ps(o, _mm512_set1_ps(a.adsum[static_cast<size_t>(i0 + i) * zs_ld + g]), fa[i]);
    }
  }
  const __mmask16 mask = valid >= kNr ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  for (int i = 0; i < MR; i++) _mm512_mask_storeu_ps(y + static_cast<size_t>(i) * ldy, mask, fa[i]);
}

// SIGNED (z = 128: Q8_0, IQ4_NL, IQ4_XS): u + 128 could saturate maddubs, so the kernel takes the
// signed value v = u ^ 0x80 as |v| × a with v's sign (|v| ≤ 128, a ≥ −127: pairs stay below
// 2¹⁵), with no −z·Σa start (Acts.zs null).
template <int MR, int G, bool OFF, bool SIGNED = false>
void kernel_avx2(const Panel& p, int k, const Acts& a, int i0, float* y, int ldy, int valid) {
  __m256 fa[MR][2];
  for (int i = 0; i < MR; i++) fa[i][0] = fa[i][1] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int groups = k / G, zs_ld = k / G;
  const ActBlock* act = a.act + static_cast<size_t>(i0) * a.nb;
  for (int g = 0; g < groups; g++) {
    const int b = g * G / 32, off = (g * G) % 32;
    __m256i ia[MR][2];
    for (int i = 0; i < MR; i++) ia[i][0] = ia[i][1] = a.zs ? _mm256_set1_epi32(a.zs[static_cast<size_t>(i0 + i) * zs_ld + g]) : _mm256_setzero_si256();
    const uint8_t* wq = p.q + static_cast<size_t>(g) * G * kNr;
    for (int t = 0; t < G / 4; t++) {
      __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * t));
      __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 64 * t + 32));
      __m256i v0 = w0, v1 = w1;
      if (SIGNED) {
        v0 = _mm256_xor_si256(w0, _mm256_set1_epi8(static_cast<char>(0x80))), v1 = _mm256_xor_si256(w1, _mm256_set1_epi8(static_cast<char>(0x80)));
        w0 = _mm256_abs_epi8(v0), w1 = _mm256_abs_epi8(v1);
      }
      for (int i = 0; i < MR; i++) {
        const __m256i av = _mm256_set1_epi32(act4(act[static_cast<size_t>(i) * a.nb + b], off + 4 * t));
        const __m256i a0 = SIGNED ? _mm256_sign_epi8(av, v0) : av, a1 = SIGNED ? _mm256_sign_epi8(av, v1) : av;
        ia[i][0] = _mm256_add_epi32(ia[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, a0), ones));
        ia[i][1] = _mm256_add_epi32(ia[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, a1), ones));
      }
    }
    const __m256 s0 = _mm256_loadu_ps(p.scale + static_cast<size_t>(g) * kNr), s1 = _mm256_loadu_ps(p.scale + static_cast<size_t>(g) * kNr + 8);
    for (int i = 0; i < MR; i++) {
      const __m256 d = _mm256_set1_ps(act[static_cast<size_t>(i) * a.nb + b].d);
      fa[i][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][0]), _mm256_mul_ps(s0, d), fa[i][0]);
      fa[i][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][1]), _mm256_mul_ps(s1, d), fa[i][1]);
    }
    if (OFF) {
      const __m256 o0 = _mm256_loadu_ps(p.offset + static_cast<size_t>(g) * kNr), o1 = _mm256_loadu_ps(p.offset + static_cast<size_t>(g) * kNr + 8);
      for (int i = 0; i < MR; i++) {
        const __m256 ds = _mm256_set1_ps(a.adsum[static_cast<size_t>(i0 + i) * zs_ld + g]);
        fa[i][0] = _mm256_fmadd_ps(o0, ds, fa[i][0]);
        fa[i][1] = _mm256_fmadd_ps(o1, ds, fa[i][1]);
      }
    }
  }
  for (int i = 0; i < MR; i++) {
    float* out = y + static_cast<size_t>(i) * ldy;
    if (valid >= kNr) {
      _mm256_storeu_ps(out, fa[i][0]);
      _mm256_storeu_ps(out + 8, fa[i][1]);
    } else {
      alignas(32) float tmp[kNr];
      _mm256_store_ps(tmp, fa[i][0]);
      _mm256_store_ps(tmp + 8, fa[i][1]);
      std::memcpy(out, tmp, static_cast<size_t>(valid) * 4);
    }
  }
}

using KernelFn = void (*)(const Panel&, int, const Acts&, int, float*, int, int);

template <int G, bool OFF>
KernelFn kernel_for(CpuIsa isa, int mr) {
  if (isa == CpuIsa::Avx512Vnni) {
    switch (mr) {
      case 1: return kernel_avx512<1, G, OFF>;
      case 2: return kernel_avx512<2, G, OFF>;
      case 3: return kernel_avx512<3, G, OFF>;
      case 4: return kernel_avx512<4, G, OFF>;
      case 5: return kernel_avx512<5, G, OFF>;
      case 6: return kernel_avx512<6, G, OFF>;
      case 7: return kernel_avx512<7, G, OFF>;
      default: return kernel_avx512<8, G, OFF>;
    }
  }
  return mr == 1 ? kernel_avx2<1, G, OFF> : kernel_avx2<2, G, OFF>;
}

// Whether the AVX2 kernel takes the format's values signed (see kernel_avx2).
bool avx2_signed(const Format& f, CpuIsa isa) { return isa == CpuIsa::Avx2 && f.zero == 128; }

KernelFn kernel_for(const Format& f, CpuIsa isa, int mr) {
  if (avx2_signed(f, isa)) {
    // Q8_0, IQ4_NL and IQ4_XS: groups of 32, no offsets.
    if (f.group != 32 || f.offset) throw std::logic_error("quant_gemm: a z = 128 format with groups of 16 or offsets");
    return mr == 1 ? kernel_avx2<1, 32, false, true> : kernel_avx2<2, 32, false, true>;
  }
  if (f.group == 16) return f.offset ? kernel_for<16, true>(isa, mr) : kernel_for<16, false>(isa, mr);
  return f.offset ? kernel_for<32, true>(isa, mr) : kernel_for<32, false>(isa, mr);
}

// The panel's byte layout from kNr unpacked rows: q32[kk][r] = rows[r][kk] (4-byte groups), by
// 8×8 transposes of 32-bit elements (AVX2, the build's baseline).
void transpose_rows(const uint8_t* rows, int k, uint8_t* q) {
  const int n4 = k / 4;
  for (int kk = 0; kk < n4; kk += 8)
    for (int h = 0; h < kNr / 8; h++) {
      __m256i r[8];
      for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + static_cast<size_t>(8 * h + i) * k + 4 * kk));
      __m256i t[8], u[8];
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);      // columns 0 | 4 of rows i..i+3
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);  // 1 | 5
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // 2 | 6
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // 3 | 7
      }
      auto* out = reinterpret_cast<__m256i*>(q) ;
      for (int j = 0; j < 4; j++) {
        _mm256_storeu_si256(out + (static_cast<size_t>(kk + j) * kNr + 8 * h) / 8, _mm256_permute2x128_si256(u[j], u[j + 4], 0x20));
        _mm256_storeu_si256(out + (static_cast<size_t>(kk + j + 4) * kNr + 8 * h) / 8, _mm256_permute2x128_si256(u[j], u[j + 4], 0x31));
      }
    }
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
std::unique_ptr<T[], AlignedFree> aligned_array(size_t count) {
  void* p = std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return std::unique_ptr<T[], AlignedFree>(static_cast<T*>(p));
}

}  // namespace

bool quant_gemm_supports(const QuantMatrix& w, CpuIsa isa) {
  if (w.cols % 256 != 0 && w.cols % 32 != 0) return false;
  for (const QuantRows& p : w.parts) {
    if (!dtype_quantized(p.dtype)) return false;
  }
  return true;
}

void quant_gemm(const float* x, int n, const QuantMatrix& w, const float* bias, float* y, int threads, CpuIsa isa) {
  if (n <= 0) return;
  if (threads <= 0) threads = omp_get_max_threads();
  const int k = w.cols, nb = k / 32;
  std::vector<ActBlock> act(static_cast<size_t>(n) * nb);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int i = 0; i < n; i++) quantize_activations(x + static_cast<size_t>(i) * k, k, act.data() + static_cast<size_t>(i) * nb, isa);

  // Per part: its format and the activation sums its kernel reads.
  struct PartActs {
    Format f;
    std::vector<int32_t> zs;
    std::vector<float> adsum;
  };
  std::vector<PartActs> part_acts(w.parts.size());
  struct Job {
    int part, row0;
  };
  std::vector<Job> jobs;
  for (size_t pi = 0; pi < w.parts.size(); pi++) {
    const QuantRows& part = w.parts[pi];
    PartActs& pa = part_acts[pi];
    pa.f = format_of(part.dtype);
    bool shared = false;  // the same sums as an earlier part's
    for (size_t e = 0; e < pi && !shared; e++)
      if (part_acts[e].f.group == pa.f.group && part_acts[e].f.zero == pa.f.zero && part_acts[e].f.offset == pa.f.offset) {
        pa.zs = part_acts[e].zs;
        pa.adsum = part_acts[e].adsum;
        shared = true;
      }
    if (!shared) {
      const int groups = k / pa.f.group;
      if (pa.f.zero && !avx2_signed(pa.f, isa)) {
        pa.zs.resize(static_cast<size_t>(n) * groups);
        for (int i = 0; i < n; i++)
          for (int g = 0; g < groups; g++) {
            const ActBlock& ab = act[static_cast<size_t>(i) * nb + g * pa.f.group / 32];
            const int sum = pa.f.group == 32 ? ab.sum[0] + ab.sum[1] : ab.sum[g % 2];
            pa.zs[static_cast<size_t>(i) * groups + g] = -pa.f.zero * sum;
          }
      }
      if (pa.f.offset) {
        pa.adsum.resize(static_cast<size_t>(n) * groups);
        for (int i = 0; i < n; i++)
          for (int g = 0; g < groups; g++) {
            const ActBlock& ab = act[static_cast<size_t>(i) * nb + g * pa.f.group / 32];
            const int sum = pa.f.group == 32 ? ab.sum[0] + ab.sum[1] : ab.sum[g % 2];
            pa.adsum[static_cast<size_t>(i) * groups + g] = ab.d * static_cast<float>(sum);
          }
      }
    }
    for (int r = 0; r < part.rows; r += kTileRows) jobs.push_back({static_cast<int>(pi), r});
  }

  const int mr_max = isa == CpuIsa::Avx512Vnni ? kMr512 : kMr256;
  const int panels_max = kTileRows / kNr;
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint8_t> u(static_cast<size_t>(kNr) * k);  // a panel's rows unpacked
    std::vector<float> s(k / 16), o(k / 16);
    auto q = aligned_array<uint8_t>(static_cast<size_t>(panels_max) * k * kNr);
    auto sc = aligned_array<float>(static_cast<size_t>(panels_max) * (k / 16) * kNr);
    auto of = aligned_array<float>(static_cast<size_t>(panels_max) * (k / 16) * kNr);
#pragma omp for schedule(dynamic)
    for (size_t j = 0; j < jobs.size(); j++) {
      const QuantRows& part = w.parts[jobs[j].part];
      const PartActs& pa = part_acts[jobs[j].part];
      const int groups = k / pa.f.group;
      const int rows = std::min(kTileRows, part.rows - jobs[j].row0), panels = (rows + kNr - 1) / kNr;
      Panel panel[kTileRows / kNr];
      for (int p = 0; p < panels; p++) {
        panel[p] = {q.get() + static_cast<size_t>(p) * k * kNr, sc.get() + static_cast<size_t>(p) * groups * kNr,
                    of.get() + static_cast<size_t>(p) * groups * kNr};
        for (int r = 0; r < kNr; r++) {
          const int row = jobs[j].row0 + p * kNr + r;
          uint8_t* ur = u.data() + static_cast<size_t>(r) * k;
          if (row < part.rows) {
            unpack_row(part.dtype, part.data + static_cast<size_t>(row) * part.row_bytes, k, ur, s.data(), o.data());
          } else {
            std::fill(ur, ur + k, 0);
            std::fill(s.begin(), s.end(), 0.f);
            std::fill(o.begin(), o.end(), 0.f);
          }
          for (int g = 0; g < groups; g++) panel[p].scale[static_cast<size_t>(g) * kNr + r] = s[g];
          if (pa.f.offset)
            for (int g = 0; g < groups; g++) panel[p].offset[static_cast<size_t>(g) * kNr + r] = o[g];
        }
        transpose_rows(u.data(), k, panel[p].q);
      }
      const Acts acts{act.data(), nb, pa.zs.empty() ? nullptr : pa.zs.data(), pa.adsum.empty() ? nullptr : pa.adsum.data()};
      for (int i0 = 0; i0 < n; i0 += mr_max) {
        const int mr = std::min(mr_max, n - i0);
        const KernelFn kernel = kernel_for(pa.f, isa, mr);
        for (int p = 0; p < panels; p++) {
          const int col = part.first_row + jobs[j].row0 + p * kNr;
          kernel(panel[p], k, acts, i0, y + static_cast<size_t>(i0) * w.rows + col, w.rows, std::min(kNr, rows - p * kNr));
        }
      }
    }
    if (bias) {
#pragma omp for schedule(static)
      for (int i = 0; i < n; i++) {
        float* yi = y + static_cast<size_t>(i) * w.rows;
        for (int r = 0; r < w.rows; r++) yi[r] += bias[r];
      }
    }
  }
}

}  // namespace ctxr
