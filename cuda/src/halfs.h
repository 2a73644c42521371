// IEEE half and bfloat16 to float32 widening, and float32 to half rounding (host side).
#pragma once
#include <cstdint>
#include <cstring>

namespace ctxr {

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        e++;
        mantissa <<= 1;
      } while ((mantissa & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mantissa & 0x3FF) << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7F800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rounds to the nearest half (ties to even), as F16C's vcvtps2ph does: overflow gives infinity,
// tiny values subnormals or zero, NaN stays a (quiet) NaN.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x1FF);  // NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                       // below 2^-14: a subnormal half (or zero)
    if (abs < 0x33000000u) return sign;          // below 2^-25: rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24 bits go (mantissa has 24 bits, result 10)
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), half_way = 1u << (shift - 1);
    if (rest > half_way || (rest == half_way && (h & 1))) h++;
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10)) & 0xFFFF;
  const uint32_t rest = abs & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;  // may carry into the exponent: fine
  return sign | static_cast<uint16_t>(h);
}

// Widens n values of `dtype` (0 f32, 1 f16, 2 bf16 as in DType) to float32.
inline void widen_to_f32(const void* src, int dtype, size_t n, float* dst) {
  if (dtype == 0) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == 1)
    for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(h[i]);
  else
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
}

}  // namespace ctxr
