// AVX2 unpacking of one 32-element block (quant_blocks32.h) into the 32 bytes of a 256-bit
// register, element i in byte i: shared by the decode dot kernels of both instruction sets.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "quant_blocks32.h"

namespace ctxr::simd32 {

// Low nibbles of qs[0..16) in bytes 0..15 (elements 0..15), high nibbles in 16..31.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
}

// 0x10 in byte i where bit i of the 32-bit qh is set (Q5's fifth bit), 0 elsewhere.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // Byte i takes byte i / 8 of h (the shuffle works within 128-bit lanes, each holding all of h).
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                                             _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// A 16-entry int8 table in both 128-bit lanes, for table_lookup().
inline __m256i table(const int8_t* values) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(values));
  return _mm256_set_m128i(t, t);
}
inline __m256i table_lookup(__m256i table, const uint8_t* qs) { return _mm256_shuffle_epi8(table, nibbles(qs)); }

}  // namespace ctxr::simd32
