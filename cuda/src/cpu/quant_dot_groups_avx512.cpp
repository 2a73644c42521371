// MXFP4 decode against grouped activations (quant_act_groups.h), AVX-512 VNNI + VBMI: four
// blocks (68 bytes, 128 weights) a step. One vpermt2b gathers the four blocks' 16-byte qs into a
// register, a vpermb their E8M0 exponents into the int32 lanes; the nibbles are looked up as
// v + 12 (unsigned, 0..24) so that dpbusd takes them with the signed activations directly, the
// accumulator starting at −12·Σa. About a third of the instructions of the two-block kernel
// (quant_dot32_acts_avx512.cpp), which left MXFP4 decode short of the memory's bandwidth. A
// row's last, partial group is read with masked loads against zero-padded activations.
#include <cstring>

#include "cpu/avx512_blocks.h"
#include "cpu/quant_act_groups.h"
#include "cpu/quant_dot.h"
#include "quant_blocks32.h"

#define CTXR_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi2")))

namespace ctxr {

namespace {

constexpr int kMxfp4Offset = 12;


struct alignas(64) GroupIndices {
  uint8_t qs[64];  // byte 16j + i ← byte 17j + 1 + i of the four blocks (qs of block j)
  uint8_t e[64];   // byte 4k ← byte 17·(k/4) (the exponent of lane k's block)
  int8_t table[64];  // v + offset of each nibble, four times: vpermb reads an index's low 6 bits
  GroupIndices() : qs{}, e{}, table{} {
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 16; i++) qs[16 * j + i] = static_cast<uint8_t>(17 * j + 1 + i);
    for (int k = 0; k < 16; k++) e[4 * k] = static_cast<uint8_t>(17 * (k / 4));
    for (int v = 0; v < 64; v++) table[v] = static_cast<int8_t>(kMxfp4Values[v % 16] + kMxfp4Offset);
  }
};
const GroupIndices kIndices;

// Each lane's exponent as e − 128, the power of two e8m0_to_f32_half gives: scalef by it is that
// product exactly, subnormal halves (e < 2) included.
CTXR_AVX512_VBMI inline __m512 half_exponents(__m512i e) { return _mm512_sub_ps(_mm512_cvtepi32_ps(e), _mm512_set1_ps(128.f)); }

// One group's 128 products with each of N activation rows into acc; `bytes` of the group exist
// (68, or 17 per block of a row's last, partial group: the rest read as zeros).
template <int N>
CTXR_AVX512_VBMI inline void group_step(const uint8_t* p, __mmask64 first, __mmask64 second, const ActGroup4* a, size_t group_stride, __m512i qs_index,
                                        __m512i e_index, __m512i table, __m512* acc) {
  const __m512i x0 = _mm512_maskz_loadu_epi8(first, p);
  const __m512i x1 = _mm512_maskz_loadu_epi8(second, p + 64);  // nothing past the group is read
  const __m512i qs = _mm512_permutex2var_epi8(x0, qs_index, x1);
  const __m512 exponent = half_exponents(_mm512_maskz_permutexvar_epi8(0x1111111111111111ull, e_index, x0));
  // No masking of the nibbles: the table repeats every 16 entries, and a high nibble shifted
  // down carries its neighbour's low bits only above bit 3.
  const __m512i ulo = _mm512_permutexvar_epi8(qs, table);
  const __m512i uhi = _mm512_permutexvar_epi8(_mm512_srli_epi16(qs, 4), table);
#pragma GCC unroll 4
  for (int i = 0; i < N; i++) {
    const ActGroup4& g = a[i * group_stride];
    __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512(g.offset_sum), ulo, _mm512_load_si512(g.lo));
    dot = _mm512_dpbusd_epi32(dot, uhi, _mm512_load_si512(g.hi));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_scalef_ps(_mm512_load_ps(g.d), exponent), acc[i]);
  }
}

template <int N>
CTXR_AVX512_VBMI void mxfp4_groups(const void* wv, const ActGroup4* a, size_t group_stride, int nb, float* out) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const int whole = nb / 4, rest = nb % 4;
  const __m512i qs_index = _mm512_load_si512(kIndices.qs), e_index = _mm512_load_si512(kIndices.e);
  const __m512i table = _mm512_load_si512(kIndices.table);
  __m512 acc[N];
  for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps();
  for (int g = 0; g < whole; g++) group_step<N>(w + 68 * static_cast<size_t>(g), ~0ull, 0xF, a + g, group_stride, qs_index, e_index, table, acc);
  if (rest > 0) group_step<N>(w + 68 * static_cast<size_t>(whole), (1ull << (17 * rest)) - 1, 0, a + whole, group_stride, qs_index, e_index, table, acc);
  for (int i = 0; i < N; i++) out[i] = _mm512_reduce_add_ps(acc[i]);
}

}  // namespace

bool cpu_has_avx512_vbmi() {
  __builtin_cpu_init();
  return cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512vbmi");
}

QuantDotGroupsFn quant_dot_groups_avx512(DType t, int n) {
  static_assert(quant_dot_max_acts() == 4, "the grouped kernels are instantiated for 1..4 rows");
  static const bool vbmi = cpu_has_avx512_vbmi();
  if (t != DType::MXFP4 || !vbmi || n < 1 || n > quant_dot_max_acts()) return nullptr;
  static constexpr QuantDotGroupsFn fns[] = {mxfp4_groups<1>, mxfp4_groups<2>, mxfp4_groups<3>, mxfp4_groups<4>};
  return fns[n - 1];
}

int quant_dot_groups_offset(DType) { return kMxfp4Offset; }

}  // namespace ctxr
