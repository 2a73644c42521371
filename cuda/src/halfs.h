// IEEE half and bfloat16 to float32 widening (host side).
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
