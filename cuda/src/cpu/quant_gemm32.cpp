#include "cpu/quant_gemm32.h"

#include <immintrin.h>

#include <stdexcept>

#include "cpu/quant_blocks32_simd.h"
#include "quant_blocks32.h"

namespace ctxr {

namespace {

// A table of the 16 values plus z, as unsigned bytes (IQ4_NL z = 128, MXFP4 z = 12).
__m256i unsigned_table(const int8_t* values, int zero) {
  alignas(16) uint8_t u[16];
  for (int i = 0; i < 16; i++) u[i] = static_cast<uint8_t>(values[i] + zero);
  return simd32::table(reinterpret_cast<const int8_t*>(u));
}

inline void store(uint8_t* u, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), v); }

template <typename Block, bool kFifthBit, bool kMin>
void unpack_linear(const uint8_t* row, int blocks, uint8_t* u, float* s, float* o) {
  const auto* b = reinterpret_cast<const Block*>(row);
  for (int i = 0; i < blocks; i++, u += 32) {
    s[i] = _cvtsh_ss(b[i].d);
    if constexpr (kMin) o[i] = _cvtsh_ss(b[i].m);
    if constexpr (kFifthBit) store(u, _mm256_or_si256(simd32::nibbles(b[i].qs), simd32::fifth_bits(b[i].qh)));
    else store(u, simd32::nibbles(b[i].qs));
  }
}

}  // namespace

bool gemm32_format(DType t, int& zero, bool& offset) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: zero = 0, offset = true; return true;
    case DType::Q5_0: zero = 16, offset = false; return true;
    case DType::IQ4_NL: zero = 128, offset = false; return true;
    case DType::MXFP4: zero = 12, offset = false; return true;
    default: return false;
  }
}

void gemm32_unpack_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o) {
  const int blocks = k / 32;
  switch (t) {
    case DType::Q4_1: return unpack_linear<BlockQ4_1, false, true>(row, blocks, u, s, o);
    case DType::Q5_0: return unpack_linear<BlockQ5_0, true, false>(row, blocks, u, s, o);
    case DType::Q5_1: return unpack_linear<BlockQ5_1, true, true>(row, blocks, u, s, o);
    case DType::IQ4_NL: {
      static const __m256i table = unsigned_table(kIq4nlValues, 128);
      const auto* b = reinterpret_cast<const BlockIQ4_NL*>(row);
      for (int i = 0; i < blocks; i++, u += 32) s[i] = _cvtsh_ss(b[i].d), store(u, simd32::table_lookup(table, b[i].qs));
      return;
    }
    case DType::MXFP4: {
      static const __m256i table = unsigned_table(kMxfp4Values, 12);
      const auto* b = reinterpret_cast<const BlockMXFP4*>(row);
      for (int i = 0; i < blocks; i++, u += 32) s[i] = e8m0_to_f32_half(b[i].e), store(u, simd32::table_lookup(table, b[i].qs));
      return;
    }
    default: throw std::invalid_argument("gemm32_unpack_row: not a 32-element block format");
  }
}

}  // namespace ctxr
